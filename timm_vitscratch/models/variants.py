"""The zoo: architecture table, pretrained cfgs and timm ``@register_model`` entry points."""

from __future__ import annotations

import dataclasses
import difflib
import os
import urllib.error
import warnings
from collections.abc import Mapping
from typing import Any

from huggingface_hub import is_offline_mode
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import httpx  # the HTTP library huggingface_hub uses, as it exports it
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD
from timm.models import (
    DefaultCfg,
    PretrainedCfg,
    build_model_with_cfg,
    get_pretrained_cfg,
    register_model,
    resolve_pretrained_cfg,
    split_model_name_tag,
)

from ..errors import ModelArgsError, PretrainedWeightsUnavailable
from ..gate.config_fields import check_pretrained_cfg
from ..private_api import record_model_args
from .build import empty_model, initialised_model
from .checkpoint_filter import checkpoint_filter_fn
from .model_args import check_label_names, check_saved_config, safetensors_shapes
from .pretrained import (
    HUB_WEIGHTS_FILE,
    OFFLINE,
    WeightsSource,
    download_failed,
    fetch_hub_weights,
    imagenet_label_names,
    pretrained_tags,
    tag_model_args,
    unavailable_weights_message,
    weights_source,
    weights_without_network,
)
from .vision_transformer import VisionTransformer

_TI = dict(embed_dim=192, depth=12, num_heads=3)
_S = dict(embed_dim=384, depth=12, num_heads=6)
_B = dict(embed_dim=768, depth=12, num_heads=12)
_L = dict(embed_dim=1024, depth=24, num_heads=16)
_H = dict(embed_dim=1280, depth=32, num_heads=16)
#: DINOv3 as timm builds it (its ``Eva`` class): rotary position, four registers, LayerScale, LayerNorm eps
#: 1e-5, any input size, mean-pooled patch tokens after the final norm; Eva's parameter names
_DINOV3 = dict(
    patch_size=16,
    img_size=256,
    qkv_bias=False,
    init_values=1e-5,
    reg_tokens=4,
    pos_embed="none",
    rope_type="dinov3",
    rope_temperature=100.0,
    dynamic_img_size=True,
    global_pool="avg",
    fc_norm=False,
    norm_eps=1e-5,
    eva_names=True,
)
_DINOV3_SIZES: dict[str, dict[str, Any]] = {
    "t16": dict(embed_dim=192, depth=12, num_heads=3),
    "s16": dict(embed_dim=384, depth=12, num_heads=6),
    "s16_plus": dict(embed_dim=384, depth=12, num_heads=6, swiglu_mlp=True, swiglu_align_to=8),
    "b16": dict(embed_dim=768, depth=12, num_heads=12),
    "l16": dict(embed_dim=1024, depth=24, num_heads=16),
    "h16_plus": dict(embed_dim=1280, depth=32, num_heads=20, swiglu_mlp=True, swiglu_align_to=8),
    "7b16": dict(embed_dim=4096, depth=40, num_heads=32, mlp_ratio=2.0, swiglu_mlp=True, swiglu_align_to=64),
}
#: our DINOv3 variant -> timm's model of the same architecture (``_qkvb``: a qkv bias, zero in Meta's weights)
DINOV3_TIMM_NAMES: dict[str, str] = {
    "scratch_dinov3_s16": "vit_small_patch16_dinov3",
    "scratch_dinov3_s16_qkvb": "vit_small_patch16_dinov3_qkvb",
    "scratch_dinov3_s16_plus": "vit_small_plus_patch16_dinov3",
    "scratch_dinov3_s16_plus_qkvb": "vit_small_plus_patch16_dinov3_qkvb",
    "scratch_dinov3_b16": "vit_base_patch16_dinov3",
    "scratch_dinov3_b16_qkvb": "vit_base_patch16_dinov3_qkvb",
    "scratch_dinov3_l16": "vit_large_patch16_dinov3",
    "scratch_dinov3_l16_qkvb": "vit_large_patch16_dinov3_qkvb",
    "scratch_dinov3_h16_plus": "vit_huge_plus_patch16_dinov3",
    "scratch_dinov3_h16_plus_qkvb": "vit_huge_plus_patch16_dinov3_qkvb",
    "scratch_dinov3_7b16": "vit_7b_patch16_dinov3",
    "scratch_dinov3_t16_qkvb": "vit_tiny_patch16_dinov3_qkvb",
}


def _dinov3(name: str) -> dict[str, Any]:
    size = name.removeprefix("scratch_dinov3_").removesuffix("_qkvb")
    return {**_DINOV3, **_DINOV3_SIZES[size], "qkv_bias": name.endswith("_qkvb")}


#: DINOv2 as timm builds it (its classic ``VisionTransformer``): patch 14 at 518 px, LayerScale; ``_reg4``: four registers,
#: the position table for the patch tokens only (timm folds the class token's position into the token)
_DINOV2 = dict(patch_size=14, img_size=518, init_values=1e-5)
#: the giant's MLP is timm's packed SwiGLU (``SwiGLUPacked``) of gated width 4096
_DINOV2_SIZES: dict[str, dict[str, Any]] = {
    "s14": _S,
    "b14": _B,
    "l14": _L,
    "g14": dict(embed_dim=1536, depth=40, num_heads=24, mlp_ratio=2.66667, swiglu_mlp=True),
}
#: our DINOv2 variant -> timm's model of the same architecture
DINOV2_TIMM_NAMES: dict[str, str] = {
    f"scratch_dinov2_{size}{reg}": f"vit_{timm_size}_patch14{reg}_dinov2"
    for size, timm_size in (("s14", "small"), ("b14", "base"), ("l14", "large"), ("g14", "giant"))
    for reg in ("", "_reg4")
}


def _dinov2(name: str) -> dict[str, Any]:
    size = name.removeprefix("scratch_dinov2_").removesuffix("_reg4")
    registers = dict(reg_tokens=4, no_embed_class=True) if name.endswith("_reg4") else {}
    return {**_DINOV2, **_DINOV2_SIZES[size], **registers}


