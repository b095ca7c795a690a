"""Rotary position (RoPE) for 2-D patch grids: DINOv3's variant, as timm's ``Eva`` uses it (``rope_type='dinov3'``).

A rotary encoding adds nothing to the tokens. It rotates each query and key, pair of channels by pair,
by angles that depend on the token's place, so that attention scores depend on relative position. The
model's ``rope`` module gives the rotation terms for a grid, for packed NaFlex tokens or for padded NaFlex
slots, and attention applies them (:func:`apply_rotary`).

DINOv3's coordinates are patch centres, ``(i + 0.5) / size`` along each axis by its own size, mapped to
[-1, 1]; the angles are ``2 pi * coordinate / period`` with periods ``temperature ** (4 j / head_dim)``.
Rows and columns take a quarter of the head's channels each, repeated for the two halves that
"rotate-half" pairs (channel ``j`` with ``j + head_dim / 2``).

The terms come as one tensor ``(2, ..., tokens, head_dim)``: sines, then cosines, indexed rather than
split (the ops mobile exporters take). Prefix tokens (class, registers) are not rotated: their rows are
sine 0, cosine 1, which leaves them exactly as they are, so one rotation serves every token and packed
sequences need no special case. The terms are computed in float32 whatever the model's dtype; the rotated
values return to the queries' dtype.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> (..., D): ``[-x2, x1]`` for halves ``x1``, ``x2``: the partner of each channel, signed."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Queries or keys (..., tokens, D) rotated by terms ``rope`` (2, ..., tokens, D), in ``x``'s dtype."""
    return (x * rope[1] + rotate_half(x) * rope[0]).to(x.dtype)


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

    def for_grid(self, height: int, width: int, device: torch.device) -> torch.Tensor:
        """(2, height * width, head_dim) terms of an image's patch grid, row-major."""
        rows = (torch.arange(height, dtype=torch.float32, device=device) + 0.5 + self.grid_offset) / height
        cols = (torch.arange(width, dtype=torch.float32, device=device) + 0.5 + self.grid_offset) / width
        grid = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).flatten(0, 1)
        return self._terms(2.0 * grid - 1.0)

    def for_coords(self, coord: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """(2, ..., head_dim) terms of patches at integer (row, column) ``coord`` (..., 2) in grids ``grid`` (..., 2)."""
        return self._terms(self._normalised(coord, grid.clamp(min=1)))
