"""timm's DINOv3 (its ``Eva`` class) and ours with the same weights: the pairs the DINOv3 tests compare.

timm's model is built by its own registered name (``DINOV3_TIMM_NAMES``), every parameter moved off its
init value (zero biases, 1e-5 scales and zero tokens would hide a dropped, swapped or unused tensor), and
ours is built by our name with the same overrides and loads timm's state dict strict, unchanged.
"""

from __future__ import annotations

from typing import Any, cast

import timm
import torch
from torch import nn

from timm_vitscratch import VisionTransformer
from timm_vitscratch.models.variants import DINOV3_TIMM_NAMES

#: A DINOv3-shaped model small enough for every test: 4 heads of width 16 (rotary needs a multiple of 4).
TINY_DINOV3 = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)
#: The tiny model's name: SwiGLU and the Eva q/v biases, the family's two optional pieces, both on.
TINY_NAME = "scratch_dinov3_s16_plus_qkvb"


def perturbed(model: nn.Module, scale: float = 0.02, seed: int = 1) -> nn.Module:
    """``model`` with every parameter moved by ``scale`` * N(0, 1), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(scale * torch.randn(param.shape, generator=generator).to(param.dtype))
    return model.eval()


def dinov3_pair(ours_name: str, **overrides: Any) -> tuple[nn.Module, VisionTransformer]:
    """timm's model for ``ours_name`` (perturbed) and ours loaded strict from its state dict, both in eval."""
    reference = perturbed(timm.create_model(DINOV3_TIMM_NAMES[ours_name], **overrides))
    ours = cast(VisionTransformer, timm.create_model(ours_name, **overrides)).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| (shapes must be equal)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a.float() - b.float()).abs().max().item()
