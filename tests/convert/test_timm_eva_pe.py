"""timm's own EVA02 and Perception Encoder files (its ``Eva`` state dicts) through source ``timm``, against timm's model.

EVA02's names are Eva's own (``q_bias`` / ``v_bias``, ``q_proj``, the norms inside): its options read from them. A PE
without layer scale has the names of a classic pre-norm ViT and its rotary position is in no weight: timm's
config.json beside the weights (as ``save_for_hf`` / ``push_to_hf_hub`` write it) or ``--model`` names it, and a
bare PE file is refused in one line. Every model is tiny (``TINY``), with random weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from safetensors.torch import save_file
from torch import nn

from tests.support.eva_originals import TINY, timm_model
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.convert import ConversionError, convert

pytestmark = pytest.mark.slow  # each file converted and verified against timm's Eva

# (timm's model, its arguments beyond TINY, our variant, the licence timm's cfg records)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    ("eva02_tiny_patch14_224", dict(img_size=56, num_classes=10), "scratch_eva02_t14", "mit"),  # packed SwiGLU
    ("eva02_base_patch14_224", dict(img_size=56), "scratch_eva02_b14", "mit"),  # separate q/k/v, norm in the MLP
    ("eva02_base_patch16_clip_224", dict(img_size=64), "scratch_eva02_b16_clip", "mit"),  # and in the attention
    # at 64 x 64 the position table's grid is 4 x 4; the rotary's reference grid stays the variant's 24 x 24
    ("vit_pe_core_tiny_patch16_384", dict(img_size=64), "scratch_pe_core_t16", "apache-2.0"),
    ("vit_pe_spatial_tiny_patch16_512", dict(img_size=64), "scratch_pe_spatial_t16", "apache-2.0"),
]
IDS = ["eva02_t", "eva02_b", "eva02_b_clip", "pe_core_t", "pe_spatial_t"]
EVA02 = [case for case in CASES if case[0].startswith("eva02")]
PE = [case for case in CASES if case[0].startswith("vit_pe")]


@torch.no_grad()
def diff(ours: nn.Module, theirs: nn.Module, size: int) -> float:
    """max-abs-diff of the two models' outputs (the head's, or the pooled features without one)."""
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))
    return (ours(x) - theirs(x)).abs().max().item()


def ours_from(directory: Path) -> nn.Module:
    return timm.create_model(f"local-dir:{directory}", pretrained=True).eval()


def config_of(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "config.json").read_text())


@pytest.mark.parametrize(("timm_name", "kwargs", "variant", "license"), CASES, ids=IDS)
def test_cli_converts_timms_hub_directory_verified_against_timms_eva(
    tmp_path, capsys, timm_name, kwargs, variant, license
):
    """timm's Hub layout (weights and config.json): every fact recorded, so --strict passes; verified, and equal."""
    source = timm_model(timm_name, **kwargs)
    timm.models.save_for_hf(source, tmp_path / "hub", safe_serialization=True)
    out = tmp_path / "out"
    assert cli_main(["convert", str(tmp_path / "hub"), str(out), "--from", "timm", "--verify", "--strict"]) == 0
    printed = capsys.readouterr().out
    assert "against timm's Eva on a fixed random batch (tolerance 0.0001): ok" in printed
    config = config_of(out)
    assert config["architecture"] == variant and config["pretrained_cfg"]["license"] == license
    max_diff = diff(ours_from(out), source, kwargs["img_size"])
    print(f"timm {timm_name} (config.json) -> {variant}: max-abs-diff {max_diff:.1e} against timm's; license {license}")
    assert max_diff == 0


@pytest.mark.parametrize(("timm_name", "kwargs", "variant", "license"), EVA02, ids=IDS[:3])
def test_bare_eva02_state_dict_reads_from_eva_names(tmp_path, timm_name, kwargs, variant, license):
    """No config: EVA02's names say it; its rotary grid and eps are the family's, only the heads are not recorded."""
    source = timm_model(timm_name, **kwargs)
    save_file(source.state_dict(), str(tmp_path / "eva02.safetensors"))
    result = convert(tmp_path / "eva02.safetensors", tmp_path / "out", num_heads=TINY["num_heads"], verify=True)
    assert (result.source_format, result.model_name, result.assumed) == ("timm", variant, {})
    assert result.verification.confirmed and result.verification.max_abs_diff == 0
    max_diff = diff(ours_from(tmp_path / "out"), source, kwargs["img_size"])
    print(f"timm {timm_name} (state dict) -> {variant}: verify {result.verification.max_abs_diff:.1e}, {max_diff:.1e}")
    assert max_diff == 0


