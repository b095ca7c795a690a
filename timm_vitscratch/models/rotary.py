"""Rotary position (RoPE) for 2-D patch grids, the two kinds timm's ``Eva`` uses: DINOv3's (``rope_type='dinov3'``)
and the axial one of EVA02 and the Perception Encoder (``rope_type='cat'``).

A rotary encoding adds nothing to the tokens. It rotates each query and key, pair of channels by pair,
by angles that depend on the token's place, so that attention scores depend on relative position. The
model's ``rope`` module gives the rotation terms for a grid, for packed NaFlex tokens or for padded NaFlex
slots, and attention applies them (``Attention._rotate``, models/attention.py).

DINOv3's coordinates are patch centres, ``(i + 0.5) / size`` along each axis by its own size, mapped to
[-1, 1]; the angles are ``2 pi * coordinate / period`` with periods ``temperature ** (4 j / head_dim)``.
Rows and columns take a quarter of the head's channels each, repeated for the two halves that
"rotate-half" pairs (channel ``j`` with ``j + head_dim / 2``).

The axial kind (timm's ``RotaryEmbeddingCat``) takes patch indices plus ``grid_offset``, rescaled to a
reference grid (``ref_feat_shape``, the pretraining grid: index / size * reference) when one is given; angles
are ``coordinate * temperature ** (-j / (head_dim / 4))``, without 2 pi. Rows and columns take a quarter of the
channels each ('ij' order; 'xy' puts columns first), and each angle rotates a pair of neighbouring channels.

The terms come as one tensor ``(2, ..., tokens, head_dim)``: sines, then cosines, indexed rather than
split (the ops mobile exporters take). Prefix tokens (class, registers) are not rotated: their rows are
sine 0, cosine 1, which leaves them exactly as they are, so one rotation serves every token and packed
sequences need no special case. The terms are computed in float32 whatever the model's dtype; the rotated
values return to the queries' dtype.
"""

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn


def with_prefix_rows(rope: torch.Tensor, prefix: int) -> torch.Tensor:
    """Terms (2, ..., N, D) with ``prefix`` identity rows (sine 0, cosine 1) in front of the N.

    Padded rather than built from ``rope.shape``, so that FX tracing (timm's feature extractors) follows it."""
    if prefix == 0:
        return rope
    return torch.stack([F.pad(rope[0], (0, 0, prefix, 0)), F.pad(rope[1], (0, 0, prefix, 0), value=1.0)])


