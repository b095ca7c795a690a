"""DINOv2 from and to transformers' ``Dinov2Model`` / ``Dinov2WithRegistersModel``, against transformers itself.

transformers' own classes are built small with random weights and saved with ``save_pretrained`` (the Hub's
names), converted with ``vitscratch convert`` (the CLI) or ``convert()``, and compared: their
``last_hidden_state`` (class token, registers, patches after the final norm) against our ``forward_features``
and their ``pooler_output`` against our pooled features, at the default size and a non-square one. The way
back (``vitscratch export --to transformers``) is loaded by transformers' own ``from_pretrained``.

transformers resamples the position table of a ``Dinov2Model`` bicubic without antialiasing and that of a
``Dinov2WithRegistersModel`` with it (timm antialiases both): a conversion at another size resamples as the
source does, and the dynamic-size path (``dynamic_img_size``, timm's) equals the registers' model only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

from tests.support.dinov3_pairs import max_diff, perturbed
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.convert import ConversionError, convert, export
from timm_vitscratch.convert.formats import detect_format
from timm_vitscratch.layouts import StateDictCheckpoint
from timm_vitscratch.licenses import TRAVELLING
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # transformers builds each reference model

TOL = 1e-5
SIZE = (56, 56)  # a 4x4 grid of 14-pixel patches
NON_SQUARE = (42, 70)  # 3x5
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=SIZE[0], patch_size=14)
#: form -> (transformers' config and model classes, config fields, the variant it becomes)
FORMS: dict[str, tuple[Any, Any, dict[str, Any], str]] = {
    "plain": (transformers.Dinov2Config, transformers.Dinov2Model, {}, "scratch_dinov2_s14"),
    "reg4": (
        transformers.Dinov2WithRegistersConfig,
        transformers.Dinov2WithRegistersModel,
        {"num_register_tokens": 4},
        "scratch_dinov2_s14_reg4",
    ),
    # Dinov2SwiGLUFFN: 176 wide at width 64 (the giant's form); the closest variant by depth, packed SwiGLU
    "swiglu": (transformers.Dinov2Config, transformers.Dinov2Model, {"use_swiglu_ffn": True}, "scratch_dinov2_s14"),
}


def hf_model(form: str, seed: int = 1, **fields: Any) -> nn.Module:
    config_cls, model_cls, extra, _ = FORMS[form]
    torch.manual_seed(0)
    return perturbed(model_cls(config_cls(**{**TINY, **extra, **fields})), scale=0.05, seed=seed)


def saved(form: str, directory: Path, **fields: Any) -> nn.Module:
    model = hf_model(form, **fields)
    model.save_pretrained(directory)
    return model


def ours_from(directory: Path, **kwargs: Any) -> nn.Module:
    return timm.create_model(f"local-dir:{directory}", pretrained=True, **kwargs).eval()


def images(size: tuple[int, int], seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def diffs(hf: nn.Module, ours: nn.Module, size: tuple[int, int]) -> tuple[float, float]:
    """max-abs-diff of transformers' last_hidden_state against our forward_features, and of its pooler_output
    (the class token) against our pooled features."""
    x = images(size)
    out, tokens = hf(pixel_values=x), ours.forward_features(x)
    return max_diff(out.last_hidden_state, tokens), max_diff(out.pooler_output, ours.forward_head(tokens, True))


def config_of(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "config.json").read_text())


# --- transformers -> ours ---------------------------------------------------------------------------------
@pytest.mark.parametrize("form", list(FORMS))
def test_cli_converts_verified_and_equals_transformers(tmp_path, capsys, form):
    hf = saved(form, tmp_path / "hf")
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "out"), "--verify", "--strict"]) == 0
    out = capsys.readouterr().out
    assert "source: " in out and "(transformers format, detected from its keys)" in out
    assert f"against transformers' {type(hf).__name__} on a fixed random batch (tolerance 0.0001): ok" in out
    assert config_of(tmp_path / "out")["architecture"] == FORMS[form][3]
    tokens, pooled = diffs(hf, ours_from(tmp_path / "out"), SIZE)
    print(f"transformers -> ours ({form}) {SIZE[0]}x{SIZE[1]}: last_hidden_state {tokens:.2e}, pooled {pooled:.2e}")
    assert tokens <= TOL and pooled <= TOL


@pytest.mark.parametrize("form", list(FORMS))
def test_conversion_at_a_non_square_size_resamples_as_transformers(tmp_path, form):
    hf = saved(form, tmp_path / "hf")
    result = convert(tmp_path / "hf", tmp_path / "out", img_size=NON_SQUARE, verify=True, strict=True)
    assert result.resampled_from == SIZE and result.verification.confirmed
    tokens, pooled = diffs(hf, ours_from(tmp_path / "out"), NON_SQUARE)
    print(f"transformers -> ours ({form}) at {NON_SQUARE[0]}x{NON_SQUARE[1]}: last_hidden_state {tokens:.2e}")
    assert tokens <= TOL and pooled <= TOL


def test_the_dynamic_size_path_equals_the_registers_model_and_not_dinov2model(tmp_path):
    """Ours resamples at run time as timm does (bicubic, antialiased): Dinov2WithRegistersModel's way, not
    Dinov2Model's (no antialiasing, either MLP). The difference is the resampling's; docs/conversion.md says so."""
    found = {}
    for form in FORMS:
        hf = saved(form, tmp_path / form / "hf")
        convert(tmp_path / form / "hf", tmp_path / form / "out")
        found[form] = diffs(hf, ours_from(tmp_path / form / "out", dynamic_img_size=True), NON_SQUARE)[0]
        print(f"dynamic_img_size at {NON_SQUARE[0]}x{NON_SQUARE[1]}, {form}: last_hidden_state {found[form]:.2e}")
    assert found["reg4"] <= TOL
    assert found["plain"] > 1e-3 and found["swiglu"] > 1e-3


def test_transformers_5_module_names_convert_too(tmp_path):
    """A state dict in memory has transformers 5's names (``attention.q_proj`` ...), not the Hub's."""
    hf = hf_model("reg4")
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    assert "encoder.layer.0.attention.q_proj.weight" in state
    save_file(state, str(tmp_path / "current.safetensors"))
    result = convert(tmp_path / "current.safetensors", tmp_path / "out", num_heads=4, verify=True)
    assert result.model_name == "scratch_dinov2_s14_reg4" and result.verification.passed
    assert result.assumed == {"act_layer": "gelu", "norm_eps": 1e-6}  # no config.json: Dinov2Config's defaults
    assert diffs(hf, ours_from(tmp_path / "out"), SIZE)[0] <= TOL


def test_timms_loader_reads_transformers_file_directly_at_another_size(tmp_path):
    hf = saved("reg4", tmp_path / "hf")
    ours = timm.create_model(
        "scratch_dinov2_s14_reg4",
        embed_dim=64,
        depth=2,
        num_heads=4,
        img_size=NON_SQUARE,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "hf" / "model.safetensors")),
    ).eval()
    assert diffs(hf, ours, NON_SQUARE)[0] <= TOL


# --- what is refused --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"hidden_size": 128}, r"hidden_size 128 \(the weights: 64\)"),
        ({"mlp_ratio": 2}, r"mlp_ratio 2 \(the weights: an MLP 256 wide\)"),
        ({"use_swiglu_ffn": True}, r"use_swiglu_ffn True \(the weights: False\)"),
        ({"qkv_bias": False}, r"qkv_bias False \(the weights: True\)"),
        ({"num_hidden_layers": 3, "image_size": 70}, r"num_hidden_layers 3 .*; image_size 70 \(the weights: a pos"),
        ({"model_type": "dinov2_with_registers"}, r"but the weights are a Dinov2Model's \(no registers\)"),
        ({"num_hidden_layers": 10**9}, r"num_hidden_layers is 1000000000; expected an integer in \[1, "),
        ({"use_swiglu_ffn": "yes"}, r"use_swiglu_ffn is 'yes'; expected true or false"),
        ({"hidden_act": "relu"}, r"hidden_act is 'relu'; expected 'gelu'"),
    ],
)
def test_a_config_that_disagrees_with_the_weights_is_one_error_before_anything_is_built(
    tmp_path, capsys, change, problem
):
    saved("plain", tmp_path / "hf")
    config = config_of(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ConversionError, match=problem):
        convert(tmp_path / "hf", tmp_path / "out", verify=True)
    capsys.readouterr()  # transformers' progress bar of save_pretrained
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vitscratch: error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("embeddings.position_embeddings", r"missing key: 'embeddings.position_embeddings'"),
        ("encoder.layer.0.mlp.fc2.weight", r"missing key: 'encoder.layer.0.mlp.fc2.weight'"),
        ("embeddings.patch_embeddings.projection.weight", r"projection.weight' has shape \(64, 588\); expected 4"),
    ],
)
def test_a_damaged_checkpoint_is_one_clear_error(tmp_path, damage, problem):
    """A tensor missing or of the wrong rank, read before the key map: an error naming it, not a crash."""
    saved("plain", tmp_path / "hf")
    state = load_file(str(tmp_path / "hf" / "model.safetensors"))
    if damage.endswith("projection.weight"):
        state[damage] = state[damage].flatten(1).contiguous()
    else:
        del state[damage]
    save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(ConversionError, match=problem):
        convert(tmp_path / "hf", tmp_path / "out")


def test_registers_config_against_plain_weights_is_refused(tmp_path):
    saved("reg4", tmp_path / "hf")
    config = config_of(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "num_register_tokens": 2}))
    with pytest.raises(ConversionError, match=r"num_register_tokens 2 \(the weights: 4\)"):
        convert(tmp_path / "hf", tmp_path / "out")


def test_the_classification_wrapper_is_refused_naming_the_backbone(tmp_path):
    """Dinov2ForImageClassification's classifier reads the class token beside the mean patch token (2 x width),
    a pooling the scratch models do not have."""
    config = transformers.Dinov2Config(**TINY, num_labels=3)
    transformers.Dinov2ForImageClassification(config).save_pretrained(tmp_path / "hf")
    fmt, detected = detect_format(StateDictCheckpoint(load_file(str(tmp_path / "hf" / "model.safetensors"))))
    assert (fmt.name, detected) == ("transformers", True)
    with pytest.raises(ConversionError, match=r"Dinov2ForImageClassification .*convert its backbone"):
        convert(tmp_path / "hf", tmp_path / "out")


def test_each_layout_is_told_apart():
    cases = {
        "transformers": hf_model("plain").state_dict(),
        "transformers ": hf_model("reg4").state_dict(),
        "timm": timm.create_model("vit_small_patch14_reg4_dinov2", depth=1, img_size=SIZE).state_dict(),
    }
    for expected, state_dict in cases.items():
        fmt, detected = detect_format(StateDictCheckpoint(state_dict))
        assert (fmt.name, detected) == (expected.strip(), True)


# --- ours -> transformers -> ours -----------------------------------------------------------------------------
@pytest.mark.parametrize("form", list(FORMS))
def test_round_trip_ours_transformers_ours(tmp_path, capsys, form):
    """transformers -> ours -> (``vitscratch export --to transformers``) transformers -> ours: transformers loads
    the export as its own class and gives our outputs; the second conversion gives back the same tensors."""
    hf = saved(form, tmp_path / "hf")
    convert(tmp_path / "hf", tmp_path / "ours1")
    ours1 = ours_from(tmp_path / "ours1")
    assert cli_main(["export", str(tmp_path / "ours1"), "--to", "transformers", str(tmp_path / "hf2")]) == 0
    assert capsys.readouterr().out.strip().endswith(f"transformers layout) from {FORMS[form][3]}")
    assert sorted(p.name for p in (tmp_path / "hf2").iterdir()) == [
        "config.json",
        "model.safetensors",
        "preprocessor_config.json",
    ]
    back = transformers.AutoModel.from_pretrained(tmp_path / "hf2").eval()
    assert type(back) is type(hf)
    second = convert(tmp_path / "hf2", tmp_path / "ours2", verify=True, strict=True)
    assert second.verification.confirmed and second.model_name == FORMS[form][3]
    ours2 = ours_from(tmp_path / "ours2")
    first, again = ours1.state_dict(), ours2.state_dict()
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    x = images(SIZE)
    with torch.no_grad():
        steps = {
            f"ours -> transformers {SIZE[0]}x{SIZE[1]}": diffs(back, ours1, SIZE)[0],
            # the same weights in transformers' own class, at a size it resamples its table for
            f"transformers -> ours -> transformers {NON_SQUARE[0]}x{NON_SQUARE[1]}": max_diff(
                back(pixel_values=images(NON_SQUARE)).last_hidden_state,
                hf(pixel_values=images(NON_SQUARE)).last_hidden_state,
            ),
            "ours -> transformers -> ours, pooled": max_diff(ours2(x), ours1(x)),
        }
    print(f"round trip ({form}): " + ", ".join(f"{k} {v:.2e}" for k, v in steps.items()))
    assert max(steps.values()) <= TOL


def test_timms_giant_goes_to_transformers_swiglu_model_through_ours(tmp_path):
    """timm's ``vit_giant_patch14_dinov2`` (SwiGLUPacked) -> ours -> transformers' Dinov2Model with
    ``use_swiglu_ffn``: the giant's MLP width (embed_dim x 2.66667) is Dinov2SwiGLUFFN's at mlp_ratio 4, and
    transformers gives timm's outputs."""
    timm_giant = perturbed(
        timm.create_model("vit_giant_patch14_dinov2", embed_dim=96, depth=2, num_heads=4, img_size=SIZE)
    )
    save_file(timm_giant.state_dict(), str(tmp_path / "giant.safetensors"))
    result = convert(tmp_path / "giant.safetensors", tmp_path / "ours", num_heads=4, verify=True)
    assert result.verification.passed and result.model_args["swiglu_mlp"] is True
    export(tmp_path / "ours", "transformers", tmp_path / "hf")
    assert {k: config_of(tmp_path / "hf")[k] for k in ("use_swiglu_ffn", "mlp_ratio")} == {
        "use_swiglu_ffn": True,
        "mlp_ratio": 4,
    }
    hf = transformers.Dinov2Model.from_pretrained(tmp_path / "hf").eval()
    x = images(SIZE)
    with torch.no_grad():
        diff = max_diff(hf(pixel_values=x).last_hidden_state, timm_giant.forward_features(x))
    print(f"timm giant -> ours -> transformers (use_swiglu_ffn): last_hidden_state against timm {diff:.2e}")
    assert diff <= TOL


