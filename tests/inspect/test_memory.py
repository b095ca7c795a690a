"""Activation memory: the extrapolation from 1- and 2-block copies equals measuring the whole model."""

import gc
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import timm

import timm_vitscratch.inspect.memory as memory
from tests.support import TINY
from timm_vitscratch.inspect.memory import estimate_activation_bytes, measure_activation_bytes

BOUNDED = Path(__file__).parents[1] / "support" / "bounded_child.py"


@pytest.mark.parametrize(
    "name, attn_impl",
    [
        ("scratch_vit_ti16", "sdpa"),
        ("scratch_vit_ti16", "eager"),
        ("scratch_deit_ti16_distilled", "sdpa"),
        ("scratch_vit_b16_in21k", "sdpa"),
    ],
)
@pytest.mark.parametrize("batch", [1, 3])
def test_extrapolation_equals_whole_model_measurement(monkeypatch, name, attn_impl, batch):
    kwargs = {**TINY, "depth": 4, "attn_impl": attn_impl, "num_classes": 7}
    direct = estimate_activation_bytes(name, batch, **kwargs)
    assert direct["method"].startswith("measured: one training forward of the whole model")
    monkeypatch.setattr(memory, "DIRECT_MEASURE_MAX_MACS", 0)  # force the 1-/2-block route
    extrapolated = estimate_activation_bytes(name, batch, **kwargs)
    assert "extrapolated to 4 blocks" in extrapolated["method"]
    assert extrapolated["bytes"] == direct["bytes"] > 0


def test_parameters_and_their_half_copies_are_not_activations():
    """A 150x bigger head adds parameters (and autocast copies of them), not saved activations."""
    small = timm.create_model("scratch_vit_ti16", **TINY, num_classes=10)
    large = timm.create_model("scratch_vit_ti16", **TINY, num_classes=1500)
    assert measure_activation_bytes(small, 2) == measure_activation_bytes(large, 2)


def test_half_precision_saves_less_than_fp32():
    model = timm.create_model("scratch_vit_ti16", **TINY)
    assert measure_activation_bytes(model, 2, autocast=True) < measure_activation_bytes(model, 2, autocast=False)


def test_batch_must_be_positive():
    with pytest.raises(ValueError, match="batch must be >= 1"):
        estimate_activation_bytes("scratch_vit_ti16", 0, **TINY)


# --- large images: measured on small copies, fitted over the patch count (summary --img-size 2048) -------------
@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("scratch_vit_ti16", {"attn_impl": "sdpa"}),
        ("scratch_vit_ti16", {"attn_impl": "eager"}),  # the attention matrix: bytes grow with patches squared
        ("scratch_vit_ti16", {"img_size": (48, 32), "reg_tokens": 2}),  # a grid that is not square
        ("scratch_deit_ti16_distilled", {"img_size": 64}),
    ],
)
@pytest.mark.parametrize("batch", [1, 3])
def test_the_fit_over_patches_equals_measuring_at_full_size(monkeypatch, name, kwargs, batch):
    kwargs = {**TINY, "depth": 3, "num_classes": 5, **kwargs}
    measured = estimate_activation_bytes(name, batch, **kwargs)
    assert "patch grids" not in measured["method"]
    monkeypatch.setattr(memory, "MEASURE_MAX_BYTES", 0)  # every measurement "too large": the fit
    fitted = estimate_activation_bytes(name, batch, **kwargs)
    assert "fitted exactly as a quadratic in the patch count" in fitted["method"]
    assert fitted["bytes"] == measured["bytes"] > 0


def test_a_fit_that_does_not_hold_is_said_not_guessed(monkeypatch):
    monkeypatch.setattr(memory, "MEASURE_MAX_BYTES", 0)
    sizes = iter(range(1, 100))
    monkeypatch.setattr(memory, "measure_activation_bytes", lambda model, batch: next(sizes) ** 3)
    result = estimate_activation_bytes("scratch_vit_ti16", 1, **TINY)
    assert result["bytes"] is None and result["method"].startswith("not measured:")
    from timm_vitscratch.inspect.render import render_report
    from timm_vitscratch.inspect.report import build_report

    report = build_report("scratch_vit_ti16", img_size=32)
    training = report["memory"]["training_mixed_precision_adamw"]
    assert "activations_bytes" not in training and "total_bytes" not in training
    assert training["activations_method"].startswith("not measured:")
    assert "activations for batch" not in render_report(report)


def test_a_large_image_is_measured_in_bounded_memory():
    """ViT-B/16 at 2048 px (16,384 patches, the bound) in a child capped at 400 MB over what it uses: the
    16,384-token copies it used to measure hold 0.9 GB of activations and took a minute and a half."""
    result = subprocess.run(
        [
            sys.executable,
            str(BOUNDED),
            "from timm_vitscratch.inspect.report import build_report",
            "report = build_report('scratch_vit_b16', img_size=2048)\n"
            "training = report['memory']['training_mixed_precision_adamw']\n"
            "assert training['activations_bytes'] > 5 << 30, training\n"
            "assert 'patch grids 1x1 to 4x4' in training['activations_method'], training",
            "400",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["outcome"] == "ok", outcome
    print(f"summary scratch_vit_b16 --img-size 2048: {outcome['seconds']:.1f} s, +{outcome['peak_growth_mb']:.0f} MB")


def test_measuring_keeps_no_model_alive():
    """The saved-tensor hooks must not tie the graph (and with it the model) into a cycle nothing frees."""
    model = timm.create_model("scratch_vit_ti16", **TINY)
    alive = [weakref.ref(p) for p in model.parameters()]
    measure_activation_bytes(model, 2)
    del model
    gc.collect()
    assert [ref for ref in alive if ref() is not None] == []
