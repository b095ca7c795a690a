"""SigLIP and SigLIP 2 from transformers, and back out, against transformers' own models.

transformers' ``SiglipVisionModel`` and ``Siglip2VisionModel`` are built small with random weights and saved with
``save_pretrained``; each is converted with ``vitscratch convert`` and with ``convert()``, and its
``last_hidden_state`` / ``pooler_output`` compared with our ``forward_features`` / pooled output at the default size
and a non-square one. SigLIP 2 is fed its patchified image with ``spatial_shapes``; SigLIP at another size needs
its table interpolated (``interpolate_pos_encoding=True``). A classic row exports as a ``SiglipVisionModel`` (its one
size, as timm's); a SigLIP 2 converted to the NaFlex row (``--model``) exports as a ``Siglip2VisionModel``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
import transformers
from safetensors.torch import save_file
from torch import nn

from timm_vitscratch.cli import main
from timm_vitscratch.convert import ConversionError, convert, export
from timm_vitscratch.convert.formats import detect_format
from timm_vitscratch.convert.transformers_siglip import siglip2_inputs
from timm_vitscratch.layouts import StateDictCheckpoint
from timm_vitscratch.licenses import TRAVELLING
from timm_vitscratch.models.checkpoint_filter import checkpoint_filter_fn

pytestmark = pytest.mark.slow  # each conversion verified by transformers' own model

TOL = 1e-5
PATCH = 16
SQUARE, NON_SQUARE = (64, 64), (48, 80)  # the tables' 4x4 grid, and 3x5 patches
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, patch_size=PATCH)
#: what the tiny towers become: the SigLIP B/16 variant at test size, tanh GELU as transformers' configs say
MODEL_ARGS = {
    "num_classes": 0,
    "img_size": 64,
    "embed_dim": 64,
    "depth": 2,
    "num_heads": 4,
    "mlp_ratio": 2.0,
    "act_layer": "gelu_tanh",
}


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter drawn at random (LayerNorm scales near 1, so that no block is an identity)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            scale = param.dim() == 1 and "norm" in name and name.endswith("weight")
            param.copy_(1 + 0.1 * noise if scale else 0.05 * noise)
    return model.eval()


def siglip(**kwargs: object) -> nn.Module:
    return randomize(transformers.SiglipVisionModel(transformers.SiglipVisionConfig(image_size=64, **TINY, **kwargs)))


def siglip2(**kwargs: object) -> nn.Module:
    return randomize(
        transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(num_patches=16, **TINY, **kwargs))
    )


def images(size: tuple[int, int], seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


def ours_from(directory: Path, **kwargs: object) -> nn.Module:
    return timm.create_model(f"local-dir:{directory}", pretrained=True, **kwargs).eval()


@torch.no_grad()
def diffs(hf: nn.Module, ours: nn.Module, size: tuple[int, int], interpolate: bool = False) -> tuple[float, float]:
    """max-abs-diffs (last_hidden_state vs forward_features, pooler_output vs our pooled output) on one batch."""
    x = images(size)
    if isinstance(hf, transformers.Siglip2VisionModel):
        out = hf(**siglip2_inputs(x, PATCH))
    else:
        out = hf(pixel_values=x, interpolate_pos_encoding=interpolate)
    tokens = ours.forward_features(x)
    pooled = ours.forward_head(tokens, pre_logits=True)
    return (out.last_hidden_state - tokens).abs().max().item(), (out.pooler_output - pooled).abs().max().item()


def report(what: str, size: tuple[int, int], found: tuple[float, float]) -> None:
    print(f"{what} {size[0]}x{size[1]}: last_hidden_state {found[0]:.2e}, pooler_output {found[1]:.2e}")


# --- SigLIP -----------------------------------------------------------------------------------------------------
def test_siglip_vision_model_converts_verified_and_equals_transformers(tmp_path, capsys):
    source = siglip()
    source.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "cli"), "--verify", "--strict"]) == 0
    assert "verify: max-abs-diff" in capsys.readouterr().out
    result = convert(tmp_path / "hf", tmp_path / "out", verify=True, strict=True)
    assert (result.source_format, result.model_name, result.model_args) == (
        "transformers",
        "scratch_siglip_b16",
        MODEL_ARGS,
    )
    assert result.verification.confirmed and result.verification.features_diff <= TOL
    for directory in ("cli", "out"):
        found = diffs(source, ours_from(tmp_path / directory), SQUARE)
        report(f"SigLIP ({directory})", SQUARE, found)
        assert max(found) <= TOL
    # another size: converted at it, the table resampled as transformers' interpolate_pos_encoding does (bicubic)
    assert convert(tmp_path / "hf", tmp_path / "wide", img_size=NON_SQUARE, verify=True).verification.confirmed
    found = diffs(source, ours_from(tmp_path / "wide"), NON_SQUARE, interpolate=True)
    report("SigLIP converted at", NON_SQUARE, found)
    assert max(found) <= TOL


@pytest.mark.parametrize("build", [siglip, siglip2], ids=["SigLIP", "SigLIP 2"])
def test_another_size_on_the_fly_resamples_as_timm_not_as_transformers(tmp_path, build):
    """``dynamic_img_size`` resamples the table with timm's bicubic (antialiased), as timm's SigLIP does; transformers
    interpolates bicubic without antialias (SigLIP, ``interpolate_pos_encoding``) or bilinear with it (SigLIP 2):
    the same weights differ there, by this much. Converting at the size (above) gives transformers' outputs."""
    source = build()
    source.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    found = diffs(source, ours_from(tmp_path / "out", dynamic_img_size=True), NON_SQUARE, interpolate=True)
    report(f"{build.__name__} dynamic_img_size vs transformers", NON_SQUARE, found)
    assert found[0] > TOL