def test_export_refuses_what_dinov2model_cannot_hold(tmp_path):
    classifier = timm.create_model("scratch_dinov2_s14", embed_dim=64, depth=2, num_heads=4, img_size=56, num_classes=5)
    save_model_directory(classifier, tmp_path / "classifier")
    with pytest.raises(ConversionError, match="Dinov2Model has no classifier"):
        export(tmp_path / "classifier", "transformers", tmp_path / "hf")
    pooled = timm.create_model(
        "scratch_dinov2_s14", embed_dim=64, depth=2, num_heads=4, num_classes=0, global_pool="avg"
    )
    save_model_directory(pooled, tmp_path / "pooled")
    with pytest.raises(ConversionError, match=r"no place for a norm after pooling \(fc_norm\)"):
        export(tmp_path / "pooled", "transformers", tmp_path / "hf")
    # the giant's ratio at width 64 gives 170, and Dinov2SwiGLUFFN's widths are multiples of 8
    giant = timm.create_model("scratch_dinov2_g14", embed_dim=64, depth=2, num_heads=4, img_size=56, num_classes=0)
    save_model_directory(giant, tmp_path / "giant")
    with pytest.raises(ConversionError, match=r"none gives this model's 170 at width 64"):
        export(tmp_path / "giant", "transformers", tmp_path / "hf")
    vit = timm.create_model("scratch_vit_ti16", img_size=32, patch_size=8, depth=2, num_classes=0)
    save_model_directory(vit, tmp_path / "vit")
    with pytest.raises(ConversionError, match=r"this model is not DINOv3 \(rotary position\) nor DINOv2"):
        export(tmp_path / "vit", "transformers", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


# --- the license ----------------------------------------------------------------------------------------------
def test_the_license_travels_as_for_every_export(tmp_path):
    """DINOv2's weights are Apache-2.0: recorded, and its SPDX id goes with them as LICENSE.md; a license that
    demands its text (the DINOv3 License stands for one here) gets it inside the transformers directory."""
    for license_id, files in (
        ("apache-2.0", ["LICENSE.md"]),
        ("dinov3-license", [TRAVELLING["dinov3-license"].file_name]),
    ):
        model = timm.create_model(
            "scratch_dinov2_s14_reg4",
            embed_dim=64,
            depth=2,
            num_heads=4,
            img_size=56,
            num_classes=0,
            pretrained_cfg_overlay=dict(license=license_id),
        )
        directory = save_model_directory(model, tmp_path / license_id / "ours")
        assert config_of(directory)["pretrained_cfg"]["license"] == license_id
        result = export(directory, "transformers", tmp_path / license_id / "hf")
        names = sorted(p.name for p in (tmp_path / license_id / "hf").iterdir())
        assert names == sorted(["config.json", "model.safetensors", "preprocessor_config.json", *files])
        assert result.license_file == tmp_path / license_id / "hf" / "LICENSE.md"
        assert result.license_text == (license_id == "dinov3-license")
        print(f"{license_id}: export to transformers writes {', '.join(names)}")