#: SigLIP's image tower as timm builds it: no class token, attention-pooled (MAP) features; the activation is
#: timm's per model (GELU, or its tanh approximation where timm's entry point says so)
_SIGLIP = dict(class_token=False, global_pool="map")
_SO400M = dict(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362)
_GOPT = dict(embed_dim=1536, depth=40, num_heads=16)
#: the ``_gap`` towers: the tokens' mean, no norm after it (overrides ``_SIGLIP``'s attention pool)
_SIGLIP_GAP = dict(global_pool="avg", fc_norm=False)
#: our SigLIP variant -> (timm's model of the same architecture, its arguments beyond ``_SIGLIP``).
#: Names: ``scratch_siglip_<size><patch>[_<resolution>]``, the resolution left out at 224 as for the classic ViT.
SIGLIP_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "scratch_siglip_b16": ("vit_base_patch16_siglip_224", dict(patch_size=16, **_B)),
    "scratch_siglip_b16_256": ("vit_base_patch16_siglip_256", dict(patch_size=16, img_size=256, **_B)),
    "scratch_siglip_b16_384": ("vit_base_patch16_siglip_384", dict(patch_size=16, img_size=384, **_B)),
    "scratch_siglip_b16_512": ("vit_base_patch16_siglip_512", dict(patch_size=16, img_size=512, **_B)),
    "scratch_siglip_l16_256": ("vit_large_patch16_siglip_256", dict(patch_size=16, img_size=256, **_L)),
    "scratch_siglip_l16_384": ("vit_large_patch16_siglip_384", dict(patch_size=16, img_size=384, **_L)),
    "scratch_siglip_l16_512": (
        "vit_large_patch16_siglip_512",
        dict(patch_size=16, img_size=512, act_layer="gelu_tanh", **_L),
    ),
    "scratch_siglip_so400m14": ("vit_so400m_patch14_siglip_224", dict(patch_size=14, **_SO400M)),
    "scratch_siglip_so400m14_378": ("vit_so400m_patch14_siglip_378", dict(patch_size=14, img_size=378, **_SO400M)),
    # the other towers timm lists weights for: ViT-B/32, giant-opt, SO400M/16, and every `_gap` form (the mean of
    # the tokens without a norm after it, instead of the attention pool). Not SO400M/14 at 384 (with and without the
    # pool): 14 does not divide 384, which timm crops and this model refuses (patch_embed.py)
    "scratch_siglip_b16_gap": ("vit_base_patch16_siglip_gap_224", dict(patch_size=16, **_SIGLIP_GAP, **_B)),
    "scratch_siglip_b16_gap_256": (
        "vit_base_patch16_siglip_gap_256",
        dict(patch_size=16, img_size=256, **_SIGLIP_GAP, **_B),
    ),
    "scratch_siglip_b16_gap_384": (
        "vit_base_patch16_siglip_gap_384",
        dict(patch_size=16, img_size=384, **_SIGLIP_GAP, **_B),
    ),
    "scratch_siglip_b16_gap_512": (
        "vit_base_patch16_siglip_gap_512",
        dict(patch_size=16, img_size=512, **_SIGLIP_GAP, **_B),
    ),
    "scratch_siglip_b32_256": (
        "vit_base_patch32_siglip_256",
        dict(patch_size=32, img_size=256, act_layer="gelu_tanh", **_B),
    ),
    "scratch_siglip_b32_gap_256": (
        "vit_base_patch32_siglip_gap_256",
        dict(patch_size=32, img_size=256, act_layer="gelu_tanh", **_SIGLIP_GAP, **_B),
    ),
    "scratch_siglip_gopt16_256": (
        "vit_giantopt_patch16_siglip_256",
        dict(patch_size=16, img_size=256, act_layer="gelu_tanh", **_GOPT),
    ),
    "scratch_siglip_gopt16_384": (
        "vit_giantopt_patch16_siglip_384",
        dict(patch_size=16, img_size=384, act_layer="gelu_tanh", **_GOPT),
    ),
    "scratch_siglip_gopt16_gap_256": (
        "vit_giantopt_patch16_siglip_gap_256",
        dict(patch_size=16, img_size=256, act_layer="gelu_tanh", **_SIGLIP_GAP, **_GOPT),
    ),
    "scratch_siglip_gopt16_gap_384": (
        "vit_giantopt_patch16_siglip_gap_384",
        dict(patch_size=16, img_size=384, act_layer="gelu_tanh", **_SIGLIP_GAP, **_GOPT),
    ),
    "scratch_siglip_l16_gap_256": (
        "vit_large_patch16_siglip_gap_256",
        dict(patch_size=16, img_size=256, **_SIGLIP_GAP, **_L),
    ),
    "scratch_siglip_l16_gap_384": (
        "vit_large_patch16_siglip_gap_384",
        dict(patch_size=16, img_size=384, **_SIGLIP_GAP, **_L),
    ),
    "scratch_siglip_l16_gap_512": (
        "vit_large_patch16_siglip_gap_512",
        dict(patch_size=16, img_size=512, act_layer="gelu_tanh", **_SIGLIP_GAP, **_L),
    ),
    "scratch_siglip_so400m14_gap": ("vit_so400m_patch14_siglip_gap_224", dict(patch_size=14, **_SIGLIP_GAP, **_SO400M)),
    "scratch_siglip_so400m14_gap_378": (
        "vit_so400m_patch14_siglip_gap_378",
        dict(patch_size=14, img_size=378, **_SIGLIP_GAP, **_SO400M),
    ),
    "scratch_siglip_so400m14_gap_448": (
        "vit_so400m_patch14_siglip_gap_448",
        dict(patch_size=14, img_size=448, **_SIGLIP_GAP, **_SO400M),
    ),
    "scratch_siglip_so400m14_gap_896": (
        "vit_so400m_patch14_siglip_gap_896",
        dict(patch_size=14, img_size=896, **_SIGLIP_GAP, **_SO400M),
    ),
    "scratch_siglip_so400m16_256": (
        "vit_so400m_patch16_siglip_256",
        dict(patch_size=16, img_size=256, act_layer="gelu_tanh", **_SO400M),
    ),
    "scratch_siglip_so400m16_384": (
        "vit_so400m_patch16_siglip_384",
        dict(patch_size=16, img_size=384, act_layer="gelu_tanh", **_SO400M),
    ),
    "scratch_siglip_so400m16_512": (
        "vit_so400m_patch16_siglip_512",
        dict(patch_size=16, img_size=512, act_layer="gelu_tanh", **_SO400M),
    ),
    "scratch_siglip_so400m16_gap_256": (
        "vit_so400m_patch16_siglip_gap_256",
        dict(patch_size=16, img_size=256, act_layer="gelu_tanh", **_SIGLIP_GAP, **_SO400M),
    ),
    "scratch_siglip_so400m16_gap_384": (
        "vit_so400m_patch16_siglip_gap_384",
        dict(patch_size=16, img_size=384, act_layer="gelu_tanh", **_SIGLIP_GAP, **_SO400M),
    ),
    "scratch_siglip_so400m16_gap_512": (
        "vit_so400m_patch16_siglip_gap_512",
        dict(patch_size=16, img_size=512, act_layer="gelu_tanh", **_SIGLIP_GAP, **_SO400M),
    ),
}
SIGLIP_TIMM_NAMES: dict[str, str] = {name: timm_name for name, (timm_name, _) in SIGLIP_VARIANTS.items()}