def test_full_siglip_model_gives_its_vision_tower(tmp_path):
    """A SiglipModel directory (vision_model. names, a text tower, logit scale and bias; config under vision_config)."""
    config = transformers.SiglipConfig(
        vision_config=dict(image_size=64, **TINY),
        text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2),
    )
    full = randomize(transformers.SiglipModel(config))
    full.save_pretrained(tmp_path / "hf")
    result = convert(tmp_path / "hf", tmp_path / "out", verify=True, strict=True)
    assert result.model_args == MODEL_ARGS and result.verification.confirmed
    assert max(diffs(full.vision_model, ours_from(tmp_path / "out"), SQUARE)) <= TOL


# --- SigLIP 2 ---------------------------------------------------------------------------------------------------
def test_siglip2_vision_model_converts_verified_and_equals_transformers_at_two_sizes(tmp_path):
    source = siglip2()
    source.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "cli"), "--verify", "--strict"]) == 0
    result = convert(tmp_path / "hf", tmp_path / "out", verify=True, strict=True)
    assert (result.model_name, result.model_args) == ("scratch_siglip_b16", MODEL_ARGS)
    assert result.verification.confirmed and result.verification.features_diff <= TOL
    for directory in ("cli", "out"):
        found = diffs(source, ours_from(tmp_path / directory), SQUARE)
        report(f"SigLIP 2 ({directory})", SQUARE, found)
        assert max(found) <= TOL
    # transformers resizes its table to each image's grid (bilinear, antialiased): converting at that size does too
    wide = convert(tmp_path / "hf", tmp_path / "wide", img_size=NON_SQUARE, verify=True, strict=True)
    assert wide.verification.confirmed
    found = diffs(source, ours_from(tmp_path / "wide"), NON_SQUARE)
    report("SigLIP 2 converted at", NON_SQUARE, found)
    assert max(found) <= TOL


def test_siglip2_state_dict_loads_into_a_model_of_another_size_as_transformers_resizes(tmp_path):
    """The loader (checkpoint_filter_fn) resamples SigLIP 2's table as transformers does at that grid."""
    source = siglip2()
    model = timm.create_model(
        "scratch_siglip_b16", img_size=NON_SQUARE, **{k: v for k, v in MODEL_ARGS.items() if k != "img_size"}
    ).eval()
    model.load_state_dict(checkpoint_filter_fn(source.state_dict(), model), strict=True)
    assert max(diffs(source, model, NON_SQUARE)) <= TOL


