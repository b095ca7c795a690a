"""What a user is told in the first hour: CLI wording in CLI errors, a hint for the order a user guesses, one
resolved image size printed once by convert, and a report of a model built in Python."""

import pytest
import timm
import torch
from safetensors.torch import save_file

from timm_vitscratch import VisionTransformer
from timm_vitscratch.cli import main
from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError, in_cli_words
from timm_vitscratch.inspect.report import build_report


@pytest.fixture
def weights(tmp_path):
    torch.manual_seed(0)
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=4
    )
    path = tmp_path / "vit.safetensors"
    save_file(model.state_dict(), str(path))
    return path


def test_attention_with_the_model_first_is_told_the_right_order(capsys):
    with pytest.raises(SystemExit) as done:
        main(["attention", "scratch_vit_b16", "photo.jpg"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "the following arguments are required: --model (the image comes first and the model after --model: " in err
    assert "vitscratch attention IMAGE --model MODEL" in err


def test_a_refusal_says_force_true_in_python_and_force_option_on_the_cli(weights, tmp_path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("kept")
    with pytest.raises(ConversionError) as python_error:
        convert(weights, project)
    assert "pass force=True to replace" in str(python_error.value) and "--force" not in str(python_error.value)
    assert main(["convert", str(weights), str(project)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vitscratch: error: ") and "pass --force to replace" in err and "force=True" not in err
    assert in_cli_words("a; or pass force=True") == "a; or pass --force"


def test_convert_prints_the_resolved_image_size_once(weights, tmp_path, capsys):
    assert main(["convert", str(weights), str(tmp_path / "out"), "--img-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "img_size 64x64)" in out.splitlines()[1]  # the model line: the size written
    assert "position embedding resampled from the checkpoint's 32x32\n" in out
    assert [line for line in out.splitlines() if "img_size" in line or "64x64" in line] == [out.splitlines()[1]]


def test_build_report_of_a_built_model_is_that_of_its_architecture():
    model = timm.create_model("scratch_vit_ti16", num_classes=5, img_size=32, reg_tokens=2)
    report = build_report(model, activations=False)
    assert report["counts"]["true"] == sum(p.numel() for p in model.parameters())
    assert (report["model"]["img_size"], report["model"]["prefix_tokens"]) == ([32, 32], 3)  # class + 2 registers
    assert report["counts"]["true"] - build_report("scratch_vit_ti16", 5, 32, activations=False)["counts"]["true"] == (
        2 * 2 * 192  # two register tokens and their two positions, 192 wide
    )
    assert build_report(model, num_classes=7, activations=False)["model"]["num_classes"] == 7


def test_build_report_refuses_a_model_it_cannot_rebuild():
    built_directly = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=2)
    with pytest.raises(ValueError, match="cannot tell which architecture"):
        build_report(built_directly)
    with pytest.raises(ValueError, match="not a timm_vitscratch model"):
        build_report(timm.create_model("vit_tiny_patch16_224", pretrained=False))
