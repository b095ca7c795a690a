"""Building models without storage: for counting, for loading by assignment, and for a fast cold start."""

from __future__ import annotations

from typing import Any

import timm
import torch
from torch import nn

from .meta_init import SkipInitOnMeta
from .storage import default_device
from .vision_transformer import VisionTransformer


def build_on_meta(model_name: str, **kwargs: Any) -> nn.Module:
    """Build a registered model with no storage, to count even ViT-H in milliseconds.

    A ``device`` argument is overridden: whatever the caller (or a config file) says, nothing is allocated.
    """
    with torch.device("meta"), SkipInitOnMeta():
        return timm.create_model(model_name, **{**kwargs, "device": "meta"})


def _construct_on_meta(kwargs: dict[str, Any]) -> tuple[VisionTransformer, torch.device | None]:
    """Build on ``meta`` in timm's ``dtype``; return the model and the ``device`` asked for.

    timm's ``device`` factory argument is taken out of ``kwargs``: the model is always built
    without storage, and the caller decides where its tensors go.
    """
    device = kwargs.pop("device", None)
    model = VisionTransformer(**kwargs, device="meta")
    return model, (torch.device(device) if device is not None else None)


def empty_model(**kwargs: Any) -> VisionTransformer:
    """A ``VisionTransformer`` whose tensors hold no storage, for ``load_state_dict`` to assign into.

    ``dtype`` is applied on ``meta`` (loaded tensors are cast to it); ``device`` is where the
    tensors the checkpoint does not hold are created and where the whole model goes once loaded
    (default: where the loaded tensors live; see ``load_state_dict``).
    """
    model, device = _construct_on_meta(kwargs)
    model.load_device = device
    return model


def initialised_model(**kwargs: Any) -> VisionTransformer:
    """A ``VisionTransformer`` on ``device`` (default: the current default device), built as timm builds its own.

    Built in place, so each layer's constructor draws its default init and the model's scheme then redoes what
    it has a rule for: the random draws are timm's, in timm's order, and after the same seed the weights and the
    generator's state are those of timm's reference model (tests/models/test_same_seed.py). The draws a
    checkpoint would overwrite are never made: a pretrained load builds with ``empty_model``. On a ``meta``
    device (``device="meta"`` or under ``with torch.device("meta")``) the model holds no storage.
    """
    device = kwargs.pop("device", None)
    return VisionTransformer(**kwargs, device=torch.device(device) if device is not None else default_device())
