"""NaFlex batches through DINOv3: each image's output equals that image alone and timm's ``NaFlexVit``.

DINOv3 takes any input size (``dynamic_img_size``), so the image alone is the same model on that image.
Batches come from timm's ``Patchify`` and ``NaFlexCollator``; the reference is timm's ``NaFlexVit`` built
as DINOv3 (Eva blocks and attention, rotary ``'dinov3'`` rotate-half, class + 4 register tokens, no
position table, LayerNorm eps 1e-5), loaded with our weights through timm's NaFlex filter: timm 1.0.31
supports that model in NaFlex (timm #2692 fixed its rotary terms there). Run with ``-s`` for the figures.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg, checkpoint_filter_fn
from torch.utils.flop_counter import FlopCounterMode

from tests.support.dinov3_pairs import TINY_DINOV3, max_diff, perturbed
from tests.support.naflex_batches import MIXED_SIZES, images, naflex_batch
from timm_vitscratch import VisionTransformer

TOL = 1e-5
LONGEST = 30  # patches of the largest image in MIXED_SIZES (40x48 pixels at patch 8)
NAMES = ["scratch_dinov3_s16", "scratch_dinov3_s16_plus_qkvb"]


def _ours(name: str, **options: Any) -> VisionTransformer:
    return cast(VisionTransformer, perturbed(timm.create_model(name, num_classes=5, **TINY_DINOV3, **options)))


def _timm_naflexvit(ours: VisionTransformer, global_pool: str = "avg") -> NaFlexVit:
    """timm's NaFlexVit in DINOv3's shape, with ``ours``' weights through timm's own NaFlex filter."""
    swiglu = ours.blocks[0].mlp.__class__.__name__ == "SwiGLU"
    cfg = NaFlexVitCfg(
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        qkv_bias=ours.blocks[0].attn.q_bias is not None,
        init_values=1e-5,
        class_token=True,
        reg_tokens=4,
        pos_embed="none",
        rope_type="dinov3",
        rope_temperature=100.0,
        rope_rotate_half=True,
        attn_type="eva",
        swiglu_mlp=swiglu,
        swiglu_align_to=8 if swiglu else 0,
        global_pool=global_pool,
        fc_norm=False,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-5),  # type: ignore[arg-type]  # timm takes a layer too
    )
    reference = NaFlexVit(cfg=cfg, img_size=32, num_classes=5).eval()
    state = checkpoint_filter_fn({k: v.clone() for k, v in ours.state_dict().items()}, reference)
    reference.load_state_dict(state, strict=True)
    return reference


def _patches(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("patches", "patch_coord", "patch_valid")}


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("name", NAMES)
def test_each_image_equals_itself_alone_and_timms_naflexvit(name: str, packed: bool) -> None:
    model = _ours(name)
    model.set_naflex_packed(packed)
    reference = _timm_naflexvit(model)
    pictures = images(MIXED_SIZES)
    batch = naflex_batch(pictures, patch_size=8, max_seq_len=96)
    keep = torch.cat([torch.ones(len(pictures), model.num_prefix_tokens, dtype=torch.bool), batch["patch_valid"]], 1)
    with torch.no_grad():
        logits, expected = model(batch), reference(batch)
        alone = torch.cat([model(picture[None]) for picture in pictures])
        features = model.forward_features(batch)["patches"]
        timm_features = reference.forward_features(**_patches(batch))["patches"]
        ours_kept = model.forward_intermediates(batch, indices=[0, 1], output_fmt="NLC", intermediates_only=True)
        timm_kept = reference.forward_intermediates(batch, indices=[0, 1], output_fmt="NLC", intermediates_only=True)
    diffs = {
        "alone": max_diff(logits, alone),
        "timm NaFlexVit": max_diff(logits, expected),
        "features": max_diff(features[keep], timm_features[keep]),
        "intermediates": max(
            max_diff(a[batch["patch_valid"]], b[batch["patch_valid"]])
            for a, b in zip(ours_kept, timm_kept, strict=True)
        ),
    }
    print(f"{name} NaFlex {'packed' if packed else 'padded'}: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert all(v <= TOL for v in diffs.values()), diffs
    assert not features[~keep].any()  # zeros at padding


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_pooling_over_each_images_tokens_equals_timms(pool: str) -> None:
    model = _ours("scratch_dinov3_s16_plus_qkvb", global_pool=pool)
    reference = _timm_naflexvit(model, global_pool=pool)
    pictures = images(MIXED_SIZES)
    batch = naflex_batch(pictures, patch_size=8, max_seq_len=64)
    with torch.no_grad():
        logits = model(batch)
        assert max_diff(logits, reference(batch)) <= TOL
        assert max_diff(logits, torch.cat([model(picture[None]) for picture in pictures])) <= TOL


def test_an_images_output_does_not_depend_on_its_companions() -> None:
    model = _ours("scratch_dinov3_s16_plus_qkvb")
    first, *others = images(MIXED_SIZES)
    companions = ([], others[:2], others[2:], others[::-1])
    with torch.no_grad():
        outputs = [model(naflex_batch([first, *group], patch_size=8, max_seq_len=64))[0] for group in companions]
        model.set_naflex_packed(False)
        padded = [model(naflex_batch([first, *group], patch_size=8, max_seq_len=64))[0] for group in companions]
    spread = max(max_diff(a, outputs[0]) for a in outputs + padded)
    print(f"one image with 4 sets of companions, packed and padded: largest difference {spread:.1e}")
    assert spread <= 1e-6


def _flops(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(batch)
    return counter.get_total_flops()


@pytest.mark.slow  # FLOP counts of padded batches
def test_flops_do_not_grow_with_padding_and_timms_do() -> None:
    """FlopCounterMode (eager attention, so its matrix products count): ours at 4x the collated length stay within
    2% of 1x; timm's NaFlexVit computes every padded slot."""
    model = _ours("scratch_dinov3_s16_plus_qkvb", attn_impl="eager")
    reference = _timm_naflexvit(model)
    for block in reference.blocks:
        block.attn.fused_attn = False
    pictures = images(MIXED_SIZES)
    short, long = (naflex_batch(pictures, patch_size=8, max_seq_len=n) for n in (LONGEST, 4 * LONGEST))
    ours = (_flops(model, short), _flops(model, long))
    theirs = (_flops(reference, short), _flops(reference, long))
    print(
        f"DINOv3 NaFlex FLOPs at 1x / 4x collated length: ours {ours[0]:,} / {ours[1]:,} "
        f"(x{ours[1] / ours[0]:.4f}), timm NaFlexVit {theirs[0]:,} / {theirs[1]:,} (x{theirs[1] / theirs[0]:.4f})"
    )
    assert abs(ours[1] / ours[0] - 1.0) <= 0.02
    assert theirs[1] / theirs[0] > 2.0


def test_backward_equals_each_image_alone() -> None:
    model = _ours("scratch_dinov3_s16_plus_qkvb").train()
    single = _ours("scratch_dinov3_s16_plus_qkvb").train()
    single.load_state_dict(model.state_dict())
    pictures = images(MIXED_SIZES)
    labels = torch.arange(len(pictures)) % 5
    loss = F.cross_entropy(model(naflex_batch(pictures, patch_size=8, max_seq_len=64)), labels, reduction="sum")
    loss.backward()
    expected = torch.stack(
        [F.cross_entropy(single(p[None]), y[None], reduction="sum") for p, y in zip(pictures, labels, strict=True)]
    ).sum()
    expected.backward()
    assert abs(loss.item() - expected.item()) <= 1e-4
    grads = dict(single.named_parameters())
    for key, param in model.named_parameters():
        assert torch.allclose(param.grad, grads[key].grad, atol=1e-5, rtol=1e-4), key
