"""``checkpoint_filter_fn``: what timm's pretrained loading calls to adapt a checkpoint to the model."""
from __future__ import annotations

from typing import Dict

import torch
from timm.layers import resample_abs_pos_embed
from torch import nn

from .vision_transformer import VisionTransformer


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: VisionTransformer) -> Dict[str, torch.Tensor]:
    """Adapt a scratch/timm ViT state dict to ``model``: resample the position table to its grid."""
    out = {}
    for key, value in state_dict.items():
        if key == "pos_embed":
            if not isinstance(model.pos_embed, nn.Parameter):
                continue  # a fixed sincos table is rebuilt, never loaded
            if value.shape != model.pos_embed.shape:
                value = resample_abs_pos_embed(
                    value, new_size=list(model.patch_embed.grid_size),
                    num_prefix_tokens=model.num_prefix_tokens,
                )
        out[key] = value
    return out
