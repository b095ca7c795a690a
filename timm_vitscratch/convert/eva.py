"""What the EVA02 and Perception Encoder sources share: the model options their shapes give, the licence of each
family, and timm's ``Eva`` as the reference.

Both families are timm's ``Eva`` with a learned position table plus axial rotary position (``rope_type='cat'``);
their sources (:mod:`timm_vitscratch.layouts.meta_pe`, :mod:`timm_vitscratch.layouts.baai_eva`) map their names
onto timm's Eva names, which are ours (``eva_names=True``), and from there the architecture reads the same way. The
rotary's settings, PE's attention-pool heads and EVA02's reference grid leave no trace in the weights: they are the
family's, as the registered variants have them. What tells the families apart is PE's LayerNorm before the blocks.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..errors import ConversionError
from ..models.model_args import DEFAULTS
from ..models.variants import ARCHITECTURES, EVA02, PE
from .dinov3 import check_ranks, eva_reference
from .source_format import ReferenceSpec

if TYPE_CHECKING:
    from timm.models.eva import Eva

#: each family's record, by the name conversion gives it
FAMILIES = {family.name: family for family in (PE, EVA02)}
#: the licence each family's weights are published under (the records')
LICENSES = {name: str(family.licence) for name, family in FAMILIES.items()}
#: the LayerNorm eps of each family: PE's norms are built with 1e-5, EVA02's with the model's default (1e-6)
NORM_EPS = {name: float({**DEFAULTS, **family.options}["norm_eps"]) for name, family in FAMILIES.items()}


#: the options either family sets, at the model's defaults: what neither the shapes nor the family change
NEUTRAL: dict[str, Any] = {
    **{k: DEFAULTS[k] for k in ("attn_type", "pre_norm", "rope_grid_indexing", "rope_grid_offset", "init_values")},
    **{k: DEFAULTS[k] for k in ("swiglu_mlp", "qkv_fused", "scale_mlp", "scale_attn_inner", "final_norm")},
    **{k: DEFAULTS[k] for k in ("pool_include_prefix", "attn_pool_num_heads", "attn_pool_mlp_ratio")},
    "eva_names": True,
    "rope_type": "cat",
}


#: our-layout keys only timm Eva's EVA02 has, beside the Eva names DINOv3 shares (``q_bias``, ``fc1_g``, ``gamma_1``)
EVA02_KEYS = ("blocks.0.attn.q_proj.weight", "blocks.0.mlp.norm.weight", "blocks.0.attn.norm.weight")
#: the options no weight records, which a named variant fixes: its rotary position and its attention pool's heads
UNRECORDED = (
    "rope_type",
    "rope_temperature",
    "rope_grid_offset",
    "rope_grid_indexing",
    "ref_feat_shape",
    "attn_type",
    "attn_pool_num_heads",
)


def eva_variant(architecture: object) -> str | None:
    """Our EVA02 / PE variant a model name stands for (ours, or the timm model of the same architecture)."""
    names = {**EVA02.timm_names, **PE.timm_names}
    if architecture in names:
        return str(architecture)
    return next((ours for ours, theirs in names.items() if theirs == architecture), None)


def variant_family(name: str) -> str:
    """``'pe'`` or ``'eva02'`` for one of our EVA02 / PE variants."""
    return PE.name if name in PE.names else EVA02.name


def variant_options(shapes: dict[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """:func:`eva_options` for weights of variant ``name`` (named by a config or the user): what the shapes say,
    and the variant's own options where no weight records them (its rotary reference grid, say, which a table
    resampled to another size no longer tells)."""
    family = eva_family(shapes)
    if family != variant_family(name):
        have = "a LayerNorm before the blocks (norm_pre)" if family == "pe" else "no LayerNorm before the blocks"
        raise ConversionError(
            f"{name} is {'a Perception Encoder' if variant_family(name) == 'pe' else 'EVA02'}, but the weights have "
            f"{have}: they are {'a Perception Encoder' if family == 'pe' else 'EVA02'}'s"
        )
    variant = {**DEFAULTS, **ARCHITECTURES[name]}
    return {**eva_options(shapes, variant["ref_feat_shape"]), **{k: variant[k] for k in UNRECORDED}}


def eva_family(shapes: dict[str, tuple[int, ...]]) -> str:
    """``'pe'`` or ``'eva02'`` for weights in our (timm Eva's) names: PE has a LayerNorm before the blocks."""
    return "pe" if "norm_pre.weight" in shapes else "eva02"


def _grid(shapes: dict[str, tuple[int, ...]], prefix_tokens: int) -> tuple[int, int]:
    """The square patch grid of the position table (PE's rotary reference grid is the one it was trained at)."""
    patches = shapes["pos_embed"][1] - prefix_tokens
    side = math.isqrt(max(patches, 0))
    if patches < 1 or side * side != patches:
        raise ConversionError(
            f"the position table has {shapes['pos_embed'][1]} rows, not {prefix_tokens} prefix row(s) plus a square "
            f"patch grid: PE's rotary reference grid is the table's grid"
        )
    return side, side


def _pool_options(shapes: dict[str, tuple[int, ...]], width: int, family: str) -> dict[str, Any]:
    """How the tokens are pooled: PE core's attention pool (as timm's Eva: over every token), EVA02's average
    through ``fc_norm``, EVA-CLIP's class token after the final norm, or none (PE spatial and lang)."""
    if "attn_pool.latent" in shapes:
        return dict(
            global_pool="map",
            pool_include_prefix=True,
            attn_pool_num_heads=PE.presets["core"]["attn_pool_num_heads"],
            attn_pool_mlp_ratio=shapes.get("attn_pool.mlp.fc1.weight", (4 * width,))[0] / width,
            final_norm="norm.weight" in shapes,
        )
    if "fc_norm.weight" in shapes:
        return dict(global_pool="avg", fc_norm=True)
    if family == "eva02" and "norm.weight" in shapes:
        return dict(global_pool="token", fc_norm=False)
    return dict(global_pool="avg", fc_norm=False, final_norm="norm.weight" in shapes)


def eva_options(shapes: dict[str, tuple[int, ...]], ref_feat_shape: Any = None) -> dict[str, Any]:
    """The scratch model's options for EVA02 or PE weights in our (Eva's) names: the family's, and what the
    shapes say (class token, layer scale, separate q/k/v, the norms inside attention and MLP, the pooling).
    ``ref_feat_shape``: PE's rotary reference grid where a variant fixes it (else the position table's grid)."""
    if "pos_embed" not in shapes or "patch_embed.proj.weight" not in shapes:
        raise ConversionError(
            "these Eva weights have no position table (pos_embed): EVA02 and PE have one (DINOv3 has none)"
        )
    check_ranks(shapes)
    width = shapes["patch_embed.proj.weight"][0]
    family = eva_family(shapes)
    class_token = "cls_token" in shapes
    # every option either family sets, stated whatever the variant chosen has: the model is the weights' exactly
    options: dict[str, Any] = dict(NEUTRAL, class_token=class_token)
    if "reg_token" in shapes:
        options["reg_tokens"] = shapes["reg_token"][1]
    if "blocks.0.gamma_1" in shapes:  # any value builds the gammas, which are then loaded
        options["init_values"] = PE.presets["layer_scale"]["init_values"]
    if family == "pe":
        prefix = int(class_token) + options.get("reg_tokens", 0)
        options.update(
            {k: PE.options[k] for k in ("attn_type", "pre_norm", "rope_grid_indexing")},
            rope_grid_offset=float(class_token),  # Meta's rotary counts the class token as position 0
            ref_feat_shape=_grid(shapes, prefix) if ref_feat_shape is None else ref_feat_shape,
            qkv_bias="blocks.0.attn.qkv.bias" in shapes,
        )
    else:
        separate = "blocks.0.attn.q_proj.weight" in shapes
        scale_mlp = "blocks.0.mlp.norm.weight" in shapes
        if "blocks.0.mlp.fc1_g.weight" in shapes and not scale_mlp:
            raise ConversionError(
                "an EVA02 SwiGLU with separate gate and value projections (w1 / w2) but no norm inside (ffn_ln): "
                "timm's EVA02 without that norm packs them into one fc1 (w12), and so do the scratch models"
            )
        if "blocks.0.mlp.fc1_g.weight" not in shapes and not _packed_swiglu(shapes):
            raise ConversionError(
                "these Eva weights have no SwiGLU MLP (w1 / w2 / w3, or a packed w12): EVA02 has one (EVA01, "
                "with a GELU MLP and no rotary position, is not a scratch model)"
            )
        options.update(
            swiglu_mlp=True,
            ref_feat_shape=EVA02.options["ref_feat_shape"],
            qkv_bias=f"blocks.0.attn.{'q_proj.bias' if separate else 'q_bias'}" in shapes,
            qkv_fused=not separate,
            scale_mlp=scale_mlp,
            scale_attn_inner="blocks.0.attn.norm.weight" in shapes,
        )
    options.update(_pool_options(shapes, width, family))
    return options


def _packed_swiglu(shapes: dict[str, tuple[int, ...]]) -> bool:
    """A packed SwiGLU's fc1 is twice as wide as fc2 reads (gate and value stacked)."""
    fc1, fc2 = shapes.get("blocks.0.mlp.fc1.weight"), shapes.get("blocks.0.mlp.fc2.weight")
    return bool(fc1 and fc2 and len(fc1) == 2 and len(fc2) == 2 and fc1[0] == 2 * fc2[1])


# --- the reference: timm's Eva ---------------------------------------------------------------------------------
#: our option -> timm Eva's argument (the records'; EVA02's and PE's are one map)
EVA_ARGS = EVA02.timm_args
#: options every EVA02 / PE model has that Eva has implicitly (its attention pool reads the prefix tokens too), or
#: spells its own way (``final_norm``: Eva's norm after the blocks is there when asked for and no ``fc_norm`` is)
EVA_IMPLIED = ("rope_type", "eva_names", "pool_include_prefix", "final_norm")
#: the pools that pool through ``fc_norm`` unless told otherwise (Eva's and ours alike)
FC_NORM_POOLS = ("avg", "avgmax", "max")


def timm_eva(spec: ReferenceSpec) -> Eva:
    """timm's ``Eva`` built as EVA02 / PE for ``spec``'s architecture."""
    options = spec.arch.options
    if options.get("rope_type") != "cat":
        raise ConversionError("timm's Eva (the reference) has no EVA02 / PE option for rope_type")
    fc_norm = options.get("fc_norm")
    fc_norm = options.get("global_pool") in FC_NORM_POOLS if fc_norm is None else fc_norm
    return eva_reference(
        spec,
        "EVA02 / PE",
        EVA_ARGS,
        EVA_IMPLIED,
        use_abs_pos_emb=True,
        rope_type="cat",
        use_post_transformer_norm=options.get("final_norm", True) and not fc_norm,
    )
