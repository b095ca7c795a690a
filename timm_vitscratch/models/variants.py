"""The zoo as data: one :class:`~.family.Family` record per model family, its rows, and the tables read from them.

Each row is one registered name, written once: its arguments beyond its family's, timm's model of the same
architecture, and the tags of timm's weights it offers (in timm's order; the first is the default). Everything else
is read from the records: the architecture table, timm's names, the pretrained tags (:mod:`.pretrained`), the
registered entry points (:mod:`.registry`), ``hub_configs/``, conversion's family facts and ``vitscratch list``.
"""

from __future__ import annotations

from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from .family import Family, Row


def _row(name: str, timm: str | None, tags: str = "", cfg: dict[str, Any] | None = None, **args: Any) -> Row:
    """A row; ``tags``: timm's tags, space-separated."""
    return Row(name, args, timm, tuple(tags.split()), cfg or {})


# --- sizes ------------------------------------------------------------------------------------------------------
_TI: dict[str, Any] = dict(embed_dim=192, depth=12, num_heads=3)
_S: dict[str, Any] = dict(embed_dim=384, depth=12, num_heads=6)
_B: dict[str, Any] = dict(embed_dim=768, depth=12, num_heads=12)
_L: dict[str, Any] = dict(embed_dim=1024, depth=24, num_heads=16)
_H: dict[str, Any] = dict(embed_dim=1280, depth=32, num_heads=16)
_SO400M: dict[str, Any] = dict(embed_dim=1152, depth=27, num_heads=16, mlp_ratio=3.7362)
_GOPT: dict[str, Any] = dict(embed_dim=1536, depth=40, num_heads=16)
#: DINOv2's giant: timm's packed SwiGLU (``SwiGLUPacked``) of gated width 4096
_DINOV2_G: dict[str, Any] = dict(embed_dim=1536, depth=40, num_heads=24, mlp_ratio=2.66667, swiglu_mlp=True)
#: PE's gigantic: no class token, so its rotary grid starts at 0
_PE_G: dict[str, Any] = dict(
    embed_dim=1536, depth=50, num_heads=16, mlp_ratio=8960 / 1536, class_token=False, rope_grid_offset=0.0
)
#: our size letters -> timm's size words in its model names
_TIMM_SIZES = {"ti": "tiny", "t": "tiny", "s": "small", "b": "base", "l": "large", "h": "huge", "g": "gigantic"}
_TIMM_SIZES.update({"so400m": "so400m", "gopt": "giantopt", "1b": "1b", "3b": "3b"})
#: the ImageNet mean/std timm's DINO and EVA backbones use (the classic ViT's weights use Inception's, the default)
_IMAGENET: dict[str, Any] = dict(mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD)
#: a backbone published without a classifier, read at its own size without a crop
_BACKBONE_CFG: dict[str, Any] = dict(num_classes=0, crop_pct=1.0, **_IMAGENET)

#: our option -> the argument of timm's ``Eva`` that means it, most by the same name (conversion builds timm's Eva)
EVA_ARGS = {
    k: dict(reg_tokens="num_reg_tokens", pre_norm="use_pre_transformer_norm", fc_norm="use_fc_norm").get(k, k)
    for k in (
        "qkv_bias qkv_fused attn_type init_values class_token reg_tokens swiglu_mlp swiglu_align_to scale_mlp "
        "scale_attn_inner pre_norm fc_norm global_pool attn_pool_num_heads attn_pool_mlp_ratio rope_temperature "
        "rope_grid_offset rope_grid_indexing ref_feat_shape dynamic_img_size"
    ).split()
}

# --- the classic ViT and DeiT ------------------------------------------------------------------------------------
_VIT_SIZES: dict[str, dict[str, Any]] = {"ti": _TI, "s": _S, "b": _B, "l": _L, "h": _H}
_DEIT_CFG: dict[str, Any] = dict(crop_pct=0.875, classifier=("head", "head_dist"), **_IMAGENET)
_IN21K_CFG: dict[str, Any] = dict(num_classes=21843)