#: SigLIP 2 NaFlex as timm builds it (its ``NaFlexVit``): SigLIP's tower at any size and aspect ratio, its 16x16
#: position table (img_size 256 at patch 16) resampled to each image's grid bilinearly (antialiased), as timm's
#: ``pos_embed_interp_mode='bilinear'``; tanh-approximated GELU; NaFlexVit's init and its module tree (its ``embeds``
#: module: a Linear patch projection, the table inside). timm's cfg sets 384 px as the default input.
_SIGLIP2_NAFLEX = dict(
    _SIGLIP,
    patch_size=16,
    img_size=256,
    dynamic_img_size=True,
    pos_embed_interp_mode="bilinear",
    act_layer="gelu_tanh",
    naflex_init=True,
    naflex_embeds=True,
)
#: our SigLIP 2 NaFlex variant -> (timm's ``NaFlexVit`` model of the same architecture, its size)
SIGLIP2_NAFLEX_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "scratch_siglip2_b16_naflex": ("naflexvit_base_patch16_siglip", _B),
    "scratch_siglip2_so400m16_naflex": ("naflexvit_so400m_patch16_siglip", _SO400M),
}
SIGLIP2_NAFLEX_TIMM_NAMES: dict[str, str] = {
    name: timm_name for name, (timm_name, _) in SIGLIP2_NAFLEX_VARIANTS.items()
}

#: EVA02 as timm builds it (its ``Eva``): patch 14, a learned position table (the class token's row included) plus
#: axial rotary position rescaled onto the 16 x 16 pretraining grid, SwiGLU MLPs (packed for tiny and small),
#: average-pooled patch tokens through ``fc_norm``. Base and large: separate q/k/v projections and a LayerNorm
#: inside the MLP; their CLIP image towers also one inside the attention, pooled by the class token.
_EVA02 = dict(
    patch_size=14,
    mlp_ratio=4 * 2 / 3,
    swiglu_mlp=True,
    rope_type="cat",
    ref_feat_shape=(16, 16),
    global_pool="avg",
    eva_names=True,
)
_EVA02_BL = dict(qkv_fused=False, scale_mlp=True)
_EVA02_CLIP = dict(_EVA02_BL, scale_attn_inner=True, global_pool="token")
#: our EVA02 variant -> (timm's model of the same architecture, its arguments beyond ``_EVA02``)
EVA02_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "scratch_eva02_t14": ("eva02_tiny_patch14_224", dict(img_size=224, **_TI)),
    "scratch_eva02_s14": ("eva02_small_patch14_224", dict(img_size=224, **_S)),
    "scratch_eva02_b14": ("eva02_base_patch14_224", dict(img_size=224, **_B, **_EVA02_BL)),
    "scratch_eva02_l14": ("eva02_large_patch14_224", dict(img_size=224, **_L, **_EVA02_BL)),
    "scratch_eva02_t14_336": ("eva02_tiny_patch14_336", dict(img_size=336, **_TI)),
    "scratch_eva02_s14_336": ("eva02_small_patch14_336", dict(img_size=336, **_S)),
    "scratch_eva02_b14_448": ("eva02_base_patch14_448", dict(img_size=448, **_B, **_EVA02_BL)),
    "scratch_eva02_l14_448": ("eva02_large_patch14_448", dict(img_size=448, **_L, **_EVA02_BL)),
    "scratch_eva02_b16_clip": ("eva02_base_patch16_clip_224", dict(img_size=224, **_B, **_EVA02_CLIP, patch_size=16)),
    "scratch_eva02_l14_clip": ("eva02_large_patch14_clip_224", dict(img_size=224, **_L, **_EVA02_CLIP)),
    "scratch_eva02_l14_clip_336": ("eva02_large_patch14_clip_336", dict(img_size=336, **_L, **_EVA02_CLIP)),
}