def test_export_to_transformers_writes_a_siglip_vision_model_and_the_round_trip(tmp_path, capsys):
    """transformers (Siglip2VisionModel) -> ours (the classic row: one size) -> transformers (a SiglipVisionModel,
    by AutoModel, at that size as the row) -> ours, each against the source."""
    source = siglip2()
    source.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "ours1")
    assert main(["export", str(tmp_path / "ours1"), "--to", "transformers", str(tmp_path / "hf2")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "hf2").iterdir()) == [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ]
    back = transformers.AutoModel.from_pretrained(tmp_path / "hf2").eval()
    assert type(back).__name__ == "SiglipVisionModel" and back.config.image_size == SQUARE[0]
    again = convert(tmp_path / "hf2", tmp_path / "ours2", verify=True, strict=True)
    assert again.model_args == MODEL_ARGS
    x = images(SQUARE)
    with torch.no_grad():
        a, b = back(pixel_values=x), source(**siglip2_inputs(x, PATCH))
    found = (
        (a.last_hidden_state - b.last_hidden_state).abs().max().item(),
        (a.pooler_output - b.pooler_output).abs().max().item(),
    )
    report("ours -> transformers (against the source)", SQUARE, found)
    assert max(found) <= TOL
    for size in (SQUARE, NON_SQUARE):
        x = images(size)
        ours1, ours2 = (ours_from(tmp_path / d, dynamic_img_size=True) for d in ("ours1", "ours2"))
        with torch.no_grad():
            diff = (ours2(x) - ours1(x)).abs().max().item()
        report("ours -> transformers -> ours", size, (diff, diff))
        assert diff == 0


def test_siglip2_converts_to_the_naflex_row_and_exports_back_as_siglip2(tmp_path, capsys):
    """``--model scratch_siglip2_b16_naflex``: a Siglip2VisionModel becomes the NaFlex row (timm NaFlexVit's names:
    the patch Linear as it is, the table as a grid), which gives transformers' outputs at any shape, and exports
    back as a Siglip2VisionModel, tensor for tensor. The row's width is B/16's: one block, to stay small."""
    source = randomize(
        transformers.Siglip2VisionModel(
            transformers.Siglip2VisionConfig(
                num_patches=16,
                hidden_size=768,
                intermediate_size=3072,
                num_hidden_layers=1,
                num_attention_heads=12,
                patch_size=PATCH,
            )
        )
    )
    source.save_pretrained(tmp_path / "hf")
    naflex = "scratch_siglip2_b16_naflex"
    argv = ["convert", "--from", "transformers", "--model", naflex, str(tmp_path / "hf"), str(tmp_path / "cli")]
    assert main([*argv, "--verify", "--strict"]) == 0
    assert "verify: max-abs-diff" in capsys.readouterr().out
    result = convert(tmp_path / "hf", tmp_path / "ours", model=naflex, verify=True, strict=True)
    assert result.model_name == naflex and result.verification.confirmed
    for directory in ("cli", "ours"):
        ours = ours_from(tmp_path / directory)
        assert "embeds.pos_embed" in ours.state_dict()
        for size in (SQUARE, NON_SQUARE):
            found = diffs(source, ours, size)
            report(f"SigLIP 2 -> {naflex} ({directory})", size, found)
            assert max(found) <= TOL
    export(tmp_path / "ours", "transformers", tmp_path / "hf2")
    back = transformers.AutoModel.from_pretrained(tmp_path / "hf2").eval()
    assert type(back).__name__ == "Siglip2VisionModel"
    theirs = source.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in back.state_dict().items())


def test_a_siglip_model_exports_as_siglip_and_gives_siglip_outputs(tmp_path):
    """SigLIP's tower converted, then written back: a SiglipVisionModel, the same function of the image."""
    source = siglip()
    source.save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    export(tmp_path / "out", "transformers", tmp_path / "hf2")
    back = transformers.AutoModel.from_pretrained(tmp_path / "hf2").eval()
    assert type(back).__name__ == "SiglipVisionModel"
    theirs = source.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in back.state_dict().items())
    x = images(SQUARE)
    with torch.no_grad():
        diff = (back(pixel_values=x).pooler_output - source(pixel_values=x).pooler_output).abs().max()
    assert diff.item() <= TOL


def test_a_bare_state_dict_with_the_older_prefix_assumes_the_config_classes_defaults(tmp_path):
    """``vision_model.`` names (older files) and no config.json: heads, tanh GELU and eps 1e-6 are assumed, and said."""
    source = siglip()
    state = {f"vision_model.{k}": v.contiguous() for k, v in source.state_dict().items() if "position_ids" not in k}
    save_file(state, str(tmp_path / "siglip.safetensors"))
    result = convert(tmp_path / "siglip.safetensors", tmp_path / "out", num_heads=4)
    assert result.assumed == {"act_layer": "gelu_tanh", "norm_eps": 1e-6}
    assert max(diffs(source, ours_from(tmp_path / "out"), SQUARE)) <= TOL
    with pytest.raises(ConversionError, match="--strict: nothing records act_layer=gelu_tanh, norm_eps=1e-06"):
        convert(tmp_path / "siglip.safetensors", tmp_path / "strict", num_heads=4, strict=True)