def _vit(size: str, patch: int, tags: str = "", in21k: bool = False) -> Row:
    """A classic ViT row (``in21k``: with the representation layer); both names follow from size and patch."""
    name, timm_name, width = f"scratch_vit_{size}{patch}", f"vit_{_TIMM_SIZES[size]}_patch{patch}_224", _VIT_SIZES[size]
    if in21k:
        return _row(
            f"{name}_in21k",
            timm_name,
            "",
            _IN21K_CFG,
            patch_size=patch,
            representation_size=width["embed_dim"],
            **width,
        )
    return _row(name, timm_name, tags, patch_size=patch, **width)


def _deit(size: str) -> Row:
    name, timm_name = f"scratch_deit_{size}16_distilled", f"deit_{_TIMM_SIZES[size]}_distilled_patch16_224"
    return _row(name, timm_name, "fb_in1k", _DEIT_CFG, patch_size=16, distilled=True, **_VIT_SIZES[size])


VIT = Family(
    name="vit",
    title="ViT / DeiT",
    options={},
    sizes=_VIT_SIZES,
    rows=(
        _vit("ti", 16, "augreg_in21k_ft_in1k augreg_in21k"),
        _vit("s", 16, "augreg_in21k_ft_in1k augreg_in1k augreg_in21k"),
        _vit(
            "b", 16, "augreg2_in21k_ft_in1k augreg_in21k_ft_in1k orig_in21k_ft_in1k augreg_in1k orig_in21k augreg_in21k"
        ),
        _vit("b", 32, "augreg_in21k_ft_in1k augreg_in1k orig_in21k augreg_in21k"),
        _vit("l", 16, "augreg_in21k_ft_in1k orig_in21k augreg_in21k"),
        _vit("l", 32, "orig_in21k"),
        _vit("h", 14, "orig_in21k"),
        # ImageNet-21k "has_logits": a Linear + Tanh representation layer of width embed_dim, 21843 classes; their
        # tags are Google's transformers repos (pretrained.py), and timm's model of the same body has no pooler
        *(_vit(size, patch, in21k=True) for size, patch in (("b", 16), ("b", 32), ("l", 16), ("l", 32), ("h", 14))),
        # DeiT's weights: ImageNet mean/std, crop .875, two classifiers
        *(_deit(size) for size in ("ti", "s", "b")),
    ),
    timm_class="VisionTransformer",
    counted_against="torchvision",
    licence=None,
    tag_sources=("timm", "torchvision", "transformers"),
    layouts=("timm", "torchvision", "transformers", "jax"),
)

# --- DINOv3 -------------------------------------------------------------------------------------------------------
_DINOV3_SIZES: dict[str, dict[str, Any]] = {
    "t16": _TI,
    "s16": _S,
    "s16_plus": dict(_S, swiglu_mlp=True, swiglu_align_to=8),
    "b16": _B,
    "l16": _L,
    "h16_plus": dict(embed_dim=1280, depth=32, num_heads=20, swiglu_mlp=True, swiglu_align_to=8),
    "7b16": dict(embed_dim=4096, depth=40, num_heads=32, mlp_ratio=2.0, swiglu_mlp=True, swiglu_align_to=64),
}


def _dinov3(size: str, timm_size: str, qkvb: bool, tags: str) -> Row:
    """``_qkvb``: a qkv bias (zero in Meta's weights), as timm's ``_qkvb`` models."""
    suffix = "_qkvb" if qkvb else ""
    name, timm_name = f"scratch_dinov3_{size}{suffix}", f"vit_{timm_size}_patch16_dinov3{suffix}"
    return _row(name, timm_name, tags, **_DINOV3_SIZES[size], qkv_bias=qkvb)


