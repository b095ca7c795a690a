"""What every DINOv3 source shares: the model options its shapes give, and timm's ``Eva`` as the reference.

The three DINOv3 sources (Meta's files, timm's ``Eva`` state dicts, transformers' ``DINOv3ViTModel``) map onto
timm's Eva names, which are ours (``eva_names=True``); from there the architecture reads the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ConversionError
from ..models.architecture import Arch
from ..models.variants import DINOV3
from .source_format import ReferenceSpec

if TYPE_CHECKING:
    from timm.models.eva import Eva

#: the options that make a scratch model DINOv3 (rotary position, registers, Eva's names): the family record's
FAMILY = {
    k: DINOV3.options[k]
    for k in ("pos_embed", "rope_type", "rope_temperature", "dynamic_img_size", "global_pool", "fc_norm", "eva_names")
}
#: DINOv3's input size and LayerNorm eps (the family's); a rotary model has no table that tells the size
IMG_SIZE: int = DINOV3.options["img_size"]
NORM_EPS: float = DINOV3.options["norm_eps"]
#: the license of the DINOv3 weights in the layouts only Meta's DINOv3 releases use (Meta's own files, and
#: transformers' DINOv3ViTModel, the layout of facebook/dinov3-* on the Hub): the family's
LICENSE: str = str(DINOV3.licence)
#: our-layout keys only Eva's names have: DINOv3 from timm, or mapped from Meta / transformers
EVA_KEYS = ("blocks.0.gamma_1", "blocks.0.attn.q_bias", "blocks.0.mlp.fc1_g.weight")


#: the number of dimensions the Eva families' options are read from (a tensor of another rank is refused first)
RANKS = {
    "patch_embed.proj.weight": 4,
    "pos_embed": 3,
    "cls_token": 3,
    "reg_token": 3,
    "attn_pool.latent": 3,
    "attn_pool.mlp.fc1.weight": 2,
}


def check_ranks(shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse a tensor the options are read from whose number of dimensions is not its layer's."""
    for key, dims in RANKS.items():
        if key in shapes and len(shapes[key]) != dims:
            raise ConversionError(f"{key} has shape {tuple(shapes[key])} in our layout; expected {dims} dimensions")


def has_eva_names(shapes: dict[str, tuple[int, ...]]) -> bool:
    return any(key in shapes for key in EVA_KEYS)


def dinov3_options(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """The scratch model's options for DINOv3 weights in our (Eva's) names: the family's, and what the shapes say
    (registers, layer scale, q/v biases, SwiGLU). An Eva model with a position table is not DINOv3."""
    if "pos_embed" in shapes:
        raise ConversionError(
            "these are timm Eva weights with a position table (pos_embed): EVA02 / PE, not DINOv3; the scratch "
            "models hold DINOv3's Eva (rotary position only)"
        )
    check_ranks(shapes)
    options: dict[str, Any] = dict(FAMILY)
    options["reg_tokens"] = shapes["reg_token"][1] if "reg_token" in shapes else 0  # none held: none built
    options["init_values"] = DINOV3.options["init_values"] if "blocks.0.gamma_1" in shapes else None
    options["qkv_bias"] = "blocks.0.attn.q_bias" in shapes
    if "blocks.0.mlp.fc1_g.weight" in shapes:
        options["swiglu_mlp"] = True
    return options


# --- the reference: timm's Eva ---------------------------------------------------------------------------------
#: our option -> timm Eva's argument, the family record's (the rest below are fixed for DINOv3)
EVA_ARGS = DINOV3.timm_args
#: options every DINOv3 model has that Eva spells its own way, or has implicitly
EVA_IMPLIED = ("pos_embed", "rope_type", "eva_names", "fc_norm")


def eva_reference(
    spec: ReferenceSpec, family: str, args: Mapping[str, str], implied: Collection[str], **fixed: Any
) -> Eva:
    """timm's ``Eva`` for ``spec``'s architecture as ``family`` builds it: every option of the architecture one Eva
    takes (``args``: ours -> Eva's name) or one the family implies; ``fixed``: the Eva arguments the family sets.
    Built with its own init, not on ``meta``: its rotary buffers are computed when it is built and no state dict
    holds them; the checkpoint's tensors are loaded next."""
    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    arch: Arch = spec.arch
    if arch.num_heads is None:
        raise ConversionError("the head count is unknown: pass --num-heads")
    unknown = sorted(set(arch.options) - set(args) - set(implied))
    if unknown:
        raise ConversionError(f"timm's Eva (the reference) has no {family} option for {', '.join(unknown)}")
    return Eva(
        img_size=spec.img_size,
        patch_size=arch.patch_size,
        in_chans=arch.in_chans,
        num_classes=arch.num_classes,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_heads=arch.num_heads,
        mlp_ratio=arch.mlp_ratio,
        use_rot_pos_emb=True,
        norm_layer=partial(LayerNorm, eps=arch.norm_eps),
        **fixed,
        **{args[k]: v for k, v in arch.options.items() if k in args},
    )


def timm_eva(spec: ReferenceSpec) -> Eva:
    """timm's ``Eva`` built as DINOv3 for ``spec``'s architecture."""
    return eva_reference(
        spec,
        "DINOv3",
        EVA_ARGS,
        EVA_IMPLIED,
        rope_type="dinov3",
        rope_rotate_half=True,
        use_abs_pos_emb=False,
        use_fc_norm=False,
    )
