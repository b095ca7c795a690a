"""Activation memory: the extrapolation from 1- and 2-block copies equals measuring the whole model."""

import pytest
import timm

import timm_vitscratch.inspect.memory as memory
from tests.support import TINY
from timm_vitscratch.inspect.memory import estimate_activation_bytes, measure_activation_bytes


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