#: the options timm's Eva takes for DINOv3 (the rest are fixed for DINOv3 where conversion builds it)
_DINOV3_EVA_ARGS = (
    "qkv_bias init_values rope_temperature reg_tokens swiglu_mlp swiglu_align_to global_pool dynamic_img_size"
)
#: DINOv3 as timm builds it (its ``Eva``): rotary position, four registers, LayerScale, LayerNorm eps 1e-5, any
#: input size, mean-pooled patch tokens after the final norm; Eva's parameter names. Its EUPE tags: DINOv3-shaped
#: models distilled by Meta (FAIR Noncommercial Research License).
DINOV3 = Family(
    name="dinov3",
    title="DINOv3",
    options=dict(patch_size=16, img_size=256, dynamic_img_size=True, qkv_bias=False, init_values=1e-5, reg_tokens=4)
    | dict(pos_embed="none", rope_type="dinov3", rope_temperature=100.0, global_pool="avg", fc_norm=False)
    | dict(norm_eps=1e-5, eva_names=True),
    sizes=_DINOV3_SIZES,
    rows=(
        _dinov3("s16", "small", False, "lvd1689m"),
        _dinov3("s16", "small", True, "lvd1689m eupe_lvd1689m"),
        _dinov3("s16_plus", "small_plus", False, "lvd1689m"),
        _dinov3("s16_plus", "small_plus", True, "lvd1689m"),
        _dinov3("b16", "base", False, "lvd1689m"),
        _dinov3("b16", "base", True, "lvd1689m eupe_lvd1689m"),
        _dinov3("l16", "large", False, "lvd1689m sat493m"),
        _dinov3("l16", "large", True, "lvd1689m sat493m"),
        _dinov3("h16_plus", "huge_plus", False, "lvd1689m"),
        _dinov3("h16_plus", "huge_plus", True, "lvd1689m"),
        _dinov3("7b16", "7b", False, "lvd1689m sat493m"),
        _dinov3("t16", "tiny", True, "eupe_lvd1689m"),
    ),
    timm_class="Eva",
    licence="dinov3-license",
    layouts=("timm", "meta_dinov3", "transformers"),
    cfg=_BACKBONE_CFG,
    timm_args={k: EVA_ARGS[k] for k in _DINOV3_EVA_ARGS.split()},
)

# --- DINOv2 -------------------------------------------------------------------------------------------------------
_DINOV2_SIZES: dict[str, dict[str, Any]] = {"s14": _S, "b14": _B, "l14": _L, "g14": _DINOV2_G}
#: ``_reg4``: four registers, the position table for the patch tokens only (timm folds the class token's position
#: into the token)
_REG4: dict[str, Any] = dict(reg_tokens=4, no_embed_class=True)
#: DINOv2 as timm builds it (its classic ``VisionTransformer``): patch 14 at 518 px, LayerScale
DINOV2 = Family(
    name="dinov2",
    title="DINOv2",
    options=dict(patch_size=14, img_size=518, init_values=1e-5),
    sizes=_DINOV2_SIZES,
    rows=tuple(
        _row(f"scratch_dinov2_{size}{reg}", f"vit_{timm_size}_patch14{reg}_dinov2", "lvd142m", **args)
        for size, timm_size in (("s14", "small"), ("b14", "base"), ("l14", "large"), ("g14", "giant"))
        for reg, args in (("", _DINOV2_SIZES[size]), ("_reg4", {**_DINOV2_SIZES[size], **_REG4}))
    ),
    timm_class="VisionTransformer",
    licence="apache-2.0",
    layouts=("timm", "transformers"),
    cfg=_BACKBONE_CFG,
    presets={"reg4": _REG4},
)

# --- SigLIP and SigLIP 2 ------------------------------------------------------------------------------------------
#: the ``_gap`` towers: the tokens' mean, no norm after it (instead of the attention pool)
_GAP: dict[str, Any] = dict(global_pool="avg", fc_norm=False)
_TANH: dict[str, Any] = dict(act_layer="gelu_tanh")
_SIGLIP_SIZES: dict[str, dict[str, Any]] = {"b": _B, "l": _L, "so400m": _SO400M, "gopt": _GOPT}
_PALI2_448 = "pali2_3b_pt pali2_10b_pt pali2_3b_docci pali2_10b_docci"


