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
import torch
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


# --- both ways: every family's license through every export and back -------------------------------------
#: a tiny model of each family whose license is recorded: (tag, create_model options, its license, heads)
FAMILIES = {
    "dinov3": ("scratch_dinov3_s16.lvd1689m", dict(depth=1, img_size=32), DINOV3, 6),
    "eva02": ("scratch_eva02_t14.mim_in22k", dict(depth=1, embed_dim=96, num_heads=4), "mit", 4),
    # whole (6M parameters): a PE file's rotary position is not in its weights, so it converts as the named variant
    "pe": ("scratch_pe_core_t16.fb", dict(), "apache-2.0", 3),
    "dinov2": (
        "scratch_dinov2_s14_reg4.lvd142m",
        dict(depth=1, embed_dim=64, num_heads=4, img_size=56),
        "apache-2.0",
        4,
    ),
    "siglip": ("scratch_siglip_b16.v2_webli", dict(depth=1, embed_dim=64, num_heads=4, img_size=32), "apache-2.0", 4),
}
#: export routes: (--to, the output's name); transformers writes a folder of the families it has a model for
ROUTES = [("transformers", "hf"), ("timm", "vit.safetensors"), ("timm", "vit.pth")]
TRANSFORMERS_FAMILIES = ("dinov3", "dinov2", "siglip")
#: every (family, route) that exists: EVA02 and PE have no transformers model to export to
CASES = [
    (f, to, name) for f in sorted(FAMILIES) for to, name in ROUTES if to != "transformers" or f in TRANSFORMERS_FAMILIES
]


def family_directory(tmp_path: Path, family: str) -> Path:
    tag, options, license_id, _ = FAMILIES[family]
    model = timm.create_model(tag, pretrained=False, **options)
    assert model.pretrained_cfg["license"] == license_id  # the tag's, as timm records it
    return save_model_directory(model, tmp_path / "ours")


def recorded_license(directory: Path) -> str:
    return check_model_directory(directory)[0]["pretrained_cfg"]["license"]


def license_text_of(directory: Path) -> bytes | None:
    path = directory / "LICENSE.md"
    return path.read_bytes() if path.exists() else None


@pytest.mark.parametrize("family,to,name", CASES, ids=[f"{f}-{to}:{name}" for f, to, name in CASES])
def test_the_license_comes_back_from_every_export(tmp_path, family, to, name):
    """ours -> export (a transformers folder, a timm .safetensors or .pth file) -> convert: the same license id,
    and for a license whose text travels, the package's text."""
    _, _, license_id, heads = FAMILIES[family]
    ours = family_directory(tmp_path, family)
    out = tmp_path / "export" / name
    out.parent.mkdir()
    export(ours, to, out)
    # the variant is named, as convert's message asks of a PE file
    model = "scratch_pe_core_t16" if family == "pe" and to == "timm" else None
    back = convert(out, tmp_path / "back", num_heads=heads, model=model)
    assert recorded_license(back.out_dir) == license_id
    assert license_text_of(back.out_dir) == (TRAVELLING[license_id].read() if license_id in TRAVELLING else None)
    assert sorted(os.listdir(back.out_dir)) == sorted(
        MODEL_FILES + (["LICENSE.md"] if license_id in TRAVELLING else [])
    )


# --- what a source's files say (issue 36: s01, s02, s03) -----------------------------------------------------
def meta_dinov3_file(path: Path) -> Path:
    from tests.convert.test_dinov3_sources import meta_state_dict, timm_dinov3

    torch.save(meta_state_dict(timm_dinov3("vit_small_patch16_dinov3")), path)
    return path


def test_meta_to_ours_to_transformers_and_back_keeps_the_dinov3_license(tmp_path):
    """s01: Meta's .pth -> ours -> export --to transformers (LICENSE.md inside) -> convert: the license stays."""
    convert(meta_dinov3_file(tmp_path / "meta.pth"), tmp_path / "ours")
    export(tmp_path / "ours", "transformers", tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "back")
    assert recorded_license(tmp_path / "back") == DINOV3 and license_text_of(tmp_path / "back") == TEXT


@pytest.mark.parametrize("extra", [[], ["--num-heads", "6"]])
def test_a_timm_file_and_the_license_beside_it_convert_back_with_it(tmp_path, capsys, extra):
    """s02: export --to timm FILE writes FILE.LICENSE.md; converting FILE reads it."""
    convert(meta_dinov3_file(tmp_path / "meta.pth"), tmp_path / "ours")
    export(tmp_path / "ours", "timm", tmp_path / "vit.safetensors")
    assert cli_main(["convert", str(tmp_path / "vit.safetensors"), str(tmp_path / "back"), *extra]) == 0
    assert recorded_license(tmp_path / "back") == DINOV3 and license_text_of(tmp_path / "back") == TEXT
    capsys.readouterr()


def hf_dinov3_folder(path: Path) -> Path:
    from tests.convert.test_dinov3_sources import hf_dinov3

    hf_dinov3(gated=False).save_pretrained(path)  # config.json + model.safetensors, as facebook/dinov3-* lay them out
    return path


