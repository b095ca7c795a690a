"""The models a benchmark compares: ours, timm's equivalent and torchvision's, per variant."""

from __future__ import annotations

from dataclasses import dataclass

import timm
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the scratch_* models)
from timm_vitscratch.inspect.counts import torchvision_reference


@dataclass(frozen=True)
class Variant:
    """One architecture under its names in timm_vitscratch and timm (torchvision's comes from the package)."""

    ours: str
    timm: str


VARIANTS: dict[str, Variant] = {
    "ti16": Variant("scratch_vit_ti16", "vit_tiny_patch16_224"),
    "s16": Variant("scratch_vit_s16", "vit_small_patch16_224"),
    "b16": Variant("scratch_vit_b16", "vit_base_patch16_224"),
    "b32": Variant("scratch_vit_b32", "vit_base_patch32_224"),
    "l16": Variant("scratch_vit_l16", "vit_large_patch16_224"),
    "h14": Variant("scratch_vit_h14", "vit_huge_patch14_224"),
}

#: Our model with options: ``ours`` as built by default (timm's computation, timm's default attention);
#: ``ours-pooled`` opts into the pooled-token forward; ``ours-sdpa`` / ``ours-eager`` force one attention path.
OUR_OPTIONS = {
    "ours": {},
    "ours-pooled": dict(pooled_forward=True),
    "ours-sdpa": dict(attn_impl="sdpa"),
    "ours-eager": dict(attn_impl="eager"),
}
CONTESTANTS = ("ours", "ours-pooled", "timm", "torchvision", "ours-sdpa", "ours-eager")


def build(contestant: str, variant: str, num_classes: int = 1000) -> nn.Module:
    """A freshly initialised model (dropout and drop-path off, as all three default to)."""
    spec = VARIANTS[variant]
    if contestant == "timm":
        return timm.create_model(spec.timm, num_classes=num_classes)
    if contestant == "torchvision":
        return torchvision_reference(spec.ours, num_classes, device="cpu")
    if contestant in OUR_OPTIONS:
        return timm.create_model(spec.ours, num_classes=num_classes, **OUR_OPTIONS[contestant])
    raise ValueError(f"unknown contestant {contestant!r}; expected one of {CONTESTANTS}")


def create_pretrained(contestant: str, variant: str, weights: str) -> nn.Module:
    """``timm.create_model(..., pretrained=True)`` from a local safetensors file (timm's own file override).

    Both load the same file: our parameter names are timm's. ``num_classes`` is pinned to the
    file's head (timm's ViT-H cfg declares 0 classes, which would drop the head).
    """
    spec = VARIANTS[variant]
    name = {"timm": spec.timm}.get(contestant, spec.ours)
    if contestant != "timm" and contestant not in OUR_OPTIONS:
        raise ValueError(f"pretrained loading compares ours and timm, not {contestant!r}")
    extra = OUR_OPTIONS.get(contestant, {})
    return timm.create_model(
        name, pretrained=True, num_classes=1000, pretrained_cfg_overlay=dict(file=weights, num_classes=1000), **extra
    )


def check_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[name]
