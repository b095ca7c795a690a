"""timm's NaFlex batches as the model reads them: recognised, taken apart and checked field by field.

A NaFlex batch (timm's ``create_naflex_loader`` and ``NaFlexCollator``) holds each image at its own
size as a sequence of flattened patches: ``patches`` (B, N, P*P*C), ``patch_coord`` (B, N, 2), the
(row, column) of each patch in its image's grid, and ``patch_valid`` (B, N), False where the
collator padded. Every entry is checked before the model computes anything; a bad one raises
``NaFlexBatchError`` naming it (models/naflex.py computes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from ..errors import NaFlexBatchError
from .block import Block

if TYPE_CHECKING:  # type-only: vision_transformer imports this module
    from .vision_transformer import VisionTransformer

BATCH_KEYS = ("patches", "patch_coord", "patch_valid")


class NaFlexBatch(NamedTuple):
    """A checked NaFlex batch: flat patches (B, N, P*P*C) in the model's layout, coordinates, validity."""

    patches: torch.Tensor
    patch_coord: torch.Tensor
    patch_valid: torch.Tensor
    attn_mask: torch.Tensor | None
    patch_size: tuple[int, int]


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
    model: VisionTransformer,
    x: Any,
    attn_mask: torch.Tensor | None = None,
    patch_valid: torch.Tensor | None = None,
    patch_coord: torch.Tensor | None = None,
) -> NaFlexBatch:
    """The batch from a dict (its entries win, as in timm) or from tensors given as arguments.

    timm's ``NaFlexVit.forward(patches, patch_coord, patch_valid)`` order works positionally: a
    tensor of patches followed by its coordinates fills the model's second parameter
    (``attn_mask`` for images), which then holds the coordinates.
    """
    if isinstance(x, Mapping):
        missing = [
            key
            for key in BATCH_KEYS
            if key not in x
            and not (key == "patch_coord" and patch_coord is not None)
            and not (key == "patch_valid" and patch_valid is not None)
        ]
        if missing:
            raise NaFlexBatchError(
                missing[0], f"missing; a NaFlex batch holds {_expected_fields(model)} (got keys {sorted(map(str, x))})"
            )
        patches = x["patches"]
        patch_coord = x.get("patch_coord", patch_coord)
        patch_valid = x.get("patch_valid", patch_valid)
        attn_mask = x.get("attn_mask", attn_mask)
    else:
        patches = x
        if patch_coord is None:  # NaFlexVit's positional order: (patches, patch_coord, patch_valid)
            patch_coord, attn_mask = attn_mask, None
        for key, value in (("patch_coord", patch_coord), ("patch_valid", patch_valid)):
            if value is None:
                raise NaFlexBatchError(key, f"missing; a NaFlex batch holds {_expected_fields(model)}")
    return check_batch(model, patches, patch_coord, patch_valid, attn_mask)


def _expected_fields(model: VisionTransformer) -> str:
    ph, pw = model.patch_embed.patch_size
    return (
        f"'patches' (batch, N, {ph * pw * model.in_chans}) = (batch, N, {ph}*{pw}*{model.in_chans}), "
        f"'patch_coord' (batch, N, 2) integer (row, column) and 'patch_valid' (batch, N) bool"
    )


