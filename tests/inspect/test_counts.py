"""Parameter counts of every variant, against torchvision's models, torchsummary's output and the formulas."""

import contextlib
import io
import re

import pytest
import timm
import torch
import torchvision
from torchsummary import summary as torchsummary_summary

from tests.support import sweep
from timm_vitscratch.inspect.counts import (
    analytic_param_count,
    block_param_breakdown,
    block_param_formula,
    block_part_formulas,
    block_shape,
    hidden_parameters,
    leaf_module_param_count,
    model_count_args,
    param_breakdown,
    reference_param_count,
    timm_reference,
    torchvision_reference,
    true_param_count,
)
from timm_vitscratch.inspect.render import zoo_table
from timm_vitscratch.models.build import build_on_meta
from timm_vitscratch.models.variants import ARCHITECTURES, DINOV3_TIMM_NAMES, TIMM_NAMES

CLASSIC = sorted(n for n in ARCHITECTURES if n not in TIMM_NAMES)

TORCHVISION_TRUE_COUNTS_1000 = {
    "scratch_vit_b16": ("vit_b_16", 86_567_656),
    "scratch_vit_b32": ("vit_b_32", 88_224_232),
    "scratch_vit_l16": ("vit_l_16", 304_326_632),
    "scratch_vit_l32": ("vit_l_32", 306_535_400),
    "scratch_vit_h14": ("vit_h_14", 632_045_800),
}

LEAF_COUNTS_5_CLASSES = {
    "scratch_vit_b16": 85_650_437,
    "scratch_vit_b32": 87_419_909,
    "scratch_vit_l32": 305_463_301,
    "scratch_vit_h14": 630_440_965,
}


def test_every_variant_is_listed():
    # scratch_test_* are the test suite's own option models (tests/support/option_models.py)
    assert sorted(timm.list_models("scratch_*", exclude_filters=["scratch_test_*"])) == sorted(ARCHITECTURES)
    assert len(CLASSIC) == 15 and len(DINOV3_TIMM_NAMES) == 12


@pytest.mark.parametrize("name", sorted(TORCHVISION_TRUE_COUNTS_1000))
def test_true_count_equals_torchvision(name):
    builder, literal = TORCHVISION_TRUE_COUNTS_1000[name]
    ours = true_param_count(build_on_meta(name, num_classes=1000))
    with torch.device("meta"):
        theirs = true_param_count(getattr(torchvision.models, builder)())
    assert ours == theirs == literal


@pytest.mark.parametrize("name", [n for n in CLASSIC if "deit" not in n])
def test_true_count_equals_torchvision_every_non_distilled_variant(name):
    model = build_on_meta(name)
    assert true_param_count(model) == true_param_count(torchvision_reference(name))


@pytest.mark.parametrize("name", sorted(LEAF_COUNTS_5_CLASSES))
def test_leaf_count_at_5_classes(name):
    model = build_on_meta(name, num_classes=5)
    assert leaf_module_param_count(model) == LEAF_COUNTS_5_CLASSES[name]


def test_b16_true_count_at_5_classes_and_the_gap():
    model = build_on_meta("scratch_vit_b16", num_classes=5)
    assert true_param_count(model) == 85_802_501
    assert hidden_parameters(model) == {"cls_token": 768, "pos_embed": 197 * 768}
    assert true_param_count(model) - leaf_module_param_count(model) == 152_064


def _torchsummary_total(model, input_size):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        torchsummary_summary(model, input_size, device="cpu")
    match = re.search(r"Total params: ([\d,]+)", out.getvalue())
    assert match, out.getvalue()[-500:]
    return int(match.group(1).replace(",", ""))


@pytest.mark.slow  # torchsummary over full-size models
@pytest.mark.parametrize("name", ["scratch_vit_b16", "scratch_vit_b32"])
def test_real_torchsummary_prints_leaf_count(name):
    model = timm.create_model(name, num_classes=5).eval()
    with torch.no_grad():
        printed = _torchsummary_total(model, (3, 224, 224))
    assert printed == LEAF_COUNTS_5_CLASSES[name] == leaf_module_param_count(model)


def test_torchsummary_on_distilled_and_has_logits_tiny_models():
    for name, hidden in [
        ("scratch_deit_ti16_distilled", {"cls_token", "dist_token", "pos_embed"}),
        ("scratch_vit_b16_in21k", {"cls_token", "pos_embed"}),
    ]:
        model = timm.create_model(name, img_size=32, patch_size=8, depth=1, num_classes=7).eval()
        assert set(hidden_parameters(model)) == hidden
        with torch.no_grad():
            assert _torchsummary_total(model, (3, 32, 32)) == leaf_module_param_count(model)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
