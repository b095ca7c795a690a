"""timm's own ViT and ours with the same weights, for each option family of the checkpoints in the wild.

The reference is timm's ``VisionTransformer`` (``VisionTransformerDistilled`` for DeiT distilled).
For "has_logits" (ImageNet-21k ViTs with a representation layer, which timm's class no longer
builds) it is timm's class with that layer put back where the original ViT had it: a
``pre_logits`` Linear + Tanh between ``fc_norm`` and ``head_drop``, run by a forward pre-hook on
``head_drop``; nothing else of timm's model changes.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from timm_vitscratch import VisionTransformer

#: A small shape every family is built at: fast, and two heads per block.
SIZE = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5)

#: family -> constructor options (timm's names); ``distilled`` and ``representation_size`` are ours.
FAMILIES: dict[str, dict[str, Any]] = {
    "plain": {},
    "deit3": dict(init_values=1e-4, no_embed_class=True),
    "dinov2_reg": dict(reg_tokens=4, init_values=1e-4, no_embed_class=True, dynamic_img_size=True),
    "avg_fc_norm": dict(global_pool="avg", fc_norm=True),
    "map": dict(global_pool="map"),
    "qk_norm": dict(qk_norm=True),
    "clip_pre_norm": dict(pre_norm=True, norm_layer=partial(nn.LayerNorm, eps=1e-5), act_layer="quick_gelu"),
    "distilled": dict(distilled=True),
    "has_logits": dict(representation_size=SIZE["embed_dim"]),
}


def input_size(family: str) -> tuple[int, int]:
    """The (height, width) to feed: off the default size where the family takes any size."""
    return (32, 48) if FAMILIES[family].get("dynamic_img_size") else (SIZE["img_size"], SIZE["img_size"])


def timm_model(family: str, **overrides: Any) -> nn.Module:
    """timm's model of ``family`` (see the module docstring for has_logits)."""
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    options = {**SIZE, **FAMILIES[family], **overrides}
    if options.pop("distilled", False):
        return VisionTransformerDistilled(**options)
    representation = options.pop("representation_size", None)
    model = TimmViT(**options)
    if representation:
        model.pre_logits = nn.Sequential(OrderedDict(fc=nn.Linear(model.embed_dim, representation), act=nn.Tanh()))
        model.head_drop.register_forward_pre_hook(lambda _module, args: (model.pre_logits(args[0]),))
    return model


def timm_pair(family: str, **overrides: Any) -> tuple[nn.Module, VisionTransformer]:
    """timm's model with perturbed weights (no tensor left at its init value) and ours loaded from it, in eval."""
    torch.manual_seed(0)
    reference = timm_model(family, **overrides).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    ours = VisionTransformer(**{**SIZE, **FAMILIES[family], **overrides}).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


@runtime_checkable
class _FusedAttnSwitch(Protocol):
    """What has timm's per-module attention switch: timm's attention layers and ours."""

    fused_attn: bool


def set_fused_attn(model: nn.Module, fused: bool) -> None:
    """timm's per-module attention switch, on every attention layer (timm's or ours) of ``model``."""
    for module in model.modules():
        if isinstance(module, _FusedAttnSwitch):  # an attribute check, as hasattr()
            module.fused_attn = fused
