"""`vitscratch attention`: maps (shape, rows sum to 1, equal to timm's own attention), the PNG, bad input."""

import subprocess
import sys

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

import timm_vitscratch.inspect.attention_maps as attention_module
from tests.support import TINY, tiny
from timm_vitscratch.cli import main
from timm_vitscratch.inspect.attention_maps import DPI, FIGSIZE, attention_maps, attention_rollout, load_image
from timm_vitscratch.model_dir import WEIGHTS_NAME, model_config, write_config

EXPECTED_PNG_SIZE = (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))


@pytest.fixture
def image_path(tmp_path):
    """A 48x40 RGB picture with stripes, made here."""
    y, x = np.mgrid[0:40, 0:48]
    pixels = np.stack([x * 5 % 256, y * 6 % 256, ((x + y) % 16 < 8) * 255], axis=-1).astype(np.uint8)
    path = tmp_path / "stripes.png"
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture
def model_dir(tmp_path):
    """A tiny model in the shared model-directory format (config.json + model.safetensors)."""
    model = tiny(num_classes=3)
    directory = tmp_path / "tiny_model"
    directory.mkdir()
    save_file(model.state_dict(), str(directory / WEIGHTS_NAME))
    write_config(directory, model_config(model))
    return directory, model


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_deit_ti16_distilled"])
def test_maps_have_right_shapes_and_rows_sum_to_one(name):
    model = tiny(name)
    maps = attention_maps(model, torch.randn(2, 3, 32, 32))
    prefix = model.num_prefix_tokens
    tokens = prefix + 16
    assert len(maps.blocks) == TINY["depth"]
    for block in maps.blocks:
        assert block.shape == (2, TINY["num_heads"], tokens, tokens)
        torch.testing.assert_close(block.sum(-1), torch.ones(2, TINY["num_heads"], tokens))
    for matrix in (maps.last_block, maps.rollout):
        assert matrix.shape == (2, tokens, tokens)
        torch.testing.assert_close(matrix.sum(-1), torch.ones(2, tokens))
    assert maps.cls_last_block.shape == maps.cls_rollout.shape == (2, 4, 4)
    torch.testing.assert_close(maps.cls_last_block.sum((1, 2)) + maps.last_block[:, 0, :prefix].sum(-1), torch.ones(2))