@pytest.mark.parametrize("num_classes", [None, 5, 0])
def test_analytic_count_and_breakdown(name, num_classes):
    kwargs = {} if num_classes is None else dict(num_classes=num_classes)
    model = build_on_meta(name, **kwargs)
    arch = ARCHITECTURES[name]
    expected = analytic_param_count(num_classes=model.num_classes, **arch)  # from the variant's options
    assert true_param_count(model) == expected
    assert analytic_param_count(**model_count_args(model)) == expected  # from what the built model holds
    assert sum(param_breakdown(model).values()) == expected
    block = sum(p.numel() for p in model.blocks[0].parameters())
    h = arch["embed_dim"]
    shape = block_shape(model.blocks[0])
    assert block == block_param_formula(h, **shape)
    assert block_param_breakdown(model.blocks[0]) == block_part_formulas(h, **shape)
    if name in CLASSIC:
        assert block == block_param_formula(h) == 12 * h**2 + 13 * h


@pytest.mark.parametrize(
    ("name", "num_classes"),
    # every row with its own head; another head count on the representative rows (every one: the full sweep)
    [(name, None) for name in sorted(TIMM_NAMES)] + [(name, 1000) for name in sweep.rows(sorted(TIMM_NAMES))],
)
def test_family_counts_equal_timm_on_meta(name, num_classes):
    """True and torchsummary counts of each DINOv2 / DINOv3 / SigLIP / SigLIP 2 NaFlex / EVA02 / PE variant against
    timm's model of the same architecture, built on meta: the same parameters, by name and shape."""
    ours = build_on_meta(name, **({} if num_classes is None else dict(num_classes=num_classes)))
    theirs = timm_reference(name, ours.num_classes)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [(n, p.shape) for n, p in theirs.named_parameters()]
    assert true_param_count(ours) == true_param_count(theirs)
    assert reference_param_count(name, ours.num_classes) == (f"timm {TIMM_NAMES[name]}", true_param_count(ours))
    # the same rule over timm's modules: its Eva hides the same parameters from torchsummary
    assert hidden_parameters(ours) == hidden_parameters(theirs)
    assert leaf_module_param_count(ours) == leaf_module_param_count(theirs)
    assert torchvision_reference(name) is None


def test_zoo_table_sets_each_family_variant_beside_timm():
    rows = {line.split()[0]: line for line in zoo_table().splitlines()[2:]}
    assert len(rows) == len(ARCHITECTURES)
    for name, timm_name in TIMM_NAMES.items():
        model = build_on_meta(name)
        cells = rows[name].split()
        true_count, leaf = true_param_count(model), leaf_module_param_count(model)
        assert cells[1:5] == [str(model.num_classes), f"{true_count:,}", f"{leaf:,}", f"{true_count - leaf:,}"]
        assert cells[5:] == [f"{true_count:,}", "(timm", f"{timm_name})", "yes"]
    for name in CLASSIC:
        assert rows[name].split()[-1] == ("—" if "deit" in name else "yes")


@pytest.mark.parametrize(
    "name,hidden_per_block",
    [
        ("scratch_dinov3_s16", {"gamma_1", "gamma_2"}),
        ("scratch_dinov3_s16_plus_qkvb", {"gamma_1", "gamma_2", "attn.q_bias", "attn.v_bias", "attn.qkv.weight"}),
    ],
)
def test_torchsummary_on_tiny_dinov3_models(name, hidden_per_block):
    # with Eva's split bias the attention applies qkv.weight through F.linear: qkv never runs, and torchsummary,
    # which counts the modules that run, leaves its weight out
    model = timm.create_model(name, img_size=32, embed_dim=64, depth=2, num_heads=4, num_classes=7).eval()
    expected = {"cls_token", "reg_token"} | {f"blocks.{i}.{n}" for i in range(2) for n in hidden_per_block}
    assert set(hidden_parameters(model)) == expected
    with torch.no_grad():
        assert _torchsummary_total(model, (3, 32, 32)) == leaf_module_param_count(model)


def test_sincos_position_table_is_a_buffer_not_a_parameter():
    learned = build_on_meta("scratch_vit_b16", num_classes=5)
    fixed = build_on_meta("scratch_vit_b16", num_classes=5, pos_embed="sincos")
    assert "pos_embed" not in dict(fixed.named_parameters())
    assert true_param_count(learned) - true_param_count(fixed) == 197 * 768
    assert leaf_module_param_count(fixed) == leaf_module_param_count(learned)


