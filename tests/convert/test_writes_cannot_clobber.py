"""Writes that cannot clobber: convert and export never write over their input, convert asks for --force
before writing into a directory that is not a model directory, and a failed write says why and leaves
nothing behind."""

import os
import resource
import signal

import pytest
import torch
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.child_writers import run_in_child
from tests.support.sources import hf_config, randomized
from timm_vitscratch.cli import main
from timm_vitscratch.convert import ConversionError, convert, export
from timm_vitscratch.model_dir import check_model_directory


def snapshot(directory):
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def refused_by_cli(argv, capsys, match):
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("vitscratch: error: ") and match in err, err
    return err


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "vit.safetensors"
    save_file(tiny().state_dict(), str(path))
    return path


@pytest.fixture
def model(tmp_path, weights):
    convert(weights, tmp_path / "model")
    return tmp_path / "model"


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_export_refuses_to_write_over_its_own_input(name, model, tmp_path, capsys):
    """Probe f6: ``export DIR --to torchvision DIR/model.safetensors`` replaced the directory's weights."""
    before = snapshot(tmp_path)
    suffix = ".pth" if name == "config.json" else ""
    if suffix:  # the config under a name export writes: a symlink to it
        os.symlink(model / name, tmp_path / f"alias{suffix}")
    out = tmp_path / f"alias{suffix}" if suffix else model / name
    refused_by_cli(["export", str(model), "--to", "torchvision", str(out)], capsys, "is this export's own input")
    os.link(model / "model.safetensors", tmp_path / "hardlink.safetensors")  # the same file under another name
    with pytest.raises(ConversionError, match="own input"):
        export(model, "timm", tmp_path / "hardlink.safetensors")
    (tmp_path / "hardlink.safetensors").unlink()
    if suffix:
        (tmp_path / f"alias{suffix}").unlink()
    assert snapshot(tmp_path) == before
    check_model_directory(model)


def test_convert_refuses_an_output_that_is_or_holds_its_input(weights, model, tmp_path, capsys):
    """Probe f6: ``convert HF_DIR HF_DIR`` replaced its own input."""
    from transformers import ViTForImageClassification

    hf_dir = tmp_path / "hf"
    randomized(
        lambda: ViTForImageClassification(
            hf_config(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
                image_size=32,
                patch_size=8,
            )
        )
    ).save_pretrained(hf_dir)
    before = snapshot(tmp_path)
    refused_by_cli(["convert", str(hf_dir), str(hf_dir)], capsys, "is also the output directory")
    refused_by_cli(["convert", str(hf_dir), str(tmp_path)], capsys, "lies in the output directory")
    refused_by_cli(["convert", str(model), str(model)], capsys, "is also the output directory")
    refused_by_cli(["convert", str(hf_dir / "model.safetensors"), str(hf_dir)], capsys, "lies in the output directory")
    os.link(weights, model / "linked.safetensors")
    (model / "model.safetensors").unlink()
    os.link(weights, model / "model.safetensors")  # the output's weights are the source file itself
    before = snapshot(tmp_path)
    with pytest.raises(ConversionError, match="lies in the output directory"):
        convert(weights, model)
    assert snapshot(tmp_path) == before


def test_convert_into_a_directory_that_is_not_a_model_directory_needs_force(weights, tmp_path, capsys):
    out = tmp_path / "project"
    out.mkdir()
    (out / "config.json").write_text('{"learning_rate": 0.1}')  # someone else's config
    (out / "notes.txt").write_text("keep me")
    before = snapshot(out)
    err = refused_by_cli(["convert", str(weights), str(out)], capsys, "not a model directory")
    assert "--force" in err
    assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == ["project", "vit.safetensors"]
    assert main(["convert", str(weights), str(out), "--force"]) == 0
    check_model_directory(out)
    assert (out / "notes.txt").read_text() == "keep me"  # only config.json and model.safetensors are replaced
    convert(weights, out)  # now a model directory: replaced without --force
    (empty := tmp_path / "empty").mkdir()
    convert(weights, empty)  # an empty directory needs none either
    assert sorted(os.listdir(tmp_path)) == ["empty", "project", "vit.safetensors"]


def test_convert_into_a_new_directory_under_new_parents_leaves_none_behind_when_refused(tmp_path):
    bad = tmp_path / "bad.safetensors"
    save_file({"blocks.0.attn.qkv.weight": torch.zeros(3, 3)}, str(bad))
    with pytest.raises(ConversionError):
        convert(bad, tmp_path / "a" / "b" / "out")
    assert sorted(os.listdir(tmp_path)) == ["bad.safetensors"]


def test_a_full_disk_during_a_pth_export_says_so_and_leaves_no_temporary_file(model, tmp_path):
    """torch.save reports a failed write as ``unexpected pos ...``; the export names the file and the cause.

    The disk fills up in a child process whose file-size limit (RLIMIT_FSIZE) is below the export's size: the
    write fails in the kernel (EFBIG), as it fails with ENOSPC on a full disk.
    """
    out = tmp_path / "exported.pth"
    out.write_bytes(b"previous export")

    def export_onto_a_full_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
        with pytest.raises(ConversionError) as err:
            export(model, "timm", out)
        return str(err.value)

    code, message = run_in_child(export_onto_a_full_disk)
    assert code == 0, message
    assert message == f"{out}: cannot write the export: File too large"
    assert out.read_bytes() == b"previous export"
    assert sorted(os.listdir(tmp_path)) == ["exported.pth", "model", "vit.safetensors"]