def _siglip(size: str, patch: int, img: int, tags: str, gap: bool = False, tanh: bool = False) -> Row:
    """A SigLIP row; both names follow from its size, patch, resolution and pooling (``tanh``: timm's entry point
    builds it with the tanh-approximated GELU)."""
    pool, at = ("_gap" if gap else ""), ("" if img == 224 else f"_{img}")
    name = f"scratch_siglip_{size}{patch}{pool}{at}"
    timm_name = f"vit_{_TIMM_SIZES[size]}_patch{patch}_siglip{pool}_{img}"
    args: dict[str, Any] = dict(patch_size=patch, **({} if img == 224 else dict(img_size=img)))
    return _row(
        name, timm_name, tags, **args, **(_TANH if tanh else {}), **(_GAP if gap else {}), **_SIGLIP_SIZES[size]
    )


#: SigLIP's image tower as timm builds it: no class token, attention-pooled (MAP) features; the activation is
#: timm's per model (GELU, or its tanh approximation where timm's entry point says so). Names:
#: ``scratch_siglip_<size><patch>[_gap][_<resolution>]``, the resolution left out at 224 as for the classic ViT.
#: Not SO400M/14 at 384: 14 does not divide 384, which timm crops and this model refuses (patch_embed.py).
SIGLIP = Family(
    name="siglip",
    title="SigLIP / SigLIP 2",
    options=dict(class_token=False, global_pool="map"),
    sizes=_SIGLIP_SIZES,
    rows=(
        _siglip("b", 16, 224, "v2_webli webli"),
        _siglip("b", 16, 256, "v2_webli webli webli_i18n"),
        _siglip("b", 16, 384, "v2_webli webli"),
        _siglip("b", 16, 512, "v2_webli webli"),
        _siglip("l", 16, 256, "v2_webli webli"),
        _siglip("l", 16, 384, "v2_webli webli"),
        _siglip("l", 16, 512, "v2_webli", tanh=True),
        _siglip("so400m", 14, 224, "v2_webli webli"),
        _siglip("so400m", 14, 378, "v2_webli webli webli_ft_in1k"),
        # the other towers timm lists weights for: ViT-B/32, giant-opt, SO400M/16, and every `_gap` form
        _siglip("b", 16, 224, "v2_webli webli", gap=True),
        _siglip("b", 16, 256, "v2_webli webli webli_i18n", gap=True),
        _siglip("b", 16, 384, "v2_webli webli", gap=True),
        _siglip("b", 16, 512, "v2_webli webli", gap=True),
        _siglip("b", 32, 256, "v2_webli", tanh=True),
        _siglip("b", 32, 256, "v2_webli", gap=True, tanh=True),
        _siglip("gopt", 16, 256, "v2_webli", tanh=True),
        _siglip("gopt", 16, 384, "v2_webli", tanh=True),
        _siglip("gopt", 16, 256, "v2_webli", gap=True, tanh=True),
        _siglip("gopt", 16, 384, "v2_webli", gap=True, tanh=True),
        _siglip("l", 16, 256, "v2_webli webli", gap=True),
        _siglip("l", 16, 384, "v2_webli webli", gap=True),
        _siglip("l", 16, 512, "v2_webli", gap=True, tanh=True),
        _siglip("so400m", 14, 224, "v2_webli webli pali_mix pali_pt pali2_3b_pt pali2_10b_pt", gap=True),
        _siglip("so400m", 14, 378, "v2_webli webli webli_ft_in1k", gap=True),
        _siglip("so400m", 14, 448, f"pali_mix pali_pt pali_refcoco_seg pali_ocrvqa {_PALI2_448}", gap=True),
        _siglip("so400m", 14, 896, "pali_pt pali_refcoco_seg pali_ocrvqa pali2_3b_pt pali2_10b_pt", gap=True),
        _siglip("so400m", 16, 256, "v2_webli webli_i18n", tanh=True),
        _siglip("so400m", 16, 384, "v2_webli", tanh=True),
        _siglip("so400m", 16, 512, "v2_webli", tanh=True),
        _siglip("so400m", 16, 256, "v2_webli webli_i18n", gap=True, tanh=True),
        _siglip("so400m", 16, 384, "v2_webli", gap=True, tanh=True),
        _siglip("so400m", 16, 512, "v2_webli", gap=True, tanh=True),
    ),
    timm_class="VisionTransformer",
    licence="apache-2.0",
    layouts=("timm", "transformers"),
    cfg=dict(num_classes=0),  # the image tower alone, at its own resolution
    presets={"gap": _GAP},
)
#: SigLIP 2 NaFlex as timm builds it (its ``NaFlexVit``): SigLIP's tower at any size and aspect ratio, its 16x16
#: position table (img_size 256 at patch 16) resampled to each image's grid bilinearly (antialiased), as timm's
#: ``pos_embed_interp_mode='bilinear'``; tanh-approximated GELU; NaFlexVit's init and its module tree (its ``embeds``
#: module: a Linear patch projection, the table inside). timm's cfg sets 384 px as the default input. Its own
#: record beside SigLIP's: another timm class, option set and cfg.
SIGLIP2_NAFLEX = Family(
    name="siglip2_naflex",
    title="SigLIP 2 NaFlex",
    options=dict(SIGLIP.options, patch_size=16, img_size=256, dynamic_img_size=True, act_layer="gelu_tanh")
    | dict(pos_embed_interp_mode="bilinear", naflex_init=True, naflex_embeds=True),
    sizes={"b": _B, "so400m": _SO400M},
    rows=(
        _row("scratch_siglip2_b16_naflex", "naflexvit_base_patch16_siglip", "v2_webli", **_B),
        _row("scratch_siglip2_so400m16_naflex", "naflexvit_so400m_patch16_siglip", "v2_webli", **_SO400M),
    ),
    timm_class="NaFlexVit",
    licence="apache-2.0",
    layouts=("timm",),
    cfg=dict(num_classes=0, input_size=(3, 384, 384), crop_pct=1.0, fixed_input_size=False, first_conv="embeds.proj"),
)