@pytest.mark.parametrize(
    "name,hidden_in_model,hidden_per_block",
    [
        # packed SwiGLU; Eva's split bias: qkv never runs, so its weight is hidden too
        ("scratch_eva02_s14", {"cls_token", "pos_embed"}, {"attn.q_bias", "attn.v_bias", "attn.qkv.weight"}),
        # separate q/k/v projections (each runs), a LayerNorm inside the MLP; the CLIP tower's on the heads too
        ("scratch_eva02_b14", {"cls_token", "pos_embed"}, set()),
        ("scratch_eva02_b16_clip", {"cls_token", "pos_embed"}, set()),
        # AttentionRope's fused bias, norm_pre, the attention pool (its latent query) over the class token too
        ("scratch_pe_core_s16", {"cls_token", "pos_embed", "attn_pool.latent"}, set()),
        # no class token, Eva's layer scales, no final norm
        ("scratch_pe_spatial_g14", {"pos_embed"}, {"gamma_1", "gamma_2"}),
        # timm's ViT with the packed SwiGLU and LayerScale modules (their gamma is no weight or bias)
        ("scratch_dinov2_g14_reg4", {"cls_token", "reg_token", "pos_embed"}, {"ls1.gamma", "ls2.gamma"}),
        # RmsNorms (weight only) everywhere, the patch tokens' too, timm's SwiGLU, no biases but the patch's
        ("scratch_aimv2_l14", {"pos_embed"}, set()),
    ],
)
def test_torchsummary_on_tiny_new_family_models_equals_timms(name, hidden_in_model, hidden_per_block):
    """torchsummary run on ours and on timm's model of the same architecture (tiny): both print the leaf count,
    and the true counts agree."""
    # timm builds DINOv2 giant's packed MLP at twice the ratio and halves it: an even width needs embed_dim 96 here
    width = 96 if "dinov2" in name else 64
    kwargs = dict(img_size=32, patch_size=8, embed_dim=width, depth=2, num_heads=4, num_classes=7)
    ours = timm.create_model(name, **kwargs).eval()
    theirs = timm.create_model(TIMM_NAMES[name], **kwargs).eval()
    expected = hidden_in_model | {f"blocks.{i}.{n}" for i in range(2) for n in hidden_per_block}
    assert set(hidden_parameters(ours)) == set(hidden_parameters(theirs)) == expected
    assert true_param_count(ours) == true_param_count(theirs)
    assert true_param_count(ours) == analytic_param_count(**model_count_args(ours))
    with torch.no_grad():
        printed = _torchsummary_total(ours, (3, 32, 32))
        assert printed == _torchsummary_total(theirs, (3, 32, 32)) == leaf_module_param_count(ours)


@pytest.mark.parametrize(
    "options",
    [
        dict(eva_names=True, swiglu_mlp=True),  # packed SwiGLU, Eva's q and v biases
        dict(eva_names=True, swiglu_mlp=True, scale_mlp=True, qkv_fused=False),  # SwiGLU with its norm, q/k/v
        dict(eva_names=True, qkv_fused=False, qkv_bias=False, scale_attn_inner=True),
        dict(swiglu_mlp=True, mlp_ratio=2.5),  # timm's ViT with the packed SwiGLU
        dict(scale_mlp=True, init_values=0.1),  # a GELU MLP with a norm inside
        dict(eva_names=True, attn_type="rope", rope_type="cat", pre_norm=True, final_norm=False),
        dict(global_pool="map", attn_pool_num_heads=2, attn_pool_mlp_ratio=2.0, pool_include_prefix=True),
        dict(global_pool="avg", fc_norm=True, pre_norm=True, class_token=False, reg_tokens=2),
        dict(global_pool="avg", final_norm=False, no_embed_class=True, reg_tokens=1),
        # AIMv2's: RmsNorms (the patch tokens' too), timm's SwiGLU, no projection or MLP biases; and a norm inside
        dict(mlp_layer="swiglu", norm_layer="rmsnorm", embed_norm_layer="rmsnorm", proj_bias=False, qkv_bias=False),
        dict(norm_layer="rmsnorm", scale_mlp=True, scale_attn_inner=True, pre_norm=True, embed_norm_layer="layernorm"),
    ],
)
def test_formulas_read_each_option(options):
    """The count from the options, the count from the built model and the block formula each equal the true count,
    for the options the EVA02 and PE rows brought, alone and together."""
    args = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=7, **options)
    model = build_on_meta("scratch_vit_ti16", **args)
    assert analytic_param_count(**args) == analytic_param_count(**model_count_args(model)) == true_param_count(model)
    shape = block_shape(model.blocks[0])
    assert block_param_breakdown(model.blocks[0]) == block_part_formulas(64, **shape)
    assert sum(param_breakdown(model).values()) == true_param_count(model)