#: Meta's Perception Encoder as timm builds it (its ``Eva``): a learned position table plus axial rotary position
#: (columns first, grid offset 1, rescaled onto the pretraining grid), a LayerNorm before the blocks and no patch
#: bias, LayerNorm eps 1e-5. Core: attention-pooled (8 heads) then projected by ``head``; spatial and lang: the
#: tokens after the last block, no final norm. The gigantic ones have no class token. As Eva, the attention pool
#: reads every token, the class token too.
_PE = dict(
    eva_names=True,
    attn_type="rope",
    pre_norm=True,
    rope_type="cat",
    rope_grid_offset=1.0,
    rope_grid_indexing="xy",
    norm_eps=1e-5,
)
_PE_CORE = dict(global_pool="map", pool_include_prefix=True, attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0)
_PE_DENSE = dict(global_pool="avg", fc_norm=False, final_norm=False)
_PE_G = dict(embed_dim=1536, depth=50, num_heads=16, mlp_ratio=8960 / 1536, class_token=False, rope_grid_offset=0.0)
PE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "scratch_pe_core_t16": (
        "vit_pe_core_tiny_patch16_384",
        dict(**_TI, patch_size=16, img_size=384, ref_feat_shape=(24, 24), **_PE_CORE),
    ),
    "scratch_pe_core_s16": (
        "vit_pe_core_small_patch16_384",
        dict(**_S, patch_size=16, img_size=384, ref_feat_shape=(24, 24), **_PE_CORE),
    ),
    "scratch_pe_core_b16": (
        "vit_pe_core_base_patch16_224",
        dict(**_B, patch_size=16, img_size=224, ref_feat_shape=(14, 14), **_PE_CORE),
    ),
    "scratch_pe_core_l14": (
        "vit_pe_core_large_patch14_336",
        dict(**_L, patch_size=14, img_size=336, ref_feat_shape=(24, 24), **_PE_CORE),
    ),
    "scratch_pe_core_g14": (
        "vit_pe_core_gigantic_patch14_448",
        dict(**_PE_G, patch_size=14, img_size=448, ref_feat_shape=(32, 32), **_PE_CORE),
    ),
    "scratch_pe_spatial_t16": (
        "vit_pe_spatial_tiny_patch16_512",
        dict(**_TI, patch_size=16, img_size=512, ref_feat_shape=(32, 32), **_PE_DENSE),
    ),
    "scratch_pe_spatial_s16": (
        "vit_pe_spatial_small_patch16_512",
        dict(**_S, patch_size=16, img_size=512, ref_feat_shape=(32, 32), **_PE_DENSE),
    ),
    "scratch_pe_spatial_b16": (
        "vit_pe_spatial_base_patch16_512",
        dict(**_B, patch_size=16, img_size=512, ref_feat_shape=(32, 32), **_PE_DENSE),
    ),
    "scratch_pe_spatial_l14": (
        "vit_pe_spatial_large_patch14_448",
        dict(**_L, patch_size=14, img_size=448, ref_feat_shape=(32, 32), **_PE_DENSE),
    ),
    "scratch_pe_spatial_g14": (
        "vit_pe_spatial_gigantic_patch14_448",
        dict(**_PE_G, patch_size=14, img_size=448, ref_feat_shape=(32, 32), init_values=0.1, **_PE_DENSE),
    ),
    "scratch_pe_lang_l14": (
        "vit_pe_lang_large_patch14_448",
        dict(_L, depth=23, patch_size=14, img_size=448, ref_feat_shape=(32, 32), init_values=0.1, **_PE_DENSE),
    ),
    "scratch_pe_lang_g14": (
        "vit_pe_lang_gigantic_patch14_448",
        dict(_PE_G, depth=47, patch_size=14, img_size=448, ref_feat_shape=(32, 32), init_values=0.1, **_PE_DENSE),
    ),
}
#: every variant that is timm's model of another name than its classic ``vit_*``: ours -> timm's
TIMM_NAMES: dict[str, str] = {
    **DINOV3_TIMM_NAMES,
    **DINOV2_TIMM_NAMES,
    **SIGLIP_TIMM_NAMES,
    **{name: timm_name for name, (timm_name, _) in {**EVA02_VARIANTS, **PE_VARIANTS}.items()},
    **SIGLIP2_NAFLEX_TIMM_NAMES,
}


#: Architecture of every registered variant (model kwargs before user overrides).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "scratch_vit_ti16": dict(patch_size=16, **_TI),
    "scratch_vit_s16": dict(patch_size=16, **_S),
    "scratch_vit_b16": dict(patch_size=16, **_B),
    "scratch_vit_b32": dict(patch_size=32, **_B),
    "scratch_vit_l16": dict(patch_size=16, **_L),
    "scratch_vit_l32": dict(patch_size=32, **_L),
    "scratch_vit_h14": dict(patch_size=14, **_H),
    # ImageNet-21k "has_logits": a Linear+Tanh representation layer of width embed_dim
    "scratch_vit_b16_in21k": dict(patch_size=16, representation_size=768, **_B),
    "scratch_vit_b32_in21k": dict(patch_size=32, representation_size=768, **_B),
    "scratch_vit_l16_in21k": dict(patch_size=16, representation_size=1024, **_L),
    "scratch_vit_l32_in21k": dict(patch_size=32, representation_size=1024, **_L),
    "scratch_vit_h14_in21k": dict(patch_size=14, representation_size=1280, **_H),
    "scratch_deit_ti16_distilled": dict(patch_size=16, distilled=True, **_TI),
    "scratch_deit_s16_distilled": dict(patch_size=16, distilled=True, **_S),
    "scratch_deit_b16_distilled": dict(patch_size=16, distilled=True, **_B),
    **{name: _dinov3(name) for name in DINOV3_TIMM_NAMES},
    **{name: _dinov2(name) for name in DINOV2_TIMM_NAMES},
    **{name: {**_SIGLIP, **args} for name, (_, args) in SIGLIP_VARIANTS.items()},
    **{name: {**_EVA02, **args} for name, (_, args) in EVA02_VARIANTS.items()},
    **{name: {**_PE, **args} for name, (_, args) in PE_VARIANTS.items()},
    **{name: {**_SIGLIP2_NAFLEX, **size} for name, (_, size) in SIGLIP2_NAFLEX_VARIANTS.items()},
}