@pytest.mark.parametrize(("timm_name", "kwargs", "variant", "license"), PE, ids=IDS[3:])
def test_bare_pe_state_dict_is_refused_in_one_line(tmp_path, capsys, timm_name, kwargs, variant, license):
    save_file(timm_model(timm_name, **kwargs).state_dict(), str(tmp_path / "pe.safetensors"))
    with pytest.raises(ConversionError, match="rotary position is not in the weights"):
        convert(tmp_path / "pe.safetensors", tmp_path / "out")
    assert cli_main(["convert", str(tmp_path / "pe.safetensors"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vitscratch: error: ") and len(err.strip().splitlines()) == 1
    assert "config.json" in err and "--model" in err and "--from meta_pe" in err
    assert not (tmp_path / "out").exists()


def test_bare_pe_state_dict_converts_as_the_variant_model_names(tmp_path):
    """--model names the variant (of the file's width and patch): its rotary position and eps hold."""
    kwargs = dict(embed_dim=192, num_heads=3, img_size=64)  # PE tiny's width and heads, two blocks
    source = timm_model("vit_pe_spatial_tiny_patch16_512", **kwargs)
    save_file(source.state_dict(), str(tmp_path / "pe.safetensors"))
    result = convert(tmp_path / "pe.safetensors", tmp_path / "out", model="scratch_pe_spatial_t16", verify=True)
    assert result.model_name == "scratch_pe_spatial_t16" and result.assumed == {"num_heads": 3}
    assert result.verification.passed and result.verification.max_abs_diff == 0
    max_diff = diff(ours_from(tmp_path / "out"), source, 64)
    print(f"timm vit_pe_spatial_tiny (state dict, --model) -> scratch_pe_spatial_t16: max-abs-diff {max_diff:.1e}")
    assert max_diff == 0


def test_bare_pe_with_layer_scale_reads_from_eva_names(tmp_path):
    """PE lang has Eva's ``gamma_1`` / ``gamma_2``: PE by its names, its rotary grid the position table's, as Meta's."""
    source = timm_model("vit_pe_lang_large_patch14_448", img_size=56, ref_feat_shape=(4, 4))
    save_file(source.state_dict(), str(tmp_path / "pe.safetensors"))
    result = convert(tmp_path / "pe.safetensors", tmp_path / "out", num_heads=TINY["num_heads"], verify=True)
    assert (result.model_name, result.assumed) == ("scratch_pe_lang_l14", {})
    assert result.verification.confirmed and result.verification.max_abs_diff == 0
    assert diff(ours_from(tmp_path / "out"), source, 56) == 0


def test_config_naming_another_family_is_refused(tmp_path):
    """A config.json naming PE beside EVA02's weights is not this model's: refused, not read either way."""
    source = timm_model("eva02_tiny_patch14_224", img_size=56)
    timm.models.save_for_hf(source, tmp_path / "hub", safe_serialization=True)
    config = config_of(tmp_path / "hub")
    config["architecture"] = "vit_pe_core_tiny_patch16_384"
    config["model_args"] = {k: config["model_args"][k] for k in ("depth", "embed_dim", "num_heads")}
    (tmp_path / "hub" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="scratch_pe_core_t16 is a Perception Encoder, but the weights have no"):
        convert(tmp_path / "hub", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("timm_name", "kwargs", "variant", "license"), CASES, ids=IDS)
def test_round_trip_timm_ours_timm_is_exact(tmp_path, timm_name, kwargs, variant, license):
    """timm's Hub directory -> our model directory -> ``vitscratch export --to timm`` -> timm's Eva, loaded strict:
    the outputs of the model the weights came from, and the licence kept on the way."""
    from safetensors.torch import load_file

    source = timm_model(timm_name, **kwargs)
    timm.models.save_for_hf(source, tmp_path / "hub", safe_serialization=True)
    assert cli_main(["convert", str(tmp_path / "hub"), str(tmp_path / "out"), "--from", "timm"]) == 0
    exported = tmp_path / "timm.safetensors"
    assert cli_main(["export", str(tmp_path / "out"), "--to", "timm", str(exported)]) == 0
    back = timm_model(timm_name, seed=1, **kwargs)  # other weights until the exported file loads
    assert diff(back, source, kwargs["img_size"]) > 0
    back.load_state_dict(load_file(str(exported)), strict=True)
    max_diff = diff(back, source, kwargs["img_size"])
    print(f"timm {timm_name} -> {variant} -> timm: max-abs-diff {max_diff:.1e}; license {license}")
    assert max_diff == 0 and config_of(tmp_path / "out")["pretrained_cfg"]["license"] == license
