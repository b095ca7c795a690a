"""Analytic multiply-adds against torch.utils.flop_counter.FlopCounterMode, on ours, timm's and torchvision's models.

FlopCounterMode reports FLOPs with one multiply-add = 2 FLOPs; our analytic figures are MACs
(multiply-adds), so FlopCounterMode's total / 2 is compared with our MACs, and our FLOPs = 2 x MACs
with FlopCounterMode's total. On CPU, FlopCounterMode (torch 2.14) does not count the fused
``_scaled_dot_product_flash_attention_for_cpu`` kernel, so real-tensor runs use the eager attention
path; on ``meta``, SDPA takes its math path, whose matrix products it does count.
"""

import pytest
import timm
import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

from tests.support import sweep, tiny
from timm_vitscratch.inspect.flops import forward_macs
from timm_vitscratch.inspect.report import build_report
from timm_vitscratch.models.build import build_on_meta
from timm_vitscratch.models.variants import ARCHITECTURES


def counted_flops(model, batch, img_size=224, device="meta"):
    """FLOPs of one forward (ours computes timm's full forward by default)."""
    x = torch.zeros(batch, 3, img_size, img_size, device=device)
    # autograd stays on: under no_grad torch's counter cannot follow a parameter given to a module as its input
    # (the MAP head's latent query), in timm's models as in ours; on meta nothing is stored either way
    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops()


def test_pooled_token_forward_skips_the_last_blocks_patch_token_work():
    model = build_on_meta("scratch_vit_b16").eval()
    full = counted_flops(model, 1)
    model.set_pooled_forward()
    pooled = counted_flops(model, 1)
    tokens, dim, hidden, skipped_queries = 197, 768, 3072, 196
    # per skipped token: its query, its scores and weighted values, the projection and the MLP
    saved_macs = skipped_queries * (dim * dim + 2 * tokens * dim + dim * dim + 2 * dim * hidden)
    assert_within_one_percent(full / 2 - saved_macs, pooled / 2)


def assert_within_one_percent(analytic, counted):
    assert abs(analytic - counted) <= 0.01 * counted, (analytic, counted)


@pytest.mark.slow  # torch's FLOP counter over every variant
@pytest.mark.parametrize("name", sweep.rows(sorted(ARCHITECTURES)))
def test_every_variant_matches_flop_counter(name):
    model = build_on_meta(name).eval()
    flops = build_report(name, batch=2, activations=False)["flops"]
    counted = counted_flops(model, batch=2, img_size=model.patch_embed.img_size[0])  # DINOv3's is 256
    assert_within_one_percent(flops["batch_macs"], counted / 2)  # MACs vs FLOPs/2
    assert_within_one_percent(flops["batch_flops"], counted)  # FLOPs vs FLOPs
    assert flops["per_image_macs"]["total"] == forward_macs(model)["total"]


@pytest.mark.parametrize(
    "kwargs", [dict(img_size=384), dict(num_classes=0), dict(global_pool="avg"), dict(global_pool="")]
)
def test_other_sizes_and_heads_match_flop_counter(kwargs):
    model = build_on_meta("scratch_vit_b16", **kwargs).eval()
    size = kwargs.get("img_size", 224)
    assert_within_one_percent(forward_macs(model)["total"], counted_flops(model, 1, size) / 2)


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_deit_ti16_distilled", "scratch_vit_b16_in21k"])
def test_real_tensors_eager_path_match_flop_counter(name):
    model = tiny(name, attn_impl="eager", num_classes=7).eval()
    assert_within_one_percent(3 * forward_macs(model)["total"], counted_flops(model, 3, 32, "cpu") / 2)


@pytest.mark.slow  # torch's FLOP counter over full-size models
@pytest.mark.parametrize(
    "ours, builder, timm_name",
    [
        ("scratch_vit_b16", "vit_b_16", "vit_base_patch16_224"),
        ("scratch_vit_l32", "vit_l_32", "vit_large_patch32_224"),
        ("scratch_vit_h14", "vit_h_14", "vit_huge_patch14_224"),
        ("scratch_deit_s16_distilled", None, "deit_small_distilled_patch16_224"),
        # timm's Eva: packed SwiGLU and split bias; separate q/k/v with norms in the MLP and on the heads;
        # AttentionRope with norm_pre and the attention pool over every token; timm's ViT with the packed SwiGLU
        ("scratch_eva02_s14", None, "eva02_small_patch14_224"),
        ("scratch_eva02_b16_clip", None, "eva02_base_patch16_clip_224"),
        ("scratch_pe_core_b16", None, "vit_pe_core_base_patch16_224"),
        ("scratch_dinov2_g14_reg4", None, "vit_giant_patch14_reg4_dinov2"),
    ],
)
def test_analytic_matches_flop_counter_on_timm_and_torchvision_models(ours, builder, timm_name):
    model = build_on_meta(ours, num_classes=1000)
    macs = forward_macs(model)["total"]
    size = model.patch_embed.img_size[0]
    with torch.device("meta"):
        references = [timm.create_model(timm_name, num_classes=1000)]
        if builder:
            references.append(getattr(torchvision.models, builder)(num_classes=1000))
    for reference in references:
        assert_within_one_percent(macs, counted_flops(reference.eval(), 1, size) / 2)