def test_a_transformers_dinov3_folder_records_the_familys_license(tmp_path):
    """s03: a DINOv3ViTModel folder naming nothing is Meta's DINOv3 layout, whose weights are under the DINOv3
    License, as Meta's .pth of the same weights: recorded, and the package's text written."""
    convert(hf_dinov3_folder(tmp_path / "dinov3-vits16-pretrain-lvd1689m"), tmp_path / "out", verify=True)
    assert recorded_license(tmp_path / "out") == DINOV3 and license_text_of(tmp_path / "out") == TEXT


CARD = "---\nlicense: other\nlicense_name: dinov3-license\nlicense_link: https://ai.meta.com/dinov3-license/\n---\n"


def test_a_folders_card_and_license_file_are_read(tmp_path):
    folder = hf_dinov3_folder(tmp_path / "hf")
    (folder / "README.md").write_text(CARD + "# DINOv3\n")
    (folder / "LICENSE.md").write_bytes(TEXT.replace(b"\n", b"\r\n"))  # line endings are all a copy may change
    convert(folder, tmp_path / "out")
    assert recorded_license(tmp_path / "out") == DINOV3 and license_text_of(tmp_path / "out") == TEXT


@pytest.mark.parametrize(
    "files,said",
    [
        ({"README.md": "---\nlicense: apache-2.0\n---\n"}, "README.md's front matter says license: apache-2.0"),
        ({"LICENSE.md": "# DINOv3 License\n\nyou may do anything\n"}, "LICENSE.md says its text"),
        ({"README.md": "---\nlicense:\n  - mit\n---\n"}, "license: (not a plain value)"),
        ({"README.md": "---\nlicense: other\nlicense_name: my-license\n---\n"}, "license_name: my-license"),
    ],
)
def test_what_the_source_says_that_cannot_be_one_known_license_is_refused_naming_license(tmp_path, files, said):
    """A card naming another license than the family's, an edited text, a list, a license the package does not
    know: refused, nothing written; --license states it, and the text written is the package's."""
    folder = hf_dinov3_folder(tmp_path / "hf")
    for name, text in files.items():
        (folder / name).write_text(text)
    with pytest.raises(ConversionError, match="pass --license ID") as refused:
        convert(folder, tmp_path / "out")
    assert said in str(refused.value) and not (tmp_path / "out").exists()
    convert(folder, tmp_path / "out", license=DINOV3)
    assert recorded_license(tmp_path / "out") == DINOV3 and license_text_of(tmp_path / "out") == TEXT


def test_a_source_that_names_no_license_records_unknown_and_license_names_it(tmp_path):
    model = tiny(pretrained_cfg_overlay=dict(license=None))
    save_file_ = importlib.import_module("safetensors.torch").save_file
    save_file_({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    convert(tmp_path / "w.safetensors", tmp_path / "a", num_heads=4)
    assert recorded_license(tmp_path / "a") == "unknown" and sorted(os.listdir(tmp_path / "a")) == MODEL_FILES
    convert(tmp_path / "w.safetensors", tmp_path / "b", num_heads=4, license="MIT")
    assert recorded_license(tmp_path / "b") == "mit"
    with pytest.raises(ConversionError, match="'my-license' is not a license id the package knows"):
        convert(tmp_path / "w.safetensors", tmp_path / "c", num_heads=4, license="my-license")
    (tmp_path / "w.safetensors.LICENSE.md").write_text("SPDX-License-Identifier: bsd-3-clause\n")
    with pytest.raises(ConversionError, match="--license mit disagrees"):
        convert(tmp_path / "w.safetensors", tmp_path / "c", num_heads=4, license="mit")
    convert(tmp_path / "w.safetensors", tmp_path / "c", num_heads=4)
    assert recorded_license(tmp_path / "c") == "bsd-3-clause"


def test_a_license_file_that_is_not_a_regular_file_inside_is_refused(tmp_path):
    model = tiny(pretrained_cfg_overlay=dict(license=None))
    importlib.import_module("safetensors.torch").save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "w.safetensors")
    )
    os.mkfifo(tmp_path / "w.safetensors.LICENSE.md")  # a read would block forever
    with pytest.raises(ConversionError, match="not a regular file"):
        convert(tmp_path / "w.safetensors", tmp_path / "out", num_heads=4)


@pytest.mark.parametrize(
    "card,expected",
    [
        ("---\nlicense: 'apache-2.0'  \nlicense_name: x # note\n---\n", {"license": "apache-2.0", "license_name": "x"}),
        ("---\ntags:\n  license: mit\n---\n", {}),  # not top level
        ("---\nlicense: mit\n", {}),  # never closed: not front matter
        ("license: mit\n", {}),
        ("---\nlicense: [mit]\n---\n", {"license": ""}),
        ("---\n" + "x: y\n" * 600 + "license: mit\n---\n", {}),  # past the lines looked at
    ],
)
def test_front_matter_is_read_line_by_line_and_bounded(card, expected):
    from timm_vitscratch.gate.license_files import front_matter_licence

    assert front_matter_licence(card) == expected
