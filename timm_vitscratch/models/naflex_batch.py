"""timm's NaFlex batches as the model reads them: recognised, then handed to the gate with the model's numbers.

A NaFlex batch (timm's ``create_naflex_loader`` and ``NaFlexCollator``) holds each image at its own
size as a sequence of flattened patches: ``patches`` (B, N, P*P*C), ``patch_coord`` (B, N, 2), the
(row, column) of each patch in its image's grid, and ``patch_valid`` (B, N), False where the
collator padded. It comes from outside, so it enters through the gate (``gate/naflex_batch.py``),
which checks every entry, and bounds the coordinates, before the model computes anything; a bad one
raises ``NaFlexBatchError`` naming it (models/naflex.py computes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..choices import MAX_PATCHES
from ..gate.naflex_batch import NaFlexBatch, NaFlexSpec, read_naflex_batch, shape_text
from .block import Block

if TYPE_CHECKING:  # type-only: vision_transformer imports this module
    from .vision_transformer import VisionTransformer

__all__ = ["NaFlexBatch", "exporting", "is_naflex_call", "read_batch", "shape_text", "spec_of"]


def is_naflex_call(x: Any, patch_coord: torch.Tensor | None, patch_valid: torch.Tensor | None) -> bool:
    """True for a NaFlex batch: a dict, or patches given with their coordinates / validity.

    Under FX tracing every argument is a placeholder: that traces the image path.
    """
    if isinstance(x, torch.fx.Proxy):
        return False
    return isinstance(x, Mapping) or patch_coord is not None or patch_valid is not None


def exporting() -> bool:
    """True while ``torch.export`` (or an ONNX export) traces the model: value checks are left out."""
    return torch.compiler.is_exporting()


def spec_of(model: VisionTransformer) -> NaFlexSpec:
    """The numbers the gate checks a batch against: patch size, channels, prefix tokens, heads, position
    grid and its resample bound (the model's bound on one image's patch grid), dtype and device."""
    first = model.blocks[0] if len(model.blocks) else None
    weight = model.patch_embed.proj.weight
    (ph, pw), (gh, gw) = model.patch_embed.patch_size, model.patch_embed.grid_size
    return NaFlexSpec(
        patch_size=(int(ph), int(pw)),
        in_chans=model.in_chans,
        channels_last=model.patchify_channels_last,
        prefix_tokens=model.num_prefix_tokens,
        heads=first.attn.num_heads if isinstance(first, Block) else 1,
        pos_grid=(int(gh), int(gw)),
        max_grid_cells=MAX_PATCHES,
        dtype=weight.dtype,
        device=weight.device,
    )


@torch.compiler.disable  # reads the data (checks, dict entries): runs eagerly under torch.compile
def read_batch(
    model: VisionTransformer,
    x: Any,
    attn_mask: torch.Tensor | None = None,
    patch_valid: torch.Tensor | None = None,
    patch_coord: torch.Tensor | None = None,
) -> NaFlexBatch:
    """The batch from a dict (its entries win, as in timm) or from tensors given as arguments, checked by the gate."""
    return read_naflex_batch(spec_of(model), x, attn_mask, patch_valid, patch_coord)