def shape_text(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def check_batch(
    model: VisionTransformer, patches: Any, patch_coord: Any, patch_valid: Any, attn_mask: torch.Tensor | None
) -> NaFlexBatch:
    """Check every entry's type, shape and values; raise ``NaFlexBatchError`` naming the field."""
    for key, value in (("patches", patches), ("patch_coord", patch_coord), ("patch_valid", patch_valid)):
        if not isinstance(value, torch.Tensor):
            raise NaFlexBatchError(key, f"expected a tensor, got {type(value).__name__}")
    patches, patch_size = _flat_patches(model, patches)
    batch, seq = patches.shape[:2]
    if tuple(patch_coord.shape) != (batch, seq, 2):
        raise NaFlexBatchError(
            "patch_coord",
            f"expected shape (batch, N, 2) = ({batch}, {seq}, 2) of (row, column) per patch, got {shape_text(patch_coord)}",
        )
    if patch_coord.is_floating_point() or patch_coord.is_complex() or patch_coord.dtype == torch.bool:
        raise NaFlexBatchError(
            "patch_coord", f"expected integer (row, column) grid positions (torch.int64), got {patch_coord.dtype}"
        )
    if tuple(patch_valid.shape) != (batch, seq):
        raise NaFlexBatchError(
            "patch_valid", f"expected shape (batch, N) = ({batch}, {seq}), got {shape_text(patch_valid)}"
        )
    if patch_valid.dtype != torch.bool:
        if patch_valid.is_floating_point() or patch_valid.is_complex():
            raise NaFlexBatchError("patch_valid", f"expected bool (True = a real patch), got {patch_valid.dtype}")
        patch_valid = patch_valid != 0
    if attn_mask is not None:
        tokens = model.num_prefix_tokens + seq
        first = model.blocks[0] if len(model.blocks) else None
        heads = first.attn.num_heads if isinstance(first, Block) else 1
        if (
            not isinstance(attn_mask, torch.Tensor)
            or attn_mask.dim() != 4
            or attn_mask.shape[0] != batch
            or attn_mask.shape[1] not in (1, heads)
            or tuple(attn_mask.shape[2:]) != (tokens, tokens)
        ):
            got = shape_text(attn_mask) if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
            raise NaFlexBatchError(
                "attn_mask",
                f"expected shape (batch, 1, prefix + N, prefix + N) = ({batch}, 1, {tokens}, {tokens}), got {got}",
            )
    if not exporting():  # values: checks that read the data (torch.export traces shapes only)
        empty = (~patch_valid.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise NaFlexBatchError(
                "patch_valid",
                f"image {empty[0]} of the batch has no valid patch; every image "
                f"needs at least one True in its row of (batch, N)",
            )
        if bool((patch_coord[patch_valid] < 0).any()):
            raise NaFlexBatchError(
                "patch_coord",
                "holds a negative coordinate at a valid patch; expected (row, column) >= 0 in the image's patch grid",
            )
    return NaFlexBatch(patches, patch_coord.long(), patch_valid, attn_mask, patch_size)


def _flat_patches(model: VisionTransformer, patches: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, N, P*P*C) as given, or (B, N, Ph, Pw, C) / (B, N, C, Ph, Pw) (timm's variable patch size) flattened."""
    channels, (ph, pw) = model.in_chans, model.patch_embed.patch_size
    channels_last = model.patchify_channels_last
    if patches.dim() == 3:
        if patches.shape[2] != ph * pw * channels:
            raise NaFlexBatchError(
                "patches",
                f"expected (batch, N, P*P*C) = (batch, N, {ph * pw * channels}) for "
                f"patch size ({ph}, {pw}) and {channels} channels, got "
                f"{shape_text(patches)}; for other patch sizes pass (batch, N, Ph, Pw, C)",
            )
        return patches, (ph, pw)
    if patches.dim() == 5:
        size = tuple(patches.shape[2:4]) if channels_last else tuple(patches.shape[3:5])
        chans = patches.shape[4] if channels_last else patches.shape[2]
        if chans != channels:
            layout = "(batch, N, Ph, Pw, C)" if channels_last else "(batch, N, C, Ph, Pw)"
            raise NaFlexBatchError("patches", f"expected {layout} with C = {channels}, got {shape_text(patches)}")
        return patches.flatten(2), (int(size[0]), int(size[1]))
    raise NaFlexBatchError(
        "patches",
        f"expected (batch, N, P*P*C) = (batch, N, {ph * pw * channels}) flattened "
        f"patches, or (batch, N, Ph, Pw, C) for another patch size, got {shape_text(patches)}",
    )
