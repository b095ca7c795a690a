"""DINOv3 through the ways timm's models are compiled, scripted and traced, as the classic family goes through them.

torch.compile (fullgraph: no graph break), torch.jit.script, FX tracing (timm's ``create_feature_extractor``)
and timm's ``features_only`` wrapper, each equal to the eager model (and to timm's ``Eva`` where timm's takes
the same path).
"""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models import create_feature_extractor

from tests.support.dinov3_pairs import TINY_DINOV3, TINY_NAME, dinov3_pair, max_diff, perturbed

TOL = 1e-5
SIZES = ((32, 32), (48, 40))


def _tiny(**options: object) -> torch.nn.Module:
    return perturbed(timm.create_model(TINY_NAME, num_classes=5, **TINY_DINOV3, **options), scale=0.05)


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_compiled_training_step_fullgraph_matches_eager(attn_impl: str) -> None:
    torch._dynamo.reset()
    model = _tiny(attn_impl=attn_impl).train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, fullgraph=True)  # any graph break raises
    x, y = torch.randn(4, 3, 32, 48), torch.randint(0, 5, (4,))
    eager_loss = F.cross_entropy(model(x), y)
    eager_loss.backward()
    compiled_loss = F.cross_entropy(compiled(x), y)
    compiled_loss.backward()
    assert torch.allclose(compiled_loss, eager_loss, atol=1e-5)
    for (name, param), twin_param in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.allclose(twin_param.grad, param.grad, atol=1e-5, rtol=1e-4), name


@pytest.mark.slow  # torch.compile
def test_compiled_dynamic_sizes_fullgraph_match_eager() -> None:
    torch._dynamo.reset()
    model = _tiny()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)  # rotary terms for any grid, in the graph
    with torch.no_grad():
        for height, width in SIZES:
            x = torch.randn(2, 3, height, width)
            assert max_diff(compiled(x), model(x)) <= TOL, (height, width)


def test_torchscript_matches_eager_at_any_size() -> None:
    model = _tiny()
    scripted = torch.jit.script(model)
    with torch.no_grad():
        for height, width in SIZES:
            x = torch.randn(2, 3, height, width)
            assert max_diff(scripted(x), model(x)) <= TOL, (height, width)
            assert max_diff(scripted.forward_features(x), model.forward_features(x)) <= TOL


def test_fx_feature_extractor_gives_timms_block_outputs() -> None:
    """timm's FX-based ``create_feature_extractor`` traces ours and timm's; the block outputs are equal."""
    reference, ours = dinov3_pair(TINY_NAME, **TINY_DINOV3)
    nodes = {"blocks.0": "first", "blocks.1": "last", "norm": "norm"}
    mine, theirs = create_feature_extractor(ours, return_nodes=nodes), create_feature_extractor(reference, nodes)
    x = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        got, expected = mine(x), theirs(x)
    assert list(got) == list(expected) == list(nodes.values())
    for key in nodes.values():
        assert max_diff(got[key], expected[key]) <= TOL, key


def test_fx_traced_training_step_matches_eager() -> None:
    """timm's FX backward test skips DINOv3 (its 256 px default is past that test's 224 px limit): here instead."""
    model = _tiny().train()
    traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    x, y = torch.randn(3, 3, 32, 48), torch.randint(0, 5, (3,))
    eager_loss, traced_loss = F.cross_entropy(model(x), y), F.cross_entropy(traced(x), y)
    eager_loss.backward()
    traced_loss.backward()
    assert abs(eager_loss.item() - traced_loss.item()) <= 1e-6
    traced_params = dict(traced.named_parameters())
    assert set(traced_params) == {name for name, _ in model.named_parameters()}
    for name, param in model.named_parameters():
        grad = traced_params[name].grad
        assert grad is not None and torch.allclose(grad, param.grad, atol=1e-6), name


@pytest.mark.parametrize("out_indices", [(0, 1), (-1,)])
def test_features_only_gives_timms_feature_maps(out_indices: tuple[int, ...]) -> None:
    reference, ours = dinov3_pair(TINY_NAME, **TINY_DINOV3)
    options = dict(TINY_DINOV3, features_only=True, out_indices=out_indices)
    timm_features = timm.create_model("vit_small_plus_patch16_dinov3_qkvb", **options).eval()
    our_features = timm.create_model(TINY_NAME, **options).eval()
    # timm's FeatureGetterNet holds the model as ``model`` (and prunes the blocks past the last index)
    timm_features.load_state_dict({f"model.{k}": v for k, v in reference.state_dict().items()}, strict=False)
    our_features.load_state_dict({f"model.{k}": v for k, v in ours.state_dict().items()}, strict=False)
    assert set(our_features.state_dict()) == set(timm_features.state_dict())
    assert (
        max_diff(our_features.model.blocks[-1].gamma_1, reference.blocks[len(our_features.model.blocks) - 1].gamma_1)
        == 0
    )
    assert our_features.feature_info.channels() == timm_features.feature_info.channels()
    assert our_features.feature_info.reduction() == timm_features.feature_info.reduction()
    x = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        got, expected = our_features(x), timm_features(x)
    assert len(got) == len(expected) == len(out_indices)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape == (2, 64, 4, 6) and max_diff(a, b) <= TOL