# --- EVA02 --------------------------------------------------------------------------------------------------------
#: base and large: separate q/k/v projections and a LayerNorm inside the MLP; their CLIP image towers also one inside
#: the attention, pooled by the class token
_EVA02_BL: dict[str, Any] = dict(qkv_fused=False, scale_mlp=True)
_EVA02_CLIP: dict[str, Any] = dict(_EVA02_BL, scale_attn_inner=True, global_pool="token")
_MIM_448 = "mim_in22k_ft_in22k_in1k mim_m38m_ft_in22k_in1k mim_in22k_ft_in1k mim_m38m_ft_in1k mim_in22k_ft_in22k"
_EVA02_SIZES: dict[str, dict[str, Any]] = {"t": _TI, "s": _S, "b": _B, "l": _L}


def _eva02(size: str, img: int, tags: str, clip: bool = False, patch: int = 14) -> Row:
    """An EVA02 row; both names follow from size, resolution and kind (the resolution left out at 224)."""
    kind, at = ("_clip" if clip else ""), ("" if img == 224 else f"_{img}")
    name, timm_name = f"scratch_eva02_{size}{patch}{kind}{at}", f"eva02_{_TIMM_SIZES[size]}_patch{patch}{kind}_{img}"
    preset = _EVA02_CLIP if clip else _EVA02_BL if size in ("b", "l") else {}
    args: dict[str, Any] = dict(img_size=img, **_EVA02_SIZES[size], **preset)
    if patch != 14:
        args["patch_size"] = patch
    return _row(name, timm_name, tags, **args)


