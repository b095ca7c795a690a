"""NaFlex batches handed to a model: a dict (or patches with coordinates), checked before anything is computed.

A NaFlex batch (timm's ``NaFlexCollator``) holds each image at its own size as a sequence of flattened
patches: ``patches`` (B, N, P*P*C) or (B, N, Ph, Pw, C), ``patch_coord`` (B, N, 2), the (row, column) of
each patch in its image's grid, and ``patch_valid`` (B, N), False where the collator padded. An image's
grid is its largest valid coordinate + 1, and the model resamples its position table to that grid: so
the coordinates are bounded by the image itself (an image of n valid patches spans at most n rows and n
columns, as every image timm's ``Patchify`` makes does, cut short by the collator or not) and by the
table's resample bound (grid cells). Memory then grows with the valid patches, never with the values of
the coordinates. Dtypes, shapes, devices and patch sides are checked too. Every refusal is a
``NaFlexBatchError`` naming the entry, what it holds and what was expected.

The model is described by plain numbers (:class:`NaFlexSpec`); this module knows no model class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..errors import NaFlexBatchError

BATCH_KEYS = ("patches", "patch_coord", "patch_valid")
#: the integer dtypes a coordinate may have (the wider unsigned ones wrap when made int64)
COORD_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: what autocast computes in: patches of these dtypes meet float32 weights under autocast
AUTOCAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: a patch side of a variable-patch-size batch: at most this many times the model's own (and at least 64 px)
PATCH_SIDE_FACTOR = 4
PATCH_SIDE_FLOOR = 64


@dataclass(frozen=True)
class NaFlexSpec:
    """What a model takes, in plain numbers: the gate's view of it."""

    #: the model's patch (height, width) in pixels and its input channels
    patch_size: tuple[int, int]
    in_chans: int
    #: flattened patches laid out (row, column, channel) when True, (channel, row, column) when False
    channels_last: bool
    #: class, distillation and register tokens before the patches (an ``attn_mask`` covers them too)
    prefix_tokens: int
    #: attention heads (an ``attn_mask`` has 1 or this many)
    heads: int
    #: the learned position table's grid (rows, columns)
    pos_grid: tuple[int, int]
    #: the most cells an image's grid may have: the position table is resampled to at most this size
    max_grid_cells: int
    #: the model's weights: the patches must match them (under autocast: any autocast dtype)
    dtype: torch.dtype
    device: torch.device

    @property
    def grid_cells(self) -> int:
        """The resample bound: ``max_grid_cells``, or the table's own size if the model was built larger."""
        return max(self.max_grid_cells, self.pos_grid[0] * self.pos_grid[1])

    @property
    def max_patch_side(self) -> int:
        return max(PATCH_SIDE_FLOOR, PATCH_SIDE_FACTOR * max(self.patch_size))


class NaFlexBatch(NamedTuple):
    """A checked NaFlex batch: flat patches (B, N, P*P*C) in the model's layout, coordinates, validity."""

    patches: torch.Tensor
    patch_coord: torch.Tensor
    patch_valid: torch.Tensor
    attn_mask: torch.Tensor | None
    patch_size: tuple[int, int]


