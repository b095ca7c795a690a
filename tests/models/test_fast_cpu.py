"""fast_cpu_inference: the opt-in CPU routes (bf16, int8 linear layers) run, stay close to float32 and keep top-1."""

from __future__ import annotations

import warnings

import pytest
import timm
import torch
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the zoo)
from timm_vitscratch.models import fast_cpu
from timm_vitscratch.models.fast_cpu import cpu_has_bf16, fast_cpu_inference, resolve_mode

TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)


def _tiny() -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model("scratch_vit_ti16", **TINY).eval()


def _images() -> torch.Tensor:
    return torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _prepared(mode: str) -> nn.Module:
    model = _tiny()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization's deprecation notice
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor")  # and its quantised tensors
        return fast_cpu_inference(model, mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode, tolerance", [("bf16", 0.1), ("int8", 0.3)])
def test_the_route_runs_close_to_float32_and_keeps_top1_away_from_ties(mode, tolerance):
    images = _images()
    with torch.inference_mode():
        reference = _tiny()(images)
        output = _prepared(mode)(images)
    assert output.dtype == torch.float32 and output.shape == reference.shape
    diff = (output - reference).abs().max().item()
    assert diff < tolerance * reference.abs().max().item()
    # top-1 may change only where float32's top two logits are within the route's error of each other
    top2 = reference.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1]) > 2 * diff
    assert clear.any()
    assert torch.equal(output.argmax(-1)[clear], reference.argmax(-1)[clear])
    assert (output.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.75


def test_bf16_casts_weights_and_keeps_the_module_tree():
    model = _tiny()
    names = [name for name, _ in model.named_modules()]
    keys = list(model.state_dict())
    fast_cpu_inference(model, "bf16")
    assert [name for name, _ in model.named_modules()] == names
    assert list(model.state_dict()) == keys
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert not model.training and model.fast_cpu_mode == "bf16"


def test_int8_replaces_the_linear_layers():
    model = _prepared("int8")
    assert not any(type(module) is nn.Linear for module in model.modules())
    assert model.fast_cpu_mode == "int8"


def test_auto_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(fast_cpu.torch.cpu, "get_capabilities", lambda: {"amx_bf16": True})
    assert cpu_has_bf16() and resolve_mode("auto") == "bf16"
    monkeypatch.setattr(fast_cpu.torch.cpu, "get_capabilities", lambda: {"avx2": True})
    assert not cpu_has_bf16() and resolve_mode("auto") == "int8"
    assert resolve_mode("bf16") == "bf16"


def test_unknown_mode_and_a_second_call_are_refused():
    with pytest.raises(ValueError, match="unknown mode"):
        fast_cpu_inference(_tiny(), "fp8")  # type: ignore[arg-type]
    model = fast_cpu_inference(_tiny(), "bf16")
    with pytest.raises(ValueError, match="already prepared"):
        fast_cpu_inference(model, "bf16")