def unknown_model_message(name: str) -> str:
    """Error text for a name that is not registered, with the closest registered names."""
    mirrors = [ours for ours, theirs in TIMM_NAMES.items() if theirs == name]
    if mirrors:  # timm's own name: ours mirrors it under another
        return f"unknown model {name!r}: that is timm's name; its mirror here is {', '.join(mirrors)}"
    close = difflib.get_close_matches(name, list(ARCHITECTURES), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; vitscratch list shows every registered name"
    return f"unknown model {name!r}{hint}"


def _vit_cfg(**kwargs: Any) -> dict[str, Any]:
    """Pretrained cfg as timm's original ViT weights use (Inception mean/std, bicubic, crop .9).

    No license: a cfg without weights has none; each tag records its source's own (pretrained.py).
    """
    return {
        "url": "",
        "num_classes": 1000,
        "input_size": (3, 224, 224),
        "pool_size": None,
        "crop_pct": 0.9,
        "interpolation": "bicubic",
        "fixed_input_size": True,
        "mean": IMAGENET_INCEPTION_MEAN,
        "std": IMAGENET_INCEPTION_STD,
        "first_conv": "patch_embed.proj",
        "classifier": "head",
        **kwargs,
    }


def _deit_cfg(**kwargs: Any) -> dict[str, Any]:
    """DeiT weights were trained with ImageNet mean/std and crop .875; two classifiers."""
    return _vit_cfg(
        mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.875, classifier=("head", "head_dist"), **kwargs
    )


def _dinov3_cfg(**kwargs: Any) -> dict[str, Any]:
    """DINOv3's backbones as timm publishes them: no classifier, 256 px, ImageNet mean/std, no crop."""
    return _vit_cfg(
        num_classes=0, input_size=(3, 256, 256), crop_pct=1.0, mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD
    )


def _dinov2_cfg() -> dict[str, Any]:
    """DINOv2's backbones as timm publishes them: no classifier, 518 px, ImageNet mean/std, no crop."""
    return _vit_cfg(
        num_classes=0, input_size=(3, 518, 518), crop_pct=1.0, mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD
    )


def _timm_model_cfg(timm_name: str) -> dict[str, Any]:
    """timm's default cfg of ``timm_name`` for what a cfg without weights says: classifier, input size,
    preprocessing (the weights and their license come with each tag)."""
    cfg = get_pretrained_cfg(timm_name)
    assert cfg is not None, timm_name
    fields = ("num_classes", "input_size", "crop_pct", "interpolation", "mean", "std", "fixed_input_size")
    return _vit_cfg(**{field: getattr(cfg, field) for field in fields})


def _pretrained_cfg(name: str) -> dict[str, Any]:
    if name.startswith("scratch_dinov3_"):
        return _dinov3_cfg()
    if name in DINOV2_TIMM_NAMES:
        return _dinov2_cfg()
    if name in SIGLIP_VARIANTS:  # the image tower alone: no classifier, at its own resolution
        size = ARCHITECTURES[name].get("img_size", 224)
        return _vit_cfg(num_classes=0, input_size=(3, size, size))
    if name in EVA02_VARIANTS or name in PE_VARIANTS:  # timm's own cfg of the model: classifier, input, mean/std
        return _timm_model_cfg(TIMM_NAMES[name])
    if name in SIGLIP2_NAFLEX_VARIANTS:  # any input size; timm's cfg: 384 px, no crop
        return _vit_cfg(
            num_classes=0, input_size=(3, 384, 384), crop_pct=1.0, fixed_input_size=False, first_conv="embeds.proj"
        )
    if name.startswith("scratch_deit_"):
        return _deit_cfg()
    if name.endswith("_in21k"):
        return _vit_cfg(num_classes=21843)
    return _vit_cfg()


#: Weights published on the Hugging Face Hub under a pretrained tag, as timm's own weights are:
#: ``"variant.tag" -> pretrained-cfg overrides`` with at least ``hf_hub_id`` (``"ORG/NAME"``, or
#: ``"ORG/NAME@commit"`` to pin a revision). ``timm.create_model("variant.tag", pretrained=True)`` then
#: downloads ``model.safetensors`` from that repo. The project has published no weights yet, so the
#: table is empty; :func:`register_hub_weights` adds entries at run time.
HUB_WEIGHTS: dict[str, dict[str, Any]] = {}
_DEFAULT_TAGS: dict[str, str] = {}  # variant -> the tag `pretrained=True` without a tag loads
PRETRAINED_CFG_FIELDS = {f.name for f in dataclasses.fields(PretrainedCfg)}


def _fits(variant: str, cfg: dict[str, Any]) -> bool:
    """True when weights of ``cfg`` keep the variant's registered architecture (classifier, input size)."""
    own = _pretrained_cfg(variant)
    return all(cfg.get(k, own[k]) == own[k] for k in ("num_classes", "input_size"))


def _default_cfg(variant: str) -> DefaultCfg:
    """Every pretrained cfg of ``variant``: the zoo's tags in table order, then Hub tags.

    As in timm, the first tag is the default and the untagged name's cfg is that tag's, so
    ``create_model(variant, pretrained=True)`` loads its weights. The default is the first tag (timm's
    order) whose weights keep the variant's architecture: a headless tag (timm's ``orig_in21k``,
    Google's repos) never silently changes what the bare name builds. A variant without such a tag
    keeps an untagged cfg without weights first (and ``pretrained=True`` without a tag is refused).
    """
    cfg = DefaultCfg()
    for name_tag, overrides in {**pretrained_tags(), **HUB_WEIGHTS}.items():
        arch, tag = split_model_name_tag(name_tag)
        if arch == variant:
            cfg.cfgs[tag] = PretrainedCfg(**{**_pretrained_cfg(variant), **overrides})
            cfg.tags.append(tag)
            cfg.is_pretrained = True
    chosen = _DEFAULT_TAGS.get(variant) or next((t for t in cfg.tags if _fits(variant, cfg.cfgs[t].to_dict())), "")
    if chosen:
        cfg.tags.remove(chosen)
    else:
        cfg.cfgs[""] = PretrainedCfg(**_pretrained_cfg(variant))
    cfg.tags.appendleft(chosen)
    return cfg


def default_tag(variant: str) -> str:
    """The tag ``create_model(variant)`` resolves to (timm's rule: the first registered)."""
    return default_cfgs[variant].tags[0]


default_cfgs = {name: _default_cfg(name) for name in ARCHITECTURES}


def register_hub_weights(model_tag: str, hf_hub_id: str, default: bool = False, **cfg: Any) -> None:
    """Publish Hub weights under ``"variant.tag"`` in timm's registry (like timm's own pretrained tags).

    ``hf_hub_id``: ``"ORG/NAME"`` or ``"ORG/NAME@revision"``; a trailing ``/`` (``"ORG/"``) completes it
    to ``"ORG/variant.tag"``, as timm does for ``"timm/"``. ``cfg``: pretrained-cfg fields that differ
    from the variant's (``num_classes``, ``input_size``, ``mean``, ``std``, ``license`` ...).
    ``default=True`` makes ``create_model("variant", pretrained=True)`` load these weights.
    """
    variant, tag = split_model_name_tag(model_tag)
    if variant not in ARCHITECTURES:
        raise ValueError(f"{unknown_model_message(variant)} (in {model_tag!r})")
    if not tag:
        raise ValueError(f"{model_tag!r} has no tag: give 'variant.tag', e.g. '{variant}.my_weights_in1k'")
    unknown = sorted(set(cfg) - PRETRAINED_CFG_FIELDS - {"hf_hub_id"})
    if unknown:
        raise ValueError(
            f"unknown pretrained-cfg fields {unknown}; timm's PretrainedCfg has {sorted(PRETRAINED_CFG_FIELDS)}"
        )
    if "/" not in hf_hub_id:
        raise ValueError(f"hf_hub_id must be 'ORG/NAME' (or 'ORG/' to complete with the tag), got {hf_hub_id!r}")
    if hf_hub_id.endswith("/"):
        hf_hub_id += model_tag
    HUB_WEIGHTS[model_tag] = {**cfg, "hf_hub_id": hf_hub_id}
    if default:
        _DEFAULT_TAGS[variant] = tag
    _reregister(variant)


def unregister_hub_weights(model_tag: str) -> None:
    """Remove a tag added by :func:`register_hub_weights`."""
    variant, tag = split_model_name_tag(model_tag)
    if HUB_WEIGHTS.pop(model_tag, None) is None:
        raise KeyError(f"{model_tag!r} is not a registered Hub tag; registered: {sorted(HUB_WEIGHTS)}")
    if _DEFAULT_TAGS.get(variant) == tag:
        del _DEFAULT_TAGS[variant]
    _reregister(variant)


def _reregister(variant: str) -> None:
    default_cfgs[variant] = _default_cfg(variant)
    with warnings.catch_warnings():  # re-registering is how timm takes in a changed default_cfgs entry
        warnings.filterwarnings("ignore", message=f"Overwriting {variant} in registry")
        register_model(globals()[variant])


def _resolved_cfg(variant: str, kwargs: dict[str, Any]) -> PretrainedCfg:
    """The pretrained cfg timm's builder will use (read its fields directly: ``to_dict()`` deep-copies
    an in-memory state dict)."""
    return resolve_pretrained_cfg(
        variant,
        pretrained_cfg=kwargs.get("pretrained_cfg"),
        pretrained_cfg_overlay=kwargs.get("pretrained_cfg_overlay"),
    )


def _names_weights(cfg: PretrainedCfg) -> bool:
    """True when the cfg says where weights come from (a file, state dict, URL, repo)."""
    return bool(cfg.file or cfg.state_dict is not None or cfg.url or cfg.hf_hub_id)


def _loads_from_storage(cfg: PretrainedCfg) -> bool:
    """True when timm will read the pretrained weights from a file, a local dir or the Hub.

    Those tensors are fresh (memory-mapped by safetensors), so the model can take them by
    assignment. A state dict passed in memory (``pretrained_cfg_overlay=dict(state_dict=...)``)
    belongs to the caller and is copied as usual, never aliased.
    """
    return cfg.source in ("hf-hub", "local-dir") or cfg.state_dict is None


def _check_file_config(variant: str, kwargs: dict[str, Any]) -> None:
    """What a ``local-dir:`` / ``hf-hub:`` config asks for, checked before anything is built.

    timm hands the file's ``model_args`` over as ``pretrained_model_args`` (and merges them into the
    keyword arguments) and its ``pretrained_cfg`` (with the top-level fields) as ``pretrained_cfg``; all of it
    is data from the directory's or repo's author. The cfg may set only data fields
    (:mod:`timm_vitscratch.gate.config_fields`: no ``hf_hub_filename``, ``file``, ``url`` ... that would
    choose other weights than the repo's or directory's ``model.safetensors``), and the model arguments pass
    the allow-list and bounds of :mod:`.model_args`; both are checked here, before timm fetches any weights.
    For a local directory the architecture must also match the weights' shapes, read from the safetensors
    header.
    """
    cfg = kwargs.get("pretrained_cfg")
    if not isinstance(cfg, dict) or cfg.get("source") not in ("local-dir", "hf-hub"):
        return
    where = f"{cfg.get('file') or cfg.get('hf_hub_id')}/config.json"
    check_pretrained_cfg(cfg, where, ModelArgsError, set_by_timm=_SET_BY_TIMM[cfg["source"]])
    shapes = None
    if cfg["source"] == "local-dir" and cfg.get("file"):
        shapes = safetensors_shapes(os.path.join(cfg["file"], "model.safetensors"))
    check_saved_config(ARCHITECTURES[variant], kwargs.get("pretrained_model_args") or {}, cfg, where, shapes)


#: top-level keys of a config.json that are structure, not pretrained-cfg fields (timm's ``save_config_for_hf``
#: writes the first six, ``model_dir`` adds its ``vitscratch`` block; ``labels`` is timm's old name of label_names)
CONFIG_STRUCTURE = (
    "architecture",
    "num_features",
    "global_pool",
    "model_args",
    "pretrained_cfg",
    "vitscratch",
    "labels",
)


def file_pretrained_cfg(config: Mapping[str, Any]) -> Any:
    """The pretrained-cfg fields a ``config.json`` sets: its ``pretrained_cfg``, or, in timm's older
    single-object layout (no ``pretrained_cfg`` key, which timm still reads), its top-level fields."""
    if "pretrained_cfg" in config:
        return config["pretrained_cfg"]
    return {k: v for k, v in config.items() if k not in CONFIG_STRUCTURE}


def check_config_file(
    config: Mapping[str, Any], where: str, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[str, dict[str, Any]]:
    """The architecture and ``create_model`` arguments a ``config.json`` (a model directory's, a Hub repo's)
    asks for, checked as data before anything is built or fetched; ``where`` starts every message.

    The architecture must be one of ours (timm's own ``vit_*`` would skip every check below); the
    ``pretrained_cfg`` may set only data fields (:mod:`timm_vitscratch.gate.config_fields`); ``model_args``
    and the top-level ``num_classes`` / ``label_names`` pass the allow-list and bounds of :mod:`.model_args`
    and, with ``shapes`` (the weights' names -> shapes), must describe the weights. Raises
    :class:`~timm_vitscratch.errors.ModelArgsError`.
    """
    architecture = config.get("architecture")
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        shown = repr(architecture) if len(repr(architecture)) <= 80 else repr(architecture)[:77] + "..."
        raise ModelArgsError(
            f"{where} names architecture {shown}, which timm_vitscratch does not register (it registers "
            f"{', '.join(ARCHITECTURES)}). Stock timm models load with timm's own "
            f"timm.create_model('hf-hub:...') / 'local-dir:...'."
        )
    pretrained_cfg = file_pretrained_cfg(config)
    if not isinstance(pretrained_cfg, dict):
        raise ModelArgsError(f"{where} pretrained_cfg is a {type(pretrained_cfg).__name__}; expected an object")
    check_pretrained_cfg(pretrained_cfg, where, ModelArgsError)
    cfg: dict[str, Any] = {
        "num_classes": config.get("num_classes", pretrained_cfg.get("num_classes", 1000)),
        "input_size": pretrained_cfg.get("input_size"),
        "label_names": config.get("label_names"),
    }
    kwargs = check_saved_config(ARCHITECTURES[architecture], config.get("model_args") or {}, cfg, where, shapes)
    if pretrained_cfg.get("label_names") is not None:
        check_label_names(pretrained_cfg["label_names"], cfg["num_classes"], f"{where} pretrained_cfg")
    kwargs.setdefault("num_classes", cfg["num_classes"])
    return architecture, kwargs


#: the pretrained-cfg fields timm itself sets on each route, over whatever the file says (``_parse_model_cfg``)
_SET_BY_TIMM = {"hf-hub": ("source", "hf_hub_id"), "local-dir": ("source", "file")}

#: what timm's download of pretrained weights raises when the file cannot be fetched (Hub, URL, offline)
FETCH_ERRORS = (
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    HfHubHTTPError,
    httpx.TransportError,
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
)


def _fetch_failure(name: str, source: WeightsSource, error: BaseException | None) -> PretrainedWeightsUnavailable:
    why = OFFLINE if is_offline_mode() or error is None else download_failed(error)
    return PretrainedWeightsUnavailable(unavailable_weights_message(name, source, why))


def _fetch_first(source: WeightsSource) -> bool:
    """Whether our entry function fetches the weights before timm's loader: those of a Hub repo that timm
    would download (not offline, where it reads the cache), in the file timm takes first."""
    return source.kind == "hf-hub" and source.filename == HUB_WEIGHTS_FILE and not is_offline_mode()


def _create(variant: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    _check_file_config(variant, kwargs)
    requested = kwargs.get("pretrained_cfg")
    # the tag timm resolves: the one named, the default for a bare name, none for a cfg given as a dict
    tag = requested if isinstance(requested, str) else "" if requested else default_tag(variant)
    model_tag = f"{variant}.{tag}"
    # a tag's weights may need arguments beyond the variant's (transformers' LayerNorm eps); its
    # input size (SWAG at 384/512/518) comes from the cfg's input_size through timm's builder
    tag_args = tag_model_args(model_tag)
    model_args = {**ARCHITECTURES[variant], **tag_args, **kwargs}
    cfg = _resolved_cfg(variant, kwargs) if pretrained else None
    if cfg is not None and not tag and not _names_weights(cfg):
        raise ValueError(
            f"{variant} has no default weights (its tags change the architecture): name one, "
            f"e.g. {variant}.{default_cfgs[variant].tags[1]}, or give pretrained_cfg_overlay=dict(file=...)"
        )
    source = weights_source(vars(cfg)) if cfg is not None else None  # vars: no copy of a state dict
    name = model_tag if tag else f"hf-hub:{cfg.hf_hub_id}" if cfg is not None and cfg.hf_hub_id else variant
    if source is not None and source.kind == "url" and is_offline_mode() and not source.cache_path.is_file():
        raise _fetch_failure(name, source, None)  # torch.hub ignores HF_HUB_OFFLINE: fail at once as the Hub does
    # Fast cold start: weights about to be overwritten by a checkpoint are never initialised; a fresh
    # model is built in place as timm builds its reference, so the same seed draws timm's weights.
    on_meta = cfg is not None and _loads_from_storage(cfg)
    # one short request first: no network fails in seconds (or loads the cached weights), not after retries
    offline_commit = (
        weights_without_network(name, source, PretrainedWeightsUnavailable)
        if source is not None and not is_offline_mode()
        else None
    )
    pinned = False
    try:  # timm's own download path; only its failure to fetch is put in words
        if cfg is not None and source is not None and offline_commit is not None:
            overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
            model_args["pretrained_cfg_overlay"] = {**overlay, "hf_hub_id": f"{source.repo_id}@{offline_commit}"}
            pinned = True
        elif cfg is not None and source is not None and _fetch_first(source):
            # the weights through the Hub client's checks first, then timm is handed the repo at the commit
            # they are at: it finds them in the cache and asks the Hub nothing more
            repo_id, _, revision = source.location.partition("@")
            commit = fetch_hub_weights(repo_id, revision or None, kwargs.get("cache_dir"))
            overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
            model_args["pretrained_cfg_overlay"] = {**overlay, "hf_hub_id": f"{repo_id}@{commit}"}
            pinned = True
        model = build_model_with_cfg(
            empty_model if on_meta else initialised_model,
            variant,
            pretrained,
            pretrained_filter_fn=checkpoint_filter_fn,
            feature_cfg=dict(out_indices=3, feature_cls="getter"),
            **model_args,
        )
    except FETCH_ERRORS as err:
        if source is None:
            raise
        raise _fetch_failure(name, source, err) from None  # the message holds the cause; __context__ keeps it
    built_cfg = getattr(model, "pretrained_cfg", None)
    if pinned and isinstance(built_cfg, dict) and cfg is not None:
        built_cfg["hf_hub_id"] = cfg.hf_hub_id  # what was asked for, as timm records it without the pinning
    if tag_args:  # recorded where timm's factory records model args, so saved configs keep them
        record_model_args(model, **tag_args)
    if (
        pretrained
        and model_tag in pretrained_tags()
        and isinstance(built_cfg, dict)
        and built_cfg.get("num_classes") == model.num_classes
        and not built_cfg.get("label_names")
    ):
        # ImageNet synsets of the loaded classifier, as timm infers them (only while the head is the source's)
        built_cfg["label_names"] = imagenet_label_names(model.num_classes)
    return model


@register_model
def scratch_vit_ti16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_ti16", pretrained, **kwargs)


@register_model
def scratch_vit_s16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_s16", pretrained, **kwargs)


@register_model
def scratch_vit_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b16", pretrained, **kwargs)


@register_model
def scratch_vit_b32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b32", pretrained, **kwargs)


@register_model
def scratch_vit_l16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l16", pretrained, **kwargs)


@register_model
def scratch_vit_l32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l32", pretrained, **kwargs)


@register_model
def scratch_vit_h14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_h14", pretrained, **kwargs)


@register_model
def scratch_vit_b16_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b16_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_b32_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b32_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_l16_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l16_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_l32_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l32_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_h14_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_h14_in21k", pretrained, **kwargs)


@register_model
def scratch_deit_ti16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_ti16_distilled", pretrained, **kwargs)


@register_model
def scratch_deit_s16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_s16_distilled", pretrained, **kwargs)


@register_model
def scratch_deit_b16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_b16_distilled", pretrained, **kwargs)


@register_model
def scratch_dinov3_s16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_s16", pretrained, **kwargs)


@register_model
def scratch_dinov3_s16_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_s16_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov3_s16_plus(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_s16_plus", pretrained, **kwargs)


@register_model
def scratch_dinov3_s16_plus_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_s16_plus_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov3_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_b16", pretrained, **kwargs)


@register_model
def scratch_dinov3_b16_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_b16_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov3_l16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_l16", pretrained, **kwargs)


@register_model
def scratch_dinov3_l16_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_l16_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov3_h16_plus(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_h16_plus", pretrained, **kwargs)


@register_model
def scratch_dinov3_h16_plus_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_h16_plus_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov3_7b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_7b16", pretrained, **kwargs)


@register_model
def scratch_dinov3_t16_qkvb(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov3_t16_qkvb", pretrained, **kwargs)


@register_model
def scratch_dinov2_s14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_s14", pretrained, **kwargs)


@register_model
def scratch_dinov2_s14_reg4(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_s14_reg4", pretrained, **kwargs)


@register_model
def scratch_dinov2_b14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_b14", pretrained, **kwargs)


@register_model
def scratch_dinov2_b14_reg4(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_b14_reg4", pretrained, **kwargs)


@register_model
def scratch_dinov2_l14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_l14", pretrained, **kwargs)


@register_model
def scratch_dinov2_l14_reg4(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_l14_reg4", pretrained, **kwargs)


@register_model
def scratch_siglip_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_256", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_384", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_512", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_256", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_384", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_512", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14_378(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14_378", pretrained, **kwargs)


@register_model
def scratch_dinov2_g14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_g14", pretrained, **kwargs)


@register_model
def scratch_dinov2_g14_reg4(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_dinov2_g14_reg4", pretrained, **kwargs)


@register_model
def scratch_eva02_t14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_t14", pretrained, **kwargs)


@register_model
def scratch_eva02_s14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_s14", pretrained, **kwargs)


@register_model
def scratch_eva02_b14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_b14", pretrained, **kwargs)


@register_model
def scratch_eva02_l14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_l14", pretrained, **kwargs)


@register_model
def scratch_eva02_t14_336(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_t14_336", pretrained, **kwargs)


@register_model
def scratch_eva02_s14_336(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_s14_336", pretrained, **kwargs)


@register_model
def scratch_eva02_b14_448(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_b14_448", pretrained, **kwargs)


@register_model
def scratch_eva02_l14_448(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_l14_448", pretrained, **kwargs)


@register_model
def scratch_eva02_b16_clip(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_b16_clip", pretrained, **kwargs)


@register_model
def scratch_eva02_l14_clip(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_l14_clip", pretrained, **kwargs)


@register_model
def scratch_eva02_l14_clip_336(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_eva02_l14_clip_336", pretrained, **kwargs)


@register_model
def scratch_pe_core_t16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_core_t16", pretrained, **kwargs)


@register_model
def scratch_pe_core_s16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_core_s16", pretrained, **kwargs)


@register_model
def scratch_pe_core_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_core_b16", pretrained, **kwargs)


@register_model
def scratch_pe_core_l14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_core_l14", pretrained, **kwargs)


@register_model
def scratch_pe_core_g14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_core_g14", pretrained, **kwargs)


@register_model
def scratch_pe_spatial_t16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_spatial_t16", pretrained, **kwargs)


@register_model
def scratch_pe_spatial_s16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_spatial_s16", pretrained, **kwargs)


@register_model
def scratch_pe_spatial_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_spatial_b16", pretrained, **kwargs)


@register_model
def scratch_pe_spatial_l14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_spatial_l14", pretrained, **kwargs)


@register_model
def scratch_pe_spatial_g14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_spatial_g14", pretrained, **kwargs)


@register_model
def scratch_pe_lang_l14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_lang_l14", pretrained, **kwargs)


@register_model
def scratch_pe_lang_g14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_pe_lang_g14", pretrained, **kwargs)


@register_model
def scratch_siglip2_b16_naflex(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip2_b16_naflex", pretrained, **kwargs)


@register_model
def scratch_siglip2_so400m16_naflex(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip2_so400m16_naflex", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_gap(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_gap", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_gap_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_gap_256", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_gap_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_gap_384", pretrained, **kwargs)


@register_model
def scratch_siglip_b16_gap_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b16_gap_512", pretrained, **kwargs)


@register_model
def scratch_siglip_b32_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b32_256", pretrained, **kwargs)


@register_model
def scratch_siglip_b32_gap_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_b32_gap_256", pretrained, **kwargs)


@register_model
def scratch_siglip_gopt16_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_gopt16_256", pretrained, **kwargs)


@register_model
def scratch_siglip_gopt16_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_gopt16_384", pretrained, **kwargs)


@register_model
def scratch_siglip_gopt16_gap_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_gopt16_gap_256", pretrained, **kwargs)


@register_model
def scratch_siglip_gopt16_gap_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_gopt16_gap_384", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_gap_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_gap_256", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_gap_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_gap_384", pretrained, **kwargs)


@register_model
def scratch_siglip_l16_gap_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_l16_gap_512", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14_gap(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14_gap", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14_gap_378(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14_gap_378", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14_gap_448(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14_gap_448", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m14_gap_896(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m14_gap_896", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_256", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_384", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_512", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_gap_256(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_gap_256", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_gap_384(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_gap_384", pretrained, **kwargs)


@register_model
def scratch_siglip_so400m16_gap_512(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_siglip_so400m16_gap_512", pretrained, **kwargs)