class DinoV3Rotary(nn.Module):
    """DINOv3's rotary terms for one attention head's width ``head_dim`` (timm's ``rope`` module).

    Holds no tensors: the periods are recomputed in float32 for each call (``head_dim / 4`` numbers), so
    a cast of the model (``.half()``, ``.to(torch.bfloat16)``) never reaches them and no state-dict entry
    exists for them, as in timm.
    """

    #: rotates the two halves of the head against each other (attention reads this to apply the terms)
    interleaved: ClassVar[bool] = False

    def __init__(self, head_dim: int, temperature: float = 100.0, grid_offset: float = 0.0) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(f"rotary position needs a head width divisible by 4, got {head_dim}")
        self.head_dim = head_dim
        self.temperature = float(temperature)
        self.grid_offset = float(grid_offset)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, temperature={self.temperature:g}"

    def _periods(self, device: torch.device) -> torch.Tensor:
        quarter = self.head_dim // 4
        exponents = 2.0 * torch.arange(quarter, dtype=torch.float32, device=device) / (self.head_dim // 2)
        return self.temperature**exponents

    def _terms(self, coords: torch.Tensor) -> torch.Tensor:
        """(..., 2) coordinates in [-1, 1] (row, column) -> (2, ..., head_dim) float32 sines and cosines."""
        periods = self._periods(coords.device)
        angles = (2 * math.pi * coords[..., None] / periods).flatten(-2)  # (..., head_dim / 2): rows, columns
        angles = torch.cat([angles, angles], dim=-1)
        return torch.stack([angles.sin(), angles.cos()])

    def _normalised(self, index: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
        """Patch centres ``(index + 0.5 + offset) / size`` mapped to [-1, 1], in float32."""
        return 2.0 * ((index.float() + 0.5 + self.grid_offset) / size.float()) - 1.0

    def for_grid(self, height: int, width: int, device: torch.device, prefix: int = 0) -> torch.Tensor:
        """(2, prefix + height * width, head_dim) terms of an image's patch grid, row-major, after ``prefix``
        identity rows (the prefix tokens, not rotated)."""
        rows = (torch.arange(height, dtype=torch.float32, device=device) + 0.5 + self.grid_offset) / height
        cols = (torch.arange(width, dtype=torch.float32, device=device) + 0.5 + self.grid_offset) / width
        grid = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).flatten(0, 1)
        return with_prefix_rows(self._terms(2.0 * grid - 1.0), prefix)

    def for_coords(self, coord: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """(2, ..., head_dim) terms of patches at integer (row, column) ``coord`` (..., 2) in grids ``grid`` (..., 2)."""
        return self._terms(self._normalised(coord, grid.clamp(min=1)))


class AxialRotary(nn.Module):
    """Axial rotary terms for one attention head's width ``head_dim``: timm's ``RotaryEmbeddingCat`` as EVA02
    and the Perception Encoder build it (timm's ``rope`` module; its ``rope_type='cat'``).

    ``ref_feat_shape`` (rows, columns): the grid the model was trained at; other grids are rescaled onto it.
    ``grid_indexing``: 'ij' rows first, 'xy' columns first (PE). Holds no tensors (timm keeps its bands and its
    cached table as buffers that no checkpoint holds): the bands are computed in float32 on the CPU for each
    call, as timm computes them, so no cast of the model reaches them.
    """

    #: rotates neighbouring channels (timm's default layout for this kind; attention reads this)
    interleaved: ClassVar[bool] = True

    def __init__(
        self,
        head_dim: int,
        temperature: float = 10000.0,
        grid_offset: float = 0.0,
        grid_indexing: str = "ij",
        ref_feat_shape: tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        if head_dim % 4:
            raise ValueError(f"rotary position needs a head width divisible by 4, got {head_dim}")
        if grid_indexing not in ("ij", "xy"):
            raise ValueError(f"rope_grid_indexing must be 'ij' or 'xy', got {grid_indexing!r}")
        self.head_dim = head_dim
        self.temperature = float(temperature)
        self.grid_offset = float(grid_offset)
        self.grid_indexing = grid_indexing
        self.ref_feat_shape = ref_feat_shape

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, temperature={self.temperature:g}, grid_indexing={self.grid_indexing!r}, "
            f"ref_feat_shape={self.ref_feat_shape}"
        )

    def _bands(self, device: torch.device) -> torch.Tensor:
        quarter = self.head_dim // 4
        exponents = torch.arange(quarter, dtype=torch.float32) / quarter
        return (1.0 / (self.temperature**exponents)).to(device)

    def _rescaled(self, coord: torch.Tensor, size: torch.Tensor, axis: int) -> torch.Tensor:
        """Offset coordinates along ``axis`` (0 rows, 1 columns) of grids ``size`` long, rescaled onto the
        reference grid when there is one (index / size * reference, timm's order of operations)."""
        ref = self.ref_feat_shape
        if ref is not None:
            coord = coord / size * ref[axis]
        return coord

    def _terms(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Row and column coordinates (...) -> (2, ..., head_dim) float32 sines and cosines."""
        pair = (rows, cols) if self.grid_indexing == "ij" else (cols, rows)
        coords = torch.stack(pair, dim=-1)
        angles = (coords[..., None] * self._bands(coords.device)).flatten(-2).repeat_interleave(2, dim=-1)
        return torch.stack([angles.sin(), angles.cos()])

    def for_grid(self, height: int, width: int, device: torch.device, prefix: int = 0) -> torch.Tensor:
        """(2, prefix + height * width, head_dim) terms of an image's patch grid, row-major, after ``prefix``
        identity rows (the prefix tokens, not rotated)."""
        rows = torch.arange(height, dtype=torch.float32, device=device) + self.grid_offset
        cols = torch.arange(width, dtype=torch.float32, device=device) + self.grid_offset
        rows = self._rescaled(rows, torch.full((), height, dtype=torch.float32, device=device), 0)
        cols = self._rescaled(cols, torch.full((), width, dtype=torch.float32, device=device), 1)
        grid_rows, grid_cols = torch.meshgrid(rows, cols, indexing="ij")
        return with_prefix_rows(self._terms(grid_rows.flatten(), grid_cols.flatten()), prefix)

    def for_coords(self, coord: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """(2, ..., head_dim) terms of patches at integer (row, column) ``coord`` (..., 2) in grids ``grid`` (..., 2)."""
        size = grid.clamp(min=1).float()
        rows = self._rescaled(coord[..., 0].float() + self.grid_offset, size[..., 0], 0)
        cols = self._rescaled(coord[..., 1].float() + self.grid_offset, size[..., 1], 1)
        return self._terms(rows, cols)


#: the model's ``rope`` module, of either kind
RotaryPosition = DinoV3Rotary | AxialRotary


def rotary_position(
    rope_type: str,
    head_dim: int,
    *,
    temperature: float,
    grid_offset: float,
    grid_indexing: str,
    ref_feat_shape: tuple[int, int] | None,
) -> RotaryPosition | None:
    """The model's ``rope`` module for ``rope_type`` ('': none)."""
    if rope_type == "dinov3":
        return DinoV3Rotary(head_dim, temperature=temperature, grid_offset=grid_offset)
    if rope_type == "cat":
        return AxialRotary(head_dim, temperature, grid_offset, grid_indexing, ref_feat_shape)
    return None
