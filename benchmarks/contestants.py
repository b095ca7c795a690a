"""The models a benchmark compares: ours, timm's equivalent and torchvision's, per variant."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional

import timm
import torch
import torchvision
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the scratch_* models)


@dataclass(frozen=True)
class Variant:
    """One architecture under the three names it has in the three libraries."""

    ours: str
    timm: str
    torchvision: Callable[[], nn.Module]
    img_size: int = 224


def _torchvision_generic(patch: int, layers: int, heads: int, width: int) -> Callable[[], nn.Module]:
    """torchvision has no named builder for ViT-Ti: its generic class with the same architecture."""
    def build() -> nn.Module:
        return torchvision.models.vision_transformer.VisionTransformer(
            image_size=224, patch_size=patch, num_layers=layers, num_heads=heads, hidden_dim=width,
            mlp_dim=4 * width,
        )
    return build


VARIANTS: Dict[str, Variant] = {
    "ti16": Variant("scratch_vit_ti16", "vit_tiny_patch16_224", _torchvision_generic(16, 12, 3, 192)),
    "s16": Variant("scratch_vit_s16", "vit_small_patch16_224", _torchvision_generic(16, 12, 6, 384)),
    "b16": Variant("scratch_vit_b16", "vit_base_patch16_224", torchvision.models.vit_b_16),
    "b32": Variant("scratch_vit_b32", "vit_base_patch32_224", torchvision.models.vit_b_32),
    "l16": Variant("scratch_vit_l16", "vit_large_patch16_224", torchvision.models.vit_l_16),
    "h14": Variant("scratch_vit_h14", "vit_huge_patch14_224", torchvision.models.vit_h_14),
}

#: Contestant names: ``ours`` uses the model's default attention; ``ours-sdpa`` / ``ours-eager`` force one.
CONTESTANTS = ("ours", "timm", "torchvision", "ours-sdpa", "ours-eager")


def build(contestant: str, variant: str, num_classes: int = 1000) -> nn.Module:
    """A freshly initialised model (dropout and drop-path off, as all three default to)."""
    spec = VARIANTS[variant]
    if contestant == "timm":
        return timm.create_model(spec.timm, num_classes=num_classes)
    if contestant == "torchvision":
        return spec.torchvision()
    if contestant == "ours":
        return timm.create_model(spec.ours, num_classes=num_classes)
    if contestant.startswith("ours-"):
        return timm.create_model(spec.ours, num_classes=num_classes, attn_impl=contestant[len("ours-"):])
    raise ValueError(f"unknown contestant {contestant!r}; expected one of {CONTESTANTS}")


def create_pretrained(contestant: str, variant: str, weights: str) -> nn.Module:
    """``timm.create_model(..., pretrained=True)`` from a local safetensors file (timm's own file override).

    Both load the same file: our parameter names are timm's. ``num_classes`` is pinned to the
    file's head (timm's ViT-H cfg declares 0 classes, which would drop the head).
    """
    spec = VARIANTS[variant]
    name = {"timm": spec.timm}.get(contestant, spec.ours)
    extra = {"attn_impl": contestant[len("ours-"):]} if contestant.startswith("ours-") else {}
    if contestant not in ("timm", "ours") and not extra:
        raise ValueError(f"pretrained loading compares ours and timm, not {contestant!r}")
    return timm.create_model(name, pretrained=True, num_classes=1000,
                             pretrained_cfg_overlay=dict(file=weights, num_classes=1000), **extra)


def check_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[name]


def module_device(model: nn.Module) -> Optional[torch.device]:
    return next(model.parameters()).device