def shape_text(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def expected_fields(spec: NaFlexSpec) -> str:
    (ph, pw), chans = spec.patch_size, spec.in_chans
    return (
        f"'patches' (batch, N, {ph * pw * chans}) = (batch, N, {ph}*{pw}*{chans}), "
        f"'patch_coord' (batch, N, 2) integer (row, column) and 'patch_valid' (batch, N) bool"
    )


def read_naflex_batch(
    spec: NaFlexSpec,
    x: Any,
    attn_mask: Any = None,
    patch_valid: Any = None,
    patch_coord: Any = None,
) -> NaFlexBatch:
    """The batch from a dict (its entries win, as in timm) or from tensors given as arguments, checked.

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
                missing[0], f"missing; a NaFlex batch holds {expected_fields(spec)} (got keys {sorted(map(str, x))})"
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
                raise NaFlexBatchError(key, f"missing; a NaFlex batch holds {expected_fields(spec)}")
    return check_naflex_batch(spec, patches, patch_coord, patch_valid, attn_mask)


def check_naflex_batch(
    spec: NaFlexSpec, patches: Any, patch_coord: Any, patch_valid: Any, attn_mask: Any
) -> NaFlexBatch:
    """Check every entry's type, dtype, device, shape and values; raise ``NaFlexBatchError`` naming the field.

    Values (validity per image, coordinate bounds) are read only outside ``torch.export``, which
    traces shapes.
    """
    for key, value in (("patches", patches), ("patch_coord", patch_coord), ("patch_valid", patch_valid)):
        if not isinstance(value, torch.Tensor):
            raise NaFlexBatchError(key, f"expected a tensor, got {type(value).__name__}")
    if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
        raise NaFlexBatchError("attn_mask", f"expected a tensor or None, got {type(attn_mask).__name__}")
    flat, patch_size = _flat_patches(spec, patches)
    batch, seq = flat.shape[:2]
    if batch == 0:
        raise NaFlexBatchError("patches", f"holds 0 images {shape_text(patches)}; expected a batch of at least one")
    _check_coord(patch_coord, batch, seq)
    patch_valid = _check_valid(patch_valid, batch, seq)
    if attn_mask is not None:
        _check_mask(spec, attn_mask, flat.dtype, batch, seq)
    for key, value in (
        ("patches", patches),
        ("patch_coord", patch_coord),
        ("patch_valid", patch_valid),
        ("attn_mask", attn_mask),
    ):
        if value is not None and value.device != spec.device:
            raise NaFlexBatchError(key, f"is on {value.device}; expected the model's device, {spec.device}")
    patch_coord = patch_coord.long()
    if not torch.compiler.is_exporting():  # values: checks that read the data (torch.export traces shapes only)
        _check_values(spec, patch_coord, patch_valid)
    return NaFlexBatch(flat, patch_coord, patch_valid, attn_mask, patch_size)


def _flat_patches(spec: NaFlexSpec, patches: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, N, P*P*C) as given, or (B, N, Ph, Pw, C) / (B, N, C, Ph, Pw) (timm's variable patch size) flattened."""
    channels, (ph, pw) = spec.in_chans, spec.patch_size
    if patches.dim() not in (3, 5):
        raise NaFlexBatchError(
            "patches",
            f"expected (batch, N, P*P*C) = (batch, N, {ph * pw * channels}) flattened "
            f"patches, or (batch, N, Ph, Pw, C) for another patch size, got {shape_text(patches)}",
        )
    _check_patch_dtype(spec, patches)
    if patches.dim() == 3:
        if patches.shape[2] != ph * pw * channels:
            raise NaFlexBatchError(
                "patches",
                f"expected (batch, N, P*P*C) = (batch, N, {ph * pw * channels}) for "
                f"patch size ({ph}, {pw}) and {channels} channels, got "
                f"{shape_text(patches)}; for other patch sizes pass (batch, N, Ph, Pw, C)",
            )
        return patches, (ph, pw)
    layout = "(batch, N, Ph, Pw, C)" if spec.channels_last else "(batch, N, C, Ph, Pw)"
    size = tuple(patches.shape[2:4]) if spec.channels_last else tuple(patches.shape[3:5])
    chans = patches.shape[4] if spec.channels_last else patches.shape[2]
    if chans != channels:
        raise NaFlexBatchError("patches", f"expected {layout} with C = {channels}, got {shape_text(patches)}")
    bound = spec.max_patch_side
    if not all(1 <= side <= bound for side in size):
        raise NaFlexBatchError(
            "patches",
            f"{layout} {shape_text(patches)} has a patch side of {min(size) if min(size) < 1 else max(size)} pixels; "
            f"expected 1 to {bound} (at most {PATCH_SIDE_FACTOR}x the model's patch side {max(spec.patch_size)}, "
            f"at least {PATCH_SIDE_FLOOR})",
        )
    return patches.flatten(2), (int(size[0]), int(size[1]))


def _check_patch_dtype(spec: NaFlexSpec, patches: torch.Tensor) -> None:
    if not patches.is_floating_point():
        raise NaFlexBatchError(
            "patches", f"holds {patches.dtype}; expected floating-point pixels of the model's dtype {spec.dtype}"
        )
    if patches.dtype == spec.dtype:
        return
    if torch.is_autocast_enabled(patches.device.type) and patches.dtype in AUTOCAST_DTYPES:
        return
    raise NaFlexBatchError(
        "patches",
        f"holds {patches.dtype}; expected {spec.dtype}, the dtype of the model's weights "
        f"(convert with .to({spec.dtype}), or run under torch.autocast)",
    )


def _check_coord(patch_coord: torch.Tensor, batch: int, seq: int) -> None:
    if tuple(patch_coord.shape) != (batch, seq, 2):
        raise NaFlexBatchError(
            "patch_coord",
            f"expected shape (batch, N, 2) = ({batch}, {seq}, 2) of (row, column) per patch, got {shape_text(patch_coord)}",
        )
    if patch_coord.dtype not in COORD_DTYPES:
        raise NaFlexBatchError(
            "patch_coord", f"expected integer (row, column) grid positions (torch.int64), got {patch_coord.dtype}"
        )


def _check_valid(patch_valid: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    if tuple(patch_valid.shape) != (batch, seq):
        raise NaFlexBatchError(
            "patch_valid", f"expected shape (batch, N) = ({batch}, {seq}), got {shape_text(patch_valid)}"
        )
    if patch_valid.dtype != torch.bool:
        if patch_valid.is_floating_point() or patch_valid.is_complex():
            raise NaFlexBatchError("patch_valid", f"expected bool (True = a real patch), got {patch_valid.dtype}")
        patch_valid = patch_valid != 0
    return patch_valid


def _check_mask(spec: NaFlexSpec, attn_mask: torch.Tensor, dtype: torch.dtype, batch: int, seq: int) -> None:
    tokens = spec.prefix_tokens + seq
    if (
        attn_mask.dim() != 4
        or attn_mask.shape[0] != batch
        or attn_mask.shape[1] not in (1, spec.heads)
        or tuple(attn_mask.shape[2:]) != (tokens, tokens)
    ):
        raise NaFlexBatchError(
            "attn_mask",
            f"expected shape (batch, 1, prefix + N, prefix + N) = ({batch}, 1, {tokens}, {tokens}), "
            f"got {shape_text(attn_mask)}",
        )
    if attn_mask.dtype == torch.bool or attn_mask.dtype == dtype:
        return
    if attn_mask.is_floating_point() and torch.is_autocast_enabled(attn_mask.device.type):
        return
    raise NaFlexBatchError(
        "attn_mask", f"holds {attn_mask.dtype}; expected bool (True = attend) or additive {dtype}, the patches' dtype"
    )


def _check_values(spec: NaFlexSpec, coord: torch.Tensor, valid: torch.Tensor) -> None:
    """Every image has a valid patch; its coordinates lie in a grid its own valid patches can fill
    (at most n rows and n columns for n valid patches), of at most ``spec.grid_cells`` cells."""
    counts = valid.sum(dim=1)
    empty = (counts == 0).nonzero().flatten().tolist()
    if empty:
        raise NaFlexBatchError(
            "patch_valid",
            f"image {empty[0]} of the batch has no valid patch; every image needs at least one True in its row of (batch, N)",
        )
    placed = coord.masked_fill(~valid[..., None], 0)  # padding's coordinates are never read
    if bool((placed < 0).any()):
        raise NaFlexBatchError(
            "patch_coord",
            "holds a negative coordinate at a valid patch; expected (row, column) >= 0 in the image's patch grid",
        )
    last = placed.amax(dim=1)  # (B, 2) each image's largest row and column: its grid is last + 1
    past = (last >= counts[:, None]).nonzero().tolist()  # compared before any + 1: no overflow near 2**63
    if past:
        image, axis = past[0]
        name, value, count = ("row", "column")[axis], int(last[image, axis]), int(counts[image])
        raise NaFlexBatchError(
            "patch_coord",
            f"image {image}: a valid patch at {name} {value:,} is past the bound {count - 1} (an image of "
            f"{count} valid patch{'es' if count != 1 else ''} spans at most {count} rows and {count} columns)",
        )
    cells = (last[:, 0] + 1) * (last[:, 1] + 1)
    over = (cells > spec.grid_cells).nonzero().flatten().tolist()
    if over:
        image = over[0]
        rows, cols = int(last[image, 0]) + 1, int(last[image, 1]) + 1
        raise NaFlexBatchError(
            "patch_coord",
            f"image {image}: its grid of {rows} x {cols} = {rows * cols:,} patch cells is past the position "
            f"table's resample bound of {spec.grid_cells:,} cells",
        )


def check_patch_valid(x: torch.Tensor, patch_valid: Any, prefix: int) -> torch.Tensor:
    """``patch_valid`` of padded NaFlex features (B, prefix + N, D) handed to a head, which must be (B, N); as bool."""
    if not isinstance(patch_valid, torch.Tensor) or tuple(patch_valid.shape) != (x.shape[0], x.shape[1] - prefix):
        got = shape_text(patch_valid) if isinstance(patch_valid, torch.Tensor) else type(patch_valid).__name__
        raise NaFlexBatchError(
            "patch_valid",
            f"expected (batch, N) = ({x.shape[0]}, {x.shape[1] - prefix}) for features {shape_text(x)}, got {got}",
        )
    return patch_valid.bool()
