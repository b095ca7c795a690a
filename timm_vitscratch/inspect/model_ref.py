"""What ``vitscratch summary`` and ``vitscratch attention`` take as a model, resolved in one place.

A registered name (``scratch_vit_b16``), a pretrained tag (``scratch_vit_b16.tv_in1k``), a model
directory, ``local-dir:DIR`` or ``hf-hub:ORG/NAME``: each becomes the name ``timm.create_model``
takes for it, so timm's own loaders read the config (and, when asked, the weights).
"""

from __future__ import annotations

from pathlib import Path

from timm.models import split_model_name_tag
from torch import nn

from ..models.variants import ARCHITECTURES, default_cfgs, unknown_model_message
from ..models.vision_transformer import VisionTransformer

KINDS = (
    "a registered name (scratch_vit_b16), a pretrained tag (scratch_vit_b16.tv_in1k), a model directory "
    "(config.json + model.safetensors), local-dir:DIR or hf-hub:ORG/NAME"
)
PREFIXES = ("local-dir:", "hf-hub:")


def timm_model_name(ref: str) -> str:
    """``ref`` as ``timm.create_model`` names it; ValueError for a name or tag that is not registered."""
    if ref.startswith(PREFIXES):
        return ref
    if Path(ref).is_dir():
        return f"local-dir:{ref}"
    variant, tag = split_model_name_tag(ref)
    if variant not in ARCHITECTURES:
        raise ValueError(f"{unknown_model_message(variant)} (a model is {KINDS})")
    known = [t for t in default_cfgs[variant].tags if t]
    if tag and tag not in known:
        raise ValueError(
            f"{variant} has no pretrained tag {tag!r}; its tags: {', '.join(known) or 'none'} "
            f"(vitscratch list --pretrained)"
        )
    return ref


def has_weights(ref: str) -> bool:
    """Whether ``ref`` names weights (a tag, a directory, a Hub repo) rather than a bare architecture."""
    return ref.startswith(PREFIXES) or Path(ref).is_dir() or bool(split_model_name_tag(ref)[1])


def check_scratch_model(model: nn.Module, ref: str) -> VisionTransformer:
    """``model`` if it is one of ours; a ValueError naming what ``ref`` holds otherwise."""
    if not isinstance(model, VisionTransformer):
        architecture = getattr(model, "pretrained_cfg", {}).get("architecture", type(model).__name__)
        raise ValueError(
            f"{ref} holds {architecture!r}, which is not a timm_vitscratch model (its "
            f"architecture must be one of {', '.join(ARCHITECTURES)})"
        )
    return model