#: EVA02 as timm builds it (its ``Eva``): patch 14, a learned position table (the class token's row included) plus
#: axial rotary position rescaled onto the 16 x 16 pretraining grid, SwiGLU MLPs (packed for tiny and small),
#: average-pooled patch tokens through ``fc_norm``
EVA02 = Family(
    name="eva02",
    title="EVA02",
    options=dict(patch_size=14, mlp_ratio=4 * 2 / 3, swiglu_mlp=True, global_pool="avg", eva_names=True)
    | dict(rope_type="cat", ref_feat_shape=(16, 16)),
    sizes=_EVA02_SIZES,
    rows=(
        _eva02("t", 224, "mim_in22k"),
        _eva02("s", 224, "mim_in22k"),
        _eva02("b", 224, "mim_in22k"),
        _eva02("l", 224, "mim_in22k mim_m38m"),
        _eva02("t", 336, "mim_in22k_ft_in1k"),
        _eva02("s", 336, "mim_in22k_ft_in1k"),
        _eva02("b", 448, "mim_in22k_ft_in22k_in1k mim_in22k_ft_in1k mim_in22k_ft_in22k"),
        _eva02("l", 448, f"{_MIM_448} mim_m38m_ft_in22k"),
        _eva02("b", 224, "merged2b", clip=True, patch=16),
        _eva02("l", 224, "merged2b", clip=True),
        _eva02("l", 336, "merged2b", clip=True),
    ),
    timm_class="Eva",
    licence="mit",
    layouts=("timm", "baai_eva"),
    cfg_from_timm=True,
    presets={"bl": _EVA02_BL, "clip": _EVA02_CLIP},
    timm_args=EVA_ARGS,
)

# --- Perception Encoder -------------------------------------------------------------------------------------------
#: core: attention-pooled (8 heads, as Eva over every token, the class token too) then projected by ``head``
_PE_CORE: dict[str, Any] = dict(
    global_pool="map", pool_include_prefix=True, attn_pool_num_heads=8, attn_pool_mlp_ratio=4.0
)
#: spatial and lang: the tokens after the last block, no final norm
_PE_DENSE: dict[str, Any] = dict(global_pool="avg", fc_norm=False, final_norm=False)
#: the LayerScale of the gigantic spatial and both lang towers
_PE_LAYER_SCALE: dict[str, Any] = dict(init_values=0.1)
_PE_SIZES: dict[str, dict[str, Any]] = {"t": _TI, "s": _S, "b": _B, "l": _L, "g": _PE_G}
#: (size, patch, resolution) of the core and spatial towers timm has (the gigantic spatial one below)
_PE_CORE_SIZES = (("t", 16, 384), ("s", 16, 384), ("b", 16, 224), ("l", 14, 336), ("g", 14, 448))
_PE_SPATIAL_SIZES = (("t", 16, 512), ("s", 16, 512), ("b", 16, 512), ("l", 14, 448))


def _pe(kind: str, size: str, patch: int, img: int, tags: str = "fb", **extra: Any) -> Row:
    """A PE row (``kind``: core, spatial or lang); both names follow from kind, size, patch and resolution."""
    name, timm_name = f"scratch_pe_{kind}_{size}{patch}", f"vit_pe_{kind}_{_TIMM_SIZES[size]}_patch{patch}_{img}"
    pool = _PE_CORE if kind == "core" else _PE_DENSE
    return _row(name, timm_name, tags, **{**_PE_SIZES[size], **extra}, patch_size=patch, img_size=img, **pool)


#: Meta's Perception Encoder as timm builds it (its ``Eva``): a learned position table plus axial rotary position
#: (columns first, grid offset 1, rescaled onto the pretraining grid: the patch grid at its own size), a LayerNorm
#: before the blocks and no patch bias, LayerNorm eps 1e-5. The gigantic ones have no class token.
PE = Family(
    name="pe",
    title="Perception Encoder",
    options=dict(eva_names=True, attn_type="rope", pre_norm=True, norm_eps=1e-5)
    | dict(rope_type="cat", rope_grid_offset=1.0, rope_grid_indexing="xy"),
    sizes=_PE_SIZES,
    rows=(
        *(_pe("core", size, patch, img) for size, patch, img in _PE_CORE_SIZES),
        *(_pe("spatial", size, patch, img) for size, patch, img in _PE_SPATIAL_SIZES),
        _pe("spatial", "g", 14, 448, **_PE_LAYER_SCALE),
        _pe("lang", "l", 14, 448, "fb fb_tiling", depth=23, **_PE_LAYER_SCALE),
        _pe("lang", "g", 14, 448, "fb fb_tiling", depth=47, **_PE_LAYER_SCALE),
    ),
    timm_class="Eva",
    licence="apache-2.0",
    layouts=("timm", "meta_pe"),
    cfg_from_timm=True,
    presets={"core": _PE_CORE, "dense": _PE_DENSE, "layer_scale": _PE_LAYER_SCALE},
    timm_args=EVA_ARGS,
    ref_grid_is_patch_grid=True,
)