def test_a_tower_without_a_head_pools_by_the_mean_and_exports_without_one(tmp_path):
    """``vision_use_head: false`` (no MAP head): timm's ``_gap`` SigLIP, the mean of the tokens after the final norm."""
    source = siglip2(vision_use_head=False)
    source.save_pretrained(tmp_path / "hf")
    result = convert(tmp_path / "hf", tmp_path / "out", verify=True, strict=True)
    assert result.model_name == "scratch_siglip_b16_gap" and result.model_args == MODEL_ARGS  # the `_gap` variant
    ours, x = ours_from(tmp_path / "out"), images(SQUARE)
    with torch.no_grad():
        tokens = source(**siglip2_inputs(x, PATCH)).last_hidden_state
        assert (tokens - ours.forward_features(x)).abs().max().item() <= TOL
        assert (tokens.mean(dim=1) - ours(x)).abs().max().item() <= TOL
    assert export(tmp_path / "out", "transformers", tmp_path / "hf2").notes == [
        "this model has no MAP head: the SiglipVisionModel is written without one"
    ]
    back = transformers.AutoModel.from_pretrained(tmp_path / "hf2").eval()
    assert not back.config.vision_use_head
    with torch.no_grad():
        assert (back(pixel_values=x).last_hidden_state - tokens).abs().max().item() <= TOL


def test_the_license_travels_with_the_export_as_for_dinov3(tmp_path):
    """SigLIP's weights are Apache-2.0 (no text need travel); a license whose text must travel goes into the export."""
    siglip2().save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "out")
    assert export(tmp_path / "out", "transformers", tmp_path / "plain").license_file is None
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    config["pretrained_cfg"]["license"] = "dinov3-license"
    (tmp_path / "out" / "config.json").write_text(json.dumps(config))
    text = TRAVELLING["dinov3-license"]
    result = export(tmp_path / "out", "transformers", tmp_path / "hf2")
    assert result.license_file == tmp_path / "hf2" / text.file_name and result.license_file.read_bytes() == text.read()


# --- refusals ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"hidden_size": 128}, "does not describe these SigLIP 2 weights: hidden_size 128"),
        ({"num_patches": 25}, "num_patches 25 .the weights: a table of 16"),
        ({"num_patches": 10**9}, r"num_patches is 1000000000; expected an integer in \[1, 16,384\]"),
        ({"hidden_act": "relu"}, "hidden_act is 'relu'; expected 'gelu_pytorch_tanh' or 'gelu'"),
        ({"num_attention_heads": 5}, "does not divide width 64"),
        ({"model_type": "siglip_vision_model"}, "the weights are a SigLIP 2 vision tower's"),
    ],
)
def test_a_config_that_does_not_fit_the_weights_is_one_clear_error(tmp_path, capsys, change, expected):
    siglip2().save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
    capsys.readouterr()  # transformers' progress bars
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "out"), "--verify"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vitscratch: error: ")
    with pytest.raises(ConversionError, match=expected):
        convert(tmp_path / "hf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_refuses_what_a_siglip_vision_model_cannot_hold(tmp_path):
    siglip2().save_pretrained(tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "wide", img_size=NON_SQUARE)
    with pytest.raises(ConversionError, match="no place for a 3x5 position table"):
        export(tmp_path / "wide", "transformers", tmp_path / "hf2")
    model = timm.create_model(
        "scratch_siglip_b16", num_classes=3, **{k: v for k, v in MODEL_ARGS.items() if k != "num_classes"}
    )
    save_file(model.state_dict(), str(tmp_path / "timm.safetensors"))
    convert(tmp_path / "timm.safetensors", tmp_path / "classifier", num_heads=4)
    with pytest.raises(ConversionError, match="SiglipVisionModel has no classifier"):
        export(tmp_path / "classifier", "transformers", tmp_path / "hf2")
    assert not (tmp_path / "hf2").exists()


def test_siglip_layouts_are_detected_as_transformers():
    for state_dict in (siglip().state_dict(), siglip2().state_dict()):
        fmt, detected = detect_format(StateDictCheckpoint(state_dict))
        assert (fmt.name, detected) == ("transformers", True)
