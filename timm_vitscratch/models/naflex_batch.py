"""timm's NaFlex batches as the model reads them: recognised, then handed to the gate with the model's numbers.

A NaFlex batch (timm's ``create_naflex_loader`` and ``NaFlexCollator``) holds each image at its own
size as a sequence of flattened patches: ``patches`` (B, N, P*P*C), ``patch_coord`` (B, N, 2), the
(row, column) of each patch in its image's grid, and ``patch_valid`` (B, N), False where the
collator padded. It comes from outside, so it enters through the gate (``gate/naflex_batch.py``),
which checks every entry, and bounds the coordinates, against the model's ``naflex_spec()`` before
the model computes anything; a bad one raises ``NaFlexBatchError`` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..choices import MAX_PATCHES
from ..errors import NaFlexBatchError
from ..gate.naflex_batch import NaFlexBatch, NaFlexSpec, read_naflex_batch, shape_text

__all__ = [
    "MAX_PATCHES",
    "NaFlexBatch",
    "NaFlexSpec",
    "check_patch_valid",
    "exporting",
    "is_naflex_call",
    "read_batch",
    "shape_text",
]


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


@torch.compiler.disable  # reads the data (checks, dict entries): runs eagerly under torch.compile
def read_batch(
    spec: NaFlexSpec,
    x: Any,
    attn_mask: torch.Tensor | None = None,
    patch_valid: torch.Tensor | None = None,
    patch_coord: torch.Tensor | None = None,
) -> NaFlexBatch:
    """The batch from a dict (its entries win, as in timm) or from tensors given as arguments, checked by the gate."""
    return read_naflex_batch(spec, x, attn_mask, patch_valid, patch_coord)


def check_patch_valid(x: torch.Tensor, patch_valid: torch.Tensor, prefix: int) -> torch.Tensor:
    """``patch_valid`` of padded features (B, prefix + N, D), which must be (B, N); returned as bool."""
    if tuple(patch_valid.shape) != (x.shape[0], x.shape[1] - prefix):
        raise NaFlexBatchError(
            "patch_valid",
            f"expected (batch, N) = ({x.shape[0]}, {x.shape[1] - prefix}) "
            f"for features {shape_text(x)}, got {shape_text(patch_valid)}",
        )
    return patch_valid.bool()
