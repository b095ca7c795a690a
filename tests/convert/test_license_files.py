"""A weight's license text travels with it: weights whose license demands a copy of its text with every
redistribution (the DINOv3 License, ``pretrained_cfg.license == 'dinov3-license'``) get the package's copy of
that text in every model directory the package writes (``save_model_directory``, ``convert``) and beside every
export; weights under other licenses get no file. The DINOv3 variants are not needed: a classic tiny model
whose pretrained cfg records that license stands for them.
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import os
from pathlib import Path

import pytest
import timm
from timm.models import save_for_hf

from tests.support import tiny
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.convert import convert, export
from timm_vitscratch.errors import ConversionError
from timm_vitscratch.licenses import TRAVELLING, license_files, travelling_license, write_license_files
from timm_vitscratch.model_dir import check_model_directory, save_model_directory

DINOV3 = "dinov3-license"
#: each license text as its repository holds it, byte for byte: sha256, git blob id, title, line count
LICENSE_TEXTS = {
    # facebookresearch/dinov3's LICENSE.md
    DINOV3: (
        "25d122eb8f5b880fd23c736fb6ea8018ee45c12237e00b8a86d14c653904999e",
        "f531b1e6b5ab2318957bbf8ad1bda9f800a23e17",
        "# DINOv3 License",
        66,
    ),
    # facebookresearch/EUPE's LICENSE.md
    "fair-noncommercial-research-license": (
        "363d326fed0d13fd2418039c6f4bb56a809b0e316aaae3d5222d395581060288",
        "a882c9668bcbcd6660a38432e73009a34e665b6a",
        "# FAIR Noncommercial Research License",
        127,
    ),
}
LICENSE_SHA256 = {license_id: facts[0] for license_id, facts in LICENSE_TEXTS.items()}
TEXT = TRAVELLING[DINOV3].read()
MODEL_FILES = ["config.json", "model.safetensors"]
#: the module (``timm_vitscratch.convert.export`` is also the name of its function, re-exported by the package)
export_module = importlib.import_module("timm_vitscratch.convert.export")


def dinov3_tiny(**kwargs):
    return tiny(pretrained_cfg_overlay=dict(license=DINOV3), **kwargs)


@pytest.mark.parametrize("license_id", sorted(LICENSE_TEXTS))
def test_the_package_holds_each_license_text_verbatim(license_id):
    text = TRAVELLING[license_id].read()
    sha256, blob_id, title, line_count = LICENSE_TEXTS[license_id]
    assert hashlib.sha256(text).hexdigest() == sha256
    assert hashlib.sha1(b"blob %d\0" % len(text) + text).hexdigest() == blob_id
    lines = text.decode("utf-8").splitlines()
    assert (lines[0], len(lines)) == (title, line_count)
    assert "provide a copy of this Agreement" in text.decode("utf-8")  # why it travels


def test_the_table_holds_the_licenses_of_the_zoos_tags_that_demand_their_text():
    from timm_vitscratch.models.pretrained import pretrained_tags

    recorded = {cfg.get("license") for cfg in pretrained_tags().values()}
    assert set(TRAVELLING) == set(LICENSE_TEXTS) and set(TRAVELLING) <= recorded


@pytest.mark.parametrize("recorded", [DINOV3, " DINOv3-License\n"])
def test_the_table_knows_the_dinov3_license_by_its_recorded_id(recorded):
    found = travelling_license(recorded)
    assert found is TRAVELLING[DINOV3]
    assert license_files(recorded) == {"LICENSE.md": TEXT}
    assert found.card_metadata() == {"license": "other", "license_name": DINOV3, "license_link": "LICENSE.md"}


@pytest.mark.parametrize("recorded", ["apache-2.0", "bsd-3-clause", "cc-by-nc-4.0", "other", "dinov3", "", None, 3])
def test_other_licenses_need_no_file(recorded, tmp_path):
    assert travelling_license(recorded) is None and license_files(recorded) == {}
    assert write_license_files(tmp_path, recorded) == [] and os.listdir(tmp_path) == []


def test_save_model_directory_writes_the_license_text(tmp_path):
    directory = save_model_directory(dinov3_tiny(), tmp_path / "model")
    assert sorted(os.listdir(directory)) == ["LICENSE.md", *MODEL_FILES]
    assert (directory / "LICENSE.md").read_bytes() == TEXT
    config, _ = check_model_directory(directory)  # still a model directory, read as one
    assert config["pretrained_cfg"]["license"] == DINOV3


def test_weights_under_another_license_get_no_license_file(tmp_path):
    directory = save_model_directory(tiny(), tmp_path / "model")  # the default tag's apache-2.0
    assert sorted(os.listdir(directory)) == MODEL_FILES


def test_a_random_init_claims_no_license_and_gets_no_text(tmp_path):
    """timm gives a model without weights its default tag's cfg; its license is not these weights' license."""
    directory = save_model_directory(dinov3_tiny(), tmp_path / "model", source={"weights": "random init"})
    assert sorted(os.listdir(directory)) == MODEL_FILES


def test_the_text_replaces_an_old_file_by_a_rename_not_in_place(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "LICENSE.md").write_text("an older text\n")
    os.link(directory / "LICENSE.md", tmp_path / "other-link")  # a second name for the old file's inode
    save_model_directory(dinov3_tiny(), directory)
    assert (directory / "LICENSE.md").read_bytes() == TEXT
    assert (tmp_path / "other-link").read_text() == "an older text\n"  # a new file was renamed over it
    assert sorted(os.listdir(directory)) == ["LICENSE.md", *MODEL_FILES]  # no staging file left


def timm_directory(path: Path, license_id: str) -> Path:
    """A model directory written by timm itself (``save_for_hf``) whose pretrained cfg records ``license_id``."""
    model = timm.create_model(
        "vit_tiny_patch16_224",
        img_size=32,
        patch_size=8,
        depth=2,
        num_classes=10,
        pretrained_cfg_overlay=dict(license=license_id),
    )
    save_for_hf(model, path, safe_serialization=True)
    return path


def test_convert_keeps_the_license_and_writes_its_text(tmp_path, capsys):
    source = timm_directory(tmp_path / "timm", DINOV3)
    assert cli_main(["convert", str(source), str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert sorted(os.listdir(out)) == ["LICENSE.md", *MODEL_FILES]
    assert (out / "LICENSE.md").read_bytes() == TEXT
    assert sorted(os.listdir(tmp_path)) == ["out", "timm"]  # staged beside out, swapped in whole
    config, _ = check_model_directory(out)
    assert config["pretrained_cfg"]["license"] == DINOV3
    capsys.readouterr()


def test_convert_of_weights_under_another_license_writes_no_license_file(tmp_path):
    convert(timm_directory(tmp_path / "timm", "apache-2.0"), tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == MODEL_FILES


@pytest.mark.parametrize("out_name,to", [("vit.safetensors", "timm"), ("vit.npz", "jax"), ("vit.pth", "torchvision")])
def test_export_writes_the_license_text_beside_the_file(tmp_path, capsys, out_name, to):
    directory = save_model_directory(dinov3_tiny(), tmp_path / "model")
    out = tmp_path / "export" / out_name
    out.parent.mkdir()
    assert cli_main(["export", str(directory), "--to", to, str(out)]) == 0
    beside = out.parent / f"{out_name}.LICENSE.md"
    assert sorted(os.listdir(out.parent)) == [out_name, beside.name]
    assert beside.read_bytes() == TEXT
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"wrote {beside}: the text of the weights' license, which goes with every copy of them"
    )


def test_export_of_weights_under_a_standard_license_writes_its_spdx_id_beside(tmp_path, capsys):
    directory = save_model_directory(tiny(), tmp_path / "model")  # the default tag's apache-2.0
    (tmp_path / "export").mkdir()
    assert cli_main(["export", str(directory), "--to", "timm", str(tmp_path / "export" / "vit.safetensors")]) == 0
    beside = tmp_path / "export" / "vit.safetensors.LICENSE.md"
    assert sorted(os.listdir(tmp_path / "export")) == ["vit.safetensors", beside.name]
    assert beside.read_bytes() == b"SPDX-License-Identifier: apache-2.0\n"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"wrote {beside}: the weights' license id (SPDX), which goes with every copy of them"
    )


def test_export_of_weights_whose_license_is_unknown_writes_the_file_alone(tmp_path):
    directory = save_model_directory(tiny(pretrained_cfg_overlay=dict(license=None)), tmp_path / "model")
    assert check_model_directory(directory)[0]["pretrained_cfg"]["license"] == "unknown"  # recorded, never absent
    (tmp_path / "export").mkdir()
    result = export(directory, "timm", tmp_path / "export" / "vit.safetensors")
    assert result.license_file is None and os.listdir(tmp_path / "export") == ["vit.safetensors"]


def test_an_export_that_cannot_be_written_leaves_no_license_text(tmp_path, monkeypatch):
    directory = save_model_directory(dinov3_tiny(), tmp_path / "model")
    (tmp_path / "export").mkdir()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module, "write_safetensors", disk_full)
    with pytest.raises(ConversionError, match="cannot write the export: No space left on device"):
        export(directory, "timm", tmp_path / "export" / "vit.safetensors")
    assert os.listdir(tmp_path / "export") == []


def test_an_export_that_fails_keeps_a_license_text_that_was_there(tmp_path, monkeypatch):
    directory = save_model_directory(dinov3_tiny(), tmp_path / "model")
    export(directory, "timm", tmp_path / "vit.safetensors")  # a first export, with its license text

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export_module, "write_safetensors", disk_full)
    with pytest.raises(ConversionError):
        export(directory, "timm", tmp_path / "vit.safetensors")
    assert (tmp_path / "vit.safetensors.LICENSE.md").read_bytes() == TEXT  # the first export's, still whole


@pytest.mark.parametrize(
    "tag,license_id",
    [
        ("scratch_dinov3_s16.lvd1689m", DINOV3),
        ("scratch_dinov3_s16_qkvb.eupe_lvd1689m", "fair-noncommercial-research-license"),
    ],
)
def test_a_dinov3_variant_carries_its_tags_license_text(tmp_path, tag, license_id):
    """The zoo's own DINOv3 and EUPE tags: the cfg a tag gives the model chooses the text (the weights are not read)."""
    model = timm.create_model(tag, depth=1, img_size=32)
    assert model.pretrained_cfg["license"] == license_id
    directory = save_model_directory(model, tmp_path / "model")
    assert (directory / "LICENSE.md").read_bytes() == TRAVELLING[license_id].read()
    check_model_directory(directory)
