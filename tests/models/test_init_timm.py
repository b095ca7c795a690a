"""Weight init against timm's own: for every ``weight_init`` scheme timm's ``VisionTransformer`` accepts.

Built directly (``VisionTransformer(...)``, as timm builds its own), our model draws timm's random
numbers in timm's order: with the same options and seed every tensor is bit-identical. Built
through ``timm.create_model`` with other seeds than timm's, each parameter's distribution is timm's:
mean, std and the two-sample Kolmogorov-Smirnov distance are compared per parameter (with the same
seed the tensors are timm's: tests/models/test_same_seed.py).
"""

import math

import pytest
import timm
import torch
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer as TimmViT

from timm_vitscratch import VisionTransformer

#: every scheme timm's VisionTransformer takes (its weight_init Literal)
SCHEMES = ("", "jax", "jax_nlhb", "moco", "reset", "skip")
SMALL = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)
#: option sets that bring in every kind of layer: LayerScale, q/k norms, registers, the MAP head,
#: the pre-norm, fc_norm, no class token
OPTIONS = {
    "plain": dict(),
    "layerscale_qknorm_registers": dict(init_values=0.1, qk_norm=True, reg_tokens=2, no_embed_class=True),
    "map_head": dict(global_pool="map", class_token=False),
    "clip_avg": dict(pre_norm=True, global_pool="avg", mlp_ratio=2.0),
}
#: tensors timm's 'skip' leaves uninitialised (``torch.empty``): ours are zeros there
SKIPPED_BY_TIMM = {"pos_embed", "cls_token", "reg_token", "dist_token"}


def _pairs(ours: torch.nn.Module, theirs: torch.nn.Module):
    own = dict(ours.named_parameters())
    names = [name for name, _ in theirs.named_parameters()]
    assert set(own) == set(names)
    return [(name, own[name], param) for name, param in theirs.named_parameters()]


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
@pytest.mark.parametrize("mode", SCHEMES)
def test_direct_build_draws_timms_tensors(mode, options):
    torch.manual_seed(0)
    theirs = TimmViT(**SMALL, **options, weight_init=mode)
    torch.manual_seed(0)
    ours = VisionTransformer(**SMALL, **options, weight_init=mode)
    for name, mine, reference in _pairs(ours, theirs):
        if mode == "skip" and name in SKIPPED_BY_TIMM:
            assert torch.all(mine == 0), name  # timm's are whatever torch.empty held
            continue
        assert torch.equal(mine, reference), f"{mode!r}: {name}"


@pytest.mark.parametrize("mode", ["", "jax_nlhb", "moco"])
def test_distilled_direct_build_draws_timms_deit_tensors(mode):
    torch.manual_seed(0)
    theirs = VisionTransformerDistilled(**SMALL, weight_init=mode)
    torch.manual_seed(0)
    ours = VisionTransformer(**SMALL, distilled=True, weight_init=mode)
    for name, mine, reference in _pairs(ours, theirs):
        assert torch.equal(mine, reference), f"{mode!r}: {name}"


def _ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = a.flatten().double().sort().values, b.flatten().double().sort().values
    grid = torch.cat([a, b])
    cdf_a = torch.searchsorted(a, grid, right=True) / a.numel()
    cdf_b = torch.searchsorted(b, grid, right=True) / b.numel()
    return (cdf_a - cdf_b).abs().max().item()


#: significance of each comparison; the checks are deterministic (fixed seeds), the level says how far
#: from timm's distribution a sample may lie before it counts as another distribution
ALPHA = 1e-6
KS_C = math.sqrt(-0.5 * math.log(ALPHA / 2))  # KS critical value c(alpha): 2.69
Z = 5.0  # mean and std: five standard errors (two-sided p about 6e-7)