def test_maps_equal_attention_inside_timms_own_vit():
    """Load our weights into timm's VisionTransformer (classic names) and read its attention matrices."""
    model = tiny()
    reference = timm.create_model(
        "vit_tiny_patch16_224",
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        num_classes=model.num_classes,
    ).eval()
    reference.load_state_dict(model.state_dict())
    captured = []
    for block in reference.blocks:
        block.attn.fused_attn = False  # timm's eager path: softmax(qk^T) goes through attn_drop
        block.attn.attn_drop.register_forward_hook(lambda module, inputs, output: captured.append(inputs[0]))
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        reference(images)
    maps = attention_maps(model, images)
    for ours, theirs in zip(maps.blocks, captured, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_rollout_of_known_matrices():
    """Uniform attention U in 3 blocks: each mixed matrix is (U + I)/2 and U² = U, so the rollout is
    (1 - 1/8) U + I/8. Identity attention rolls out to the identity."""
    tokens = 5
    uniform = torch.full((1, 2, tokens, tokens), 1.0 / tokens)
    expected = 7 / 8 * torch.full((tokens, tokens), 1.0 / tokens) + torch.eye(tokens) / 8
    torch.testing.assert_close(attention_rollout([uniform] * 3), expected.unsqueeze(0))
    identity = torch.eye(tokens).expand(1, 2, tokens, tokens)
    torch.testing.assert_close(attention_rollout([identity] * 3), torch.eye(tokens).unsqueeze(0))
    with pytest.raises(ValueError, match="at least one block"):
        attention_rollout([])


def test_load_image_resizes_to_the_model(image_path):
    model = tiny()
    assert load_image(image_path, model).shape == (1, 3, 32, 32)


@pytest.mark.slow  # a ViT-Ti picture rendered
def test_command_writes_png_of_expected_size_for_registered_name(tmp_path, image_path, capsys):
    out = tmp_path / "att.png"
    img_size = str(TINY["img_size"] * 2)
    assert (
        main(["attention", str(image_path), "--model", "scratch_vit_ti16", "--img-size", img_size, "--out", str(out)])
        == 0
    )
    assert "12 blocks, 4x4 patch grid" in capsys.readouterr().out
    with Image.open(out) as png:
        png.verify()
    with Image.open(out) as png:
        assert png.format == "PNG" and png.size == EXPECTED_PNG_SIZE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["att.png", "stripes.png"]


@pytest.mark.slow  # the CLI on a model directory
def test_command_reads_a_model_directory(tmp_path, image_path, model_dir):
    directory, original = model_dir
    out = tmp_path / "dir.png"
    assert main(["attention", str(image_path), "--model", str(directory), "--out", str(out)]) == 0
    with Image.open(out) as png:
        assert png.size == EXPECTED_PNG_SIZE
    loaded, description = attention_module.load_model(str(directory))
    assert "weights from" in description
    images = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(attention_maps(loaded, images).rollout, attention_maps(original, images).rollout)


def _run(args):
    return subprocess.run(
        [sys.executable, "-m", "timm_vitscratch.cli", "attention", *args], capture_output=True, text=True
    )


def test_unknown_model_name_lists_close_matches(tmp_path, image_path, capsys):
    out = tmp_path / "out.png"
    assert main(["attention", str(image_path), "--model", "scratch_vit_ti61", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'scratch_vit_ti61'; did you mean" in err and "scratch_vit_ti16" in err
    assert not out.exists() and list(tmp_path.glob(".out.png.*")) == []


@pytest.mark.parametrize("make_bad", ["garbage", "missing", "directory", "truncated"])
def test_unreadable_image(tmp_path, image_path, make_bad, capsys):
    bad = tmp_path / "bad.png"
    if make_bad == "garbage":
        bad.write_bytes(b"this is not an image")
    elif make_bad == "directory":
        bad.mkdir()
    elif make_bad == "truncated":
        bad.write_bytes(image_path.read_bytes()[:60])
    out = tmp_path / "out.png"
    assert main(["attention", str(bad), "--model", "scratch_vit_ti16", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"cannot read image '{bad}'" in err and "expected an image file" in err
    assert not out.exists() and list(tmp_path.glob(".out.png.*")) == []


def test_img_size_not_divisible_by_patch(tmp_path, image_path, capsys):
    out = tmp_path / "out.png"
    assert (
        main(["attention", str(image_path), "--model", "scratch_vit_ti16", "--img-size", "100", "--out", str(out)]) == 2
    )
    assert "img_size (100, 100) is not divisible by patch_size (16, 16)" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow  # the CLI in processes
def test_nonzero_exit_from_the_console(tmp_path, image_path):
    result = _run(
        [str(image_path), "--model", "scratch_vit_ti16", "--img-size", "100", "--out", str(tmp_path / "out.png")]
    )
    assert result.returncode == 2 and "not divisible" in result.stderr


@pytest.mark.slow  # a ViT-Ti picture rendered
def test_failure_while_writing_leaves_old_file_and_no_temporary(tmp_path, image_path, monkeypatch):
    out = tmp_path / "out.png"
    out.write_bytes(b"previous picture")

    def fail(*args, **kwargs):
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(attention_module, "render_attention_png", fail)
    with pytest.raises(RuntimeError):
        attention_module.write_attention_png(image_path, "scratch_vit_ti16", out, img_size=32)
    assert out.read_bytes() == b"previous picture"
    assert list(tmp_path.glob(".out.png.*")) == []


@pytest.mark.slow  # the CLI in a process
def test_missing_output_directory(tmp_path, image_path, capsys):
    out = tmp_path / "no_such_dir" / "out.png"
    assert (
        main(["attention", str(image_path), "--model", "scratch_vit_ti16", "--img-size", "32", "--out", str(out)]) == 2
    )
    assert "output directory" in capsys.readouterr().err and not out.exists()
