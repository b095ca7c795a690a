"""Small test-only registrations that turn on timm's ``VisionTransformer`` options.

Importing this module registers them with timm (``scratch_test_*``), so timm's own model tests
(tests/timm_suite/) and the export tests can pick them by name, as they pick the zoo's variants.
Each is 4 blocks of width 64 on 64x64 images: fast, yet deep enough for timm's feature tests
(three feature levels) and wide enough for two heads.
"""

from __future__ import annotations

from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

import timm_vitscratch  # noqa: F401  (the scratch_* zoo, for symmetry with the real variants)
from timm_vitscratch.models.build import initialised_model
from timm_vitscratch.models.vision_transformer import VisionTransformer

_SMALL = dict(img_size=64, patch_size=8, embed_dim=64, depth=4, num_heads=2)

#: name -> constructor options on top of ``_SMALL``; each mirrors a checkpoint family in the wild.
OPTION_MODELS: dict[str, dict[str, Any]] = {
    # DINOv2 with registers: reg tokens, LayerScale, position table without the prefix, any input size
    "scratch_test_dinov2_reg": dict(reg_tokens=4, init_values=1e-5, no_embed_class=True, dynamic_img_size=True),
    # MAE / BEiT: average of the patch tokens, normalised after pooling
    "scratch_test_avg_fc_norm": dict(global_pool="avg", fc_norm=True),
    # SigLIP-style attention-pooling head
    "scratch_test_map_pool": dict(global_pool="map"),
    # CLIP image tower: norm before the blocks, none after
    "scratch_test_pre_norm": dict(pre_norm=True, final_norm=False),
    # ViT-22B-style normalised queries and keys
    "scratch_test_qk_norm": dict(qk_norm=True),
    # EVA02 base / large's layout (timm's Eva): separate q/k/v projections, SwiGLU with a norm inside, axial
    # rotary position on a reference grid, a learned table too, average pooling
    "scratch_test_eva02_separate": dict(
        eva_names=True,
        qkv_fused=False,
        swiglu_mlp=True,
        scale_mlp=True,
        mlp_ratio=4 * 2 / 3,
        rope_type="cat",
        ref_feat_shape=(16, 16),
        global_pool="avg",
    ),
    # the Perception Encoder core's layout (timm's Eva): AttentionRope's fused bias, norm before the blocks,
    # columns-first axial rotary position with grid offset 1, an 8-head attention pool over every token
    "scratch_test_pe_core": dict(
        eva_names=True,
        attn_type="rope",
        pre_norm=True,
        rope_type="cat",
        rope_grid_offset=1.0,
        rope_grid_indexing="xy",
        ref_feat_shape=(24, 24),
        global_pool="map",
        pool_include_prefix=True,
        attn_pool_num_heads=8,
        norm_eps=1e-5,
    ),
}
#: the timm model whose results in timm's own tests each option model must match (timm's ViT unless said)
OPTION_REFERENCES: dict[str, str] = {
    **{name: "vit_tiny_patch16_224" for name in OPTION_MODELS},
    "scratch_test_eva02_separate": "eva02_tiny_patch14_224",
    "scratch_test_pe_core": "eva02_tiny_patch14_224",
}

default_cfgs = generate_default_cfgs(
    {
        name: dict(
            url="",
            num_classes=1000,
            input_size=(3, 64, 64),
            pool_size=None,
            crop_pct=0.9,
            interpolation="bicubic",
            fixed_input_size=True,
            mean=IMAGENET_DEFAULT_MEAN,
            std=IMAGENET_DEFAULT_STD,
            first_conv="patch_embed.proj",
            classifier="head",
            license="apache-2.0",
        )
        for name in OPTION_MODELS
    }
)


def _create(name: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    if pretrained:
        raise ValueError(f"{name} is a test-only registration without weights")
    return build_model_with_cfg(
        initialised_model,
        name,
        pretrained,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        **{**_SMALL, **OPTION_MODELS[name], **kwargs},
    )


@register_model
def scratch_test_dinov2_reg(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_dinov2_reg", pretrained, **kwargs)


@register_model
def scratch_test_avg_fc_norm(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_avg_fc_norm", pretrained, **kwargs)


@register_model
def scratch_test_map_pool(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_map_pool", pretrained, **kwargs)


@register_model
def scratch_test_pre_norm(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_pre_norm", pretrained, **kwargs)


@register_model
def scratch_test_qk_norm(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_qk_norm", pretrained, **kwargs)


@register_model
def scratch_test_eva02_separate(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_eva02_separate", pretrained, **kwargs)


@register_model
def scratch_test_pe_core(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_test_pe_core", pretrained, **kwargs)