def assert_same_distribution(name: str, mine: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """Per parameter: constants equal; otherwise mean, std and KS distance within what n samples allow."""
    mine, reference = mine.detach().double().flatten(), reference.detach().double().flatten()
    n = reference.numel()
    if reference.std() == 0 or n == 1:  # zeros, ones, a constant head bias or LayerScale
        assert torch.equal(mine, reference), name
        return {}
    sigma = reference.std().item()
    stats = {
        "mean": abs(mine.mean().item() - reference.mean().item()),
        "std": abs(mine.std().item() - sigma),
        "ks": _ks_distance(mine, reference),
    }
    # two samples of n: the means differ by sigma*sqrt(2/n) typically; sample stds by about sigma/sqrt(n)
    # (a normal's sample std has standard error sigma/sqrt(2n); the uniform's is smaller)
    assert stats["mean"] <= Z * sigma * math.sqrt(2 / n), (name, stats)
    assert stats["std"] <= Z * sigma / math.sqrt(n), (name, stats)
    assert stats["ks"] <= KS_C * math.sqrt(2 / n), (name, stats)
    return stats


#: the option sets at width 64, and ViT-S width (384, 6 heads) where 590k-element matrices make the checks tight
CREATE_CASES = {
    **{name: ("scratch_vit_ti16", {**SMALL, **options}) for name, options in OPTIONS.items()},
    "vit_s_width": ("scratch_vit_s16", dict(img_size=64, patch_size=16, embed_dim=384, depth=2, num_heads=6)),
}


@pytest.mark.parametrize("variant, options", CREATE_CASES.values(), ids=CREATE_CASES.keys())
@pytest.mark.parametrize("mode", SCHEMES)
def test_create_model_initialises_like_timm(mode, variant, options):
    """``create_model`` draws from timm's distributions."""
    torch.manual_seed(1)
    theirs = TimmViT(**options, weight_init=mode)
    torch.manual_seed(2)
    ours = timm.create_model(variant, **options, weight_init=mode)
    for name, mine, reference in _pairs(ours, theirs):
        if mode == "skip" and name in SKIPPED_BY_TIMM:
            continue  # timm's hold no distribution
        assert_same_distribution(f"{mode!r}: {name}", mine, reference)


def test_the_statistics_tell_the_patch_projections_init_apart():
    """The checks have the power to see a wrong scheme: lecun normal is not torch's conv default."""
    torch.manual_seed(0)
    theirs = TimmViT(**SMALL).patch_embed.proj.weight
    lecun = torch.empty_like(theirs)
    timm.layers.lecun_normal_(lecun)
    with pytest.raises(AssertionError):
        assert_same_distribution("patch_embed.proj.weight", lecun, theirs)


def test_init_weights_again_matches_timms_init_weights():
    """``init_weights(mode)`` on a built model: the same draws as timm's ``init_weights(mode)``."""
    ours, theirs = VisionTransformer(**SMALL), TimmViT(**SMALL)
    for mode in ("jax", "moco", "reset"):
        torch.manual_seed(5)
        theirs.init_weights(mode)
        torch.manual_seed(5)
        ours.init_weights(mode)
        for name, mine, reference in _pairs(ours, theirs):
            assert torch.equal(mine, reference), f"{mode!r}: {name}"


def test_partially_loaded_layer_keeps_its_loaded_tensor():
    """materialize() initialises only what a load left empty, even within one layer."""
    source = timm.create_model("scratch_vit_ti16", **SMALL)
    state = {k: v for k, v in source.state_dict().items() if k != "blocks.0.attn.qkv.bias"}
    model = timm.create_model("scratch_vit_ti16", **SMALL, device="meta")
    model.load_state_dict(state, strict=False)
    assert not model.has_meta_tensors()
    assert torch.equal(model.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)
    assert torch.all(model.blocks[0].attn.qkv.bias == 0)  # timm's scheme: zero bias


def test_new_classifier_follows_the_scheme():
    model = VisionTransformer(**SMALL, weight_init="jax_nlhb")
    model.reset_classifier(7)
    assert torch.all(model.head.weight == 0)
    assert torch.allclose(model.head.bias, torch.full((7,), -math.log(7)))


#: DINOv3 as timm's Eva builds it, in small widths: GELU or SwiGLU MLP, with and without the qkv bias
_EVA_COMMON = dict(img_size=64, patch_size=16, embed_dim=64, depth=2, num_heads=4, num_classes=10, init_values=1e-5)


@pytest.mark.parametrize("swiglu", [False, True], ids=["gelu", "swiglu"])
@pytest.mark.parametrize("qkv_bias", [False, True], ids=["no_bias", "qkvb"])
def test_eva_names_draw_timms_eva_tensors(swiglu, qkv_bias):
    from functools import partial

    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    mlp = dict(swiglu_mlp=swiglu, swiglu_align_to=8 if swiglu else 0)
    torch.manual_seed(0)
    theirs = Eva(
        **_EVA_COMMON,
        **mlp,
        qkv_bias=qkv_bias,
        dynamic_img_size=True,
        rope_type="dinov3",
        rope_temperature=100,
        rope_rotate_half=True,
        use_rot_pos_emb=True,
        use_abs_pos_emb=False,
        num_reg_tokens=4,
        use_fc_norm=False,
        norm_layer=partial(LayerNorm, eps=1e-5),
    )
    torch.manual_seed(0)
    ours = VisionTransformer(
        **_EVA_COMMON,
        **mlp,
        qkv_bias=qkv_bias,
        dynamic_img_size=True,
        rope_type="dinov3",
        rope_temperature=100,
        reg_tokens=4,
        pos_embed="none",
        global_pool="avg",
        fc_norm=False,
        norm_eps=1e-5,
        eva_names=True,
    )
    for name, mine, reference in _pairs(ours, theirs):
        assert torch.equal(mine, reference), name


def test_dinov3_through_create_model_has_evas_distributions():
    # Eva's rules (tokens N(0, .02), residual projections scaled by depth,
    # the head by 1e-3), not the classic ViT's (tokens N(0, 1e-6))
    import timm_vitscratch  # noqa: F401  (registers the models)

    torch.manual_seed(0)
    model = timm.create_model("scratch_dinov3_s16", num_classes=100)
    assert 0.015 < model.cls_token.std().item() < 0.025 and 0.015 < model.reg_token.std().item() < 0.025
    last = len(model.blocks) - 1
    proj = model.blocks[last].attn.proj.weight.std().item()
    assert math.isclose(proj, 0.02 / math.sqrt(2 * (last + 1)), rel_tol=0.1), proj
    assert 1e-5 < model.head.weight.std().item() < 3e-5 and torch.all(model.head.bias == 0)
    assert torch.all(model.blocks[0].gamma_1 == 1e-5)
