"""What convert writes, the package can read: a conversion the model-directory check would refuse later is refused
by convert, with the same bound (one source: :mod:`timm_vitscratch.choices`), and nothing is written.

Probe r16's input, made here: ``--img-size 4096`` for a patch-8 checkpoint (262,144 patches per image, past the
16,384-patch bound) is refused at once, in a child capped at 200 MB over what it uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.support import tiny
from tests.support.bounded_child import bounded
from timm_vitscratch import choices
from timm_vitscratch.cli import main
from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError, ModelDirectoryError
from timm_vitscratch.model_dir import check_model_directory

pytestmark = pytest.mark.slow  # conversions in capped child processes


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    path = tmp_path / "tiny.pth"
    torch.save(tiny().state_dict(), path)  # patch 8, 32x32 images, 4 heads
    return path


def test_img_size_past_the_patch_bound_is_refused(checkpoint, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", str(checkpoint), str(out), "--img-size", "4096", "--num-heads", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "--img-size 4096x4096: img_size (4096, 4096) at patch_size (8, 8) makes 262,144 patches" in err
    assert "expected at most 16,384; nothing was written" in err
    assert not out.exists()


def test_the_refusal_is_bounded(checkpoint, tmp_path):
    setup = "from timm_vitscratch.convert import convert"
    result = bounded(setup, f"convert({str(checkpoint)!r}, {str(tmp_path / 'out')!r}, img_size=4096, num_heads=4)")
    assert result["type"] == "ConversionError" and "262,144 patches" in result["message"], result
    assert result["peak_growth_mb"] < 200, result
    assert not (tmp_path / "out").exists()
    print(f"r16: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB: {result['message']}")


def test_one_source_for_the_bound(checkpoint, tmp_path, monkeypatch):
    """Lowering the model-directory bound lowers convert's with it: there is no second copy."""
    out = tmp_path / "out"
    convert(checkpoint, out, img_size=64, num_heads=4)  # 8x8 = 64 patches
    check_model_directory(out)
    monkeypatch.setattr(choices, "MAX_PATCHES", 63)
    with pytest.raises(ModelDirectoryError, match="makes 64 patches; expected at most 63"):
        check_model_directory(out)
    with pytest.raises(ConversionError, match="makes 64 patches; expected at most 63"):
        convert(checkpoint, tmp_path / "again", img_size=64, num_heads=4)
    assert not (tmp_path / "again").exists()


def test_the_largest_grid_the_bound_allows_still_converts(checkpoint, tmp_path):
    out = tmp_path / "out"
    convert(checkpoint, out, img_size=1024, num_heads=4)  # 128x128 = 16,384 patches: the bound itself
    _, model = check_model_directory(out)
    assert model.patch_embed.num_patches == choices.MAX_PATCHES


def test_more_classes_than_a_model_directory_may_hold(tmp_path):
    """Not only the patch bound: every check of the directory's config is run on what would be written."""
    path = tmp_path / "wide.pth"
    model = tiny(embed_dim=8, num_heads=1, depth=1, num_classes=choices.MAX_NUM_CLASSES + 1)
    torch.save(model.state_dict(), path)
    with pytest.raises(ConversionError, match="num_classes is 100001; expected an integer in \\[0, 100,000\\]"):
        convert(path, tmp_path / "out", num_heads=1)
    assert not (tmp_path / "out").exists()