# --- AIMv2 --------------------------------------------------------------------------------------------------------
_AIMV2_SIZES: dict[str, dict[str, Any]] = {
    "l": dict(embed_dim=1024, depth=24, num_heads=8, mlp_ratio=2.75),
    "h": dict(embed_dim=1536, depth=24, num_heads=12, mlp_ratio=2.6667),
    "1b": dict(embed_dim=2048, depth=24, num_heads=16, mlp_ratio=2.75),
    "3b": dict(embed_dim=3072, depth=24, num_heads=24, mlp_ratio=2.6667),
}


def _aimv2(size: str, img: int) -> Row:
    """An AIMv2 row; both names follow from size and resolution (left out at 224), Apple's weights at each, the large
    one's distilled weights too where timm has them (224 and 336)."""
    at = "" if img == 224 else f"_{img}"
    tags = "apple_pt apple_pt_dist" if size == "l" and img < 448 else "apple_pt"
    timm_name = f"aimv2_{_TIMM_SIZES[size]}_patch14_{img}"
    return _row(f"scratch_aimv2_{size}14{at}", timm_name, tags, img_size=img, **_AIMV2_SIZES[size])


#: Apple's AIMv2 image encoders as timm builds them (its classic ``VisionTransformer``): patch 14, no class token,
#: RmsNorm (eps 1e-5) everywhere, the patch tokens' too, SwiGLU MLPs (timm's ``SwiGLU``), no biases in the
#: attention or MLP, the tokens' mean after the final norm. timm records Apple's weights as ``apple-ascl``. timm's
#: state dicts load as they are (its names are ours: the tags, checkpoint_filter_fn); ``convert`` does not yet read
#: the options from a checkpoint's shapes (RmsNorm, biases, the unpacked SwiGLU), so no layout is listed.
AIMV2 = Family(
    name="aimv2",
    title="AIMv2",
    options=dict(patch_size=14, class_token=False, global_pool="avg", fc_norm=False, qkv_bias=False, proj_bias=False)
    | dict(act_layer="silu", mlp_layer="swiglu", norm_layer="rmsnorm", embed_norm_layer="rmsnorm", norm_eps=1e-5),
    sizes=_AIMV2_SIZES,
    rows=tuple(_aimv2(size, img) for img in (224, 336, 448) for size in _AIMV2_SIZES),
    timm_class="VisionTransformer",
    licence="apple-ascl",
    layouts=(),
    cfg_from_timm=True,
)

#: every family, in the order the zoo lists its rows
FAMILIES: tuple[Family, ...] = (VIT, DINOV3, DINOV2, SIGLIP, EVA02, PE, SIGLIP2_NAFLEX, AIMV2)

# --- the tables read from the records -----------------------------------------------------------------------------
#: each registered variant's family
FAMILY_OF: dict[str, Family] = {row.name: family for family in FAMILIES for row in family.rows}
#: Architecture of every registered variant (model kwargs before user overrides).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    row.name: family.architecture(row) for family in FAMILIES for row in family.rows
}
#: every variant whose counts and parity stand beside timm's model of it (not the classic ViT's ``vit_*``): ours -> timm's
TIMM_NAMES: dict[str, str] = {
    ours: theirs
    for family in FAMILIES
    if family.counted_against == "timm"
    for ours, theirs in family.timm_names.items()
}
DINOV3_TIMM_NAMES = DINOV3.timm_names
DINOV2_TIMM_NAMES = DINOV2.timm_names
SIGLIP_TIMM_NAMES = SIGLIP.timm_names
SIGLIP2_NAFLEX_TIMM_NAMES = SIGLIP2_NAFLEX.timm_names
#: our EVA02 / PE variant -> (timm's model of the same architecture, its arguments beyond its family's)
EVA02_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {r.name: (str(r.timm), dict(r.args)) for r in EVA02.rows}
PE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {r.name: (str(r.timm), dict(r.args)) for r in PE.rows}
