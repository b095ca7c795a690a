"""Position encoding, one swappable piece: where each token is, for an image's patch grid, for packed
NaFlex tokens and for the padded NaFlex slots that export takes.

The model holds one of these plain objects (``VisionTransformer.pos_encoding``; not a module, so the
module tree and the state dict stay timm's), and its table stays the model's ``pos_embed``, passed in.
Each method answers positions to add to the tokens, or None when there is nothing to add:

- :class:`LearnedPositions` (``pos_embed='learn'``): the table, resampled to another grid as timm does
  (antialiased ``resample_abs_pos_embed``; bicubic as timm's ``VisionTransformer``, or bilinear as its
  ``NaFlexVit`` SigLIP 2 models: the model's ``pos_embed_interp_mode``);
- :class:`SincosPositions` (``pos_embed='sincos'``): the fixed 2-D sine-cosine table, computed for any grid;
- :class:`NoPositions` (``pos_embed='none'``): nothing.

Rotary position (``rope_type``) adds nothing to the tokens: it acts on queries and keys inside attention.
It is the model's ``rope`` module (models/rotary.py, timm's name), which gives per-token rotary terms from
the same coordinates (a grid, packed ``coord``, padded slots); the block runner hands them to attention
beside ``attn_mask`` / ``segments``. A family may use both (PE: a learned table and rotary terms).

No ``from __future__ import annotations``: TorchScript compiles the object the model holds (``for_grid``
and ``for_prefix`` run in the scripted image forward; the NaFlex methods are left out of TorchScript).
"""

from typing import Protocol

import torch
from timm.layers import resample_abs_pos_embed

from ..choices import POS_EMBED_INTERP_MODES
from .layers import sincos_2d_pos_embed


class PositionEncoding(Protocol):
    """What the model asks of its position encoding (see the module's docstring)."""

    def for_grid(
        self, table: torch.Tensor | None, height: int, width: int, table_grid: tuple[int, int], like: torch.Tensor
    ) -> torch.Tensor | None:
        """(1, table prefix + height * width, D) positions of an image's patch grid (``like``: device, dtype)."""
        ...

    def for_prefix(self, table: torch.Tensor | None) -> torch.Tensor | None:
        """(k, D) positions of the prefix tokens that have rows in the table."""
        ...

    def for_tokens(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        image: torch.Tensor,
        grids: list[tuple[int, int]],
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        """(T, D) positions of packed patch tokens: token t at (row, column) ``coord[t]`` of image ``image[t]``,
        whose grid is ``grids[image[t]]``."""
        ...

    def for_slots(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        valid: torch.Tensor,
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        """(B, N, D) positions of every slot of padded NaFlex patches, with shapes that do not depend on
        the data (the export path): each image's grid is its largest valid coordinate + 1."""
        ...


@torch.fx.wrap
def _resampled(
    table: torch.Tensor, height: int, width: int, table_grid: tuple[int, int], num_prefix_tokens: int, mode: str
) -> torch.Tensor:
    """The learned table resampled to a (height, width) patch grid by ``mode``, antialiased (timm's resampling;
    its ``NaFlexVit`` resizes with ``align_corners=False``, what ``interpolate`` does for None).

    A wrapped function: FX tracing records one call (the grid's size is data there)."""
    return resample_abs_pos_embed(
        table,
        new_size=[height, width],
        old_size=[table_grid[0], table_grid[1]],
        num_prefix_tokens=num_prefix_tokens,
        interpolation=mode,
        antialias=True,
    )


@torch.fx.wrap
def _sincos(like: torch.Tensor, height: int, width: int, dim: int, num_prefix_tokens: int) -> torch.Tensor:
    """The fixed sincos table for a (height, width) patch grid, on ``like``'s device and dtype."""
    return sincos_2d_pos_embed((height, width), dim, num_prefix_tokens, device=like.device).to(like.dtype)


def _sincos_at(coord: torch.Tensor, longest: int, dim: int) -> torch.Tensor:
    """Sincos positions of (..., 2) coordinates: the table's row half depends on the row only, the column
    half on the column only, so two one-axis tables of ``longest`` entries give any grid's values."""
    rows = sincos_2d_pos_embed((longest, 1), dim, device=coord.device)[0, :, : dim // 2]
    cols = sincos_2d_pos_embed((1, longest), dim, device=coord.device)[0, :, dim // 2 :]
    return torch.cat([rows[coord[..., 0]], cols[coord[..., 1]]], dim=-1)


def _cubic_aa(x: torch.Tensor) -> torch.Tensor:
    """The antialiasing bicubic filter of torch's ``interpolate(..., antialias=True)`` (Keys, a = -0.5)."""
    x = x.abs()
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def _linear_aa(x: torch.Tensor) -> torch.Tensor:
    """The antialiasing bilinear (triangle) filter of torch's ``interpolate(..., antialias=True)``."""
    return (1.0 - x.abs()).clamp(min=0.0)


def resize_weights(position: torch.Tensor, out_size: torch.Tensor, in_size: int, mode: str = "bicubic") -> torch.Tensor:
    """(..., in_size) weights with which antialiased resizing by ``mode`` (bicubic or bilinear) from ``in_size``
    to ``out_size`` samples output ``position`` (tensors of equal shape): ``resample_abs_pos_embed``'s kernel,
    computed from the data so that shapes stay fixed for export."""
    scale = in_size / out_size.double()
    stretch = scale.clamp(min=1.0)
    center = (position.double() + 0.5) * scale
    taps = torch.arange(in_size, dtype=torch.float64, device=position.device)
    kernel = _cubic_aa if mode == "bicubic" else _linear_aa
    weights = kernel((taps + 0.5 - center[..., None]) / stretch[..., None])
    return (weights / weights.sum(dim=-1, keepdim=True)).float()


class LearnedPositions:
    """The learned table (``pos_embed``): ``prefix`` rows for prefix tokens, then the patch grid's rows, resampled
    to another grid by ``mode`` ('bicubic' or 'bilinear', antialiased)."""

    def __init__(self, prefix: int, mode: str = "bicubic") -> None:
        self.prefix = prefix
        self.mode = mode

    def for_grid(
        self, table: torch.Tensor | None, height: int, width: int, table_grid: tuple[int, int], like: torch.Tensor
    ) -> torch.Tensor | None:
        if table is None:
            return None
        return _resampled(table, height, width, table_grid, self.prefix, self.mode)

    def for_prefix(self, table: torch.Tensor | None) -> torch.Tensor | None:
        if table is None or self.prefix == 0:
            return None
        return table[0, : self.prefix]

    @torch.jit.unused
    def for_tokens(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        image: torch.Tensor,
        grids: list[tuple[int, int]],
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        """The table's patch rows resampled once per distinct grid of the batch, then gathered."""
        if table is None:
            return None
        patch_rows = table[:, self.prefix :]
        tables, offsets, start = [], {}, 0
        for height, width in sorted(set(grids)):
            tables.append(_resampled(patch_rows, height, width, table_grid, 0, self.mode)[0])
            offsets[(height, width)] = start
            start += height * width
        grid = torch.tensor(grids, device=coord.device)
        image_offset = torch.tensor([offsets[g] for g in grids], device=coord.device)
        index = image_offset[image] + coord[:, 0] * grid[image, 1] + coord[:, 1]
        return torch.cat(tables).index_select(0, index).to(like.dtype)

    @torch.jit.unused
    def for_slots(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        valid: torch.Tensor,
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        """Each slot's resampling weights over the table's grid, from its coordinate and its image's grid."""
        if table is None:
            return None
        coord = coord * valid[..., None]
        grid = coord.amax(dim=1, keepdim=True).expand_as(coord) + 1  # (B, N, 2) each slot's image grid
        rows = resize_weights(coord[..., 0], grid[..., 0], table_grid[0], self.mode)  # (B, N, H0)
        cols = resize_weights(coord[..., 1], grid[..., 1], table_grid[1], self.mode)  # (B, N, W0)
        weights = (rows[..., :, None] * cols[..., None, :]).flatten(2)  # (B, N, H0*W0)
        return (weights @ table[0, self.prefix :].float()).to(like.dtype)


class SincosPositions:
    """The fixed 2-D sine-cosine table of width ``dim`` (its ``prefix`` rows are zeros: nothing to add)."""

    def __init__(self, prefix: int, dim: int) -> None:
        self.prefix = prefix
        self.dim = dim

    def for_grid(
        self, table: torch.Tensor | None, height: int, width: int, table_grid: tuple[int, int], like: torch.Tensor
    ) -> torch.Tensor | None:
        return _sincos(like, height, width, self.dim, self.prefix)

    def for_prefix(self, table: torch.Tensor | None) -> torch.Tensor | None:
        return None

    @torch.jit.unused
    def for_tokens(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        image: torch.Tensor,
        grids: list[tuple[int, int]],
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        return _sincos_at(coord, max(max(g) for g in grids), self.dim).to(like.dtype)

    @torch.jit.unused
    def for_slots(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        valid: torch.Tensor,
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        return _sincos_at(coord * valid[..., None], coord.shape[1], self.dim).to(like.dtype)


class NoPositions:
    """No position encoding (``pos_embed='none'``)."""

    def for_grid(
        self, table: torch.Tensor | None, height: int, width: int, table_grid: tuple[int, int], like: torch.Tensor
    ) -> torch.Tensor | None:
        return None

    def for_prefix(self, table: torch.Tensor | None) -> torch.Tensor | None:
        return None

    @torch.jit.unused
    def for_tokens(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        image: torch.Tensor,
        grids: list[tuple[int, int]],
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        return None

    @torch.jit.unused
    def for_slots(
        self,
        table: torch.Tensor | None,
        coord: torch.Tensor,
        valid: torch.Tensor,
        table_grid: tuple[int, int],
        like: torch.Tensor,
    ) -> torch.Tensor | None:
        return None


def position_encoding(pos_embed: str, prefix: int, dim: int, interp_mode: str = "bicubic") -> PositionEncoding:
    """The piece for the model's ``pos_embed`` option ('learn', 'sincos', 'none' or ''); ``prefix``: the
    table's rows for prefix tokens (none with ``no_embed_class``); ``interp_mode``: how a learned table is
    resampled to another grid (the model's ``pos_embed_interp_mode``)."""
    if interp_mode not in POS_EMBED_INTERP_MODES:
        raise ValueError(f"pos_embed_interp_mode must be one of {POS_EMBED_INTERP_MODES}, got {interp_mode!r}")
    if pos_embed == "learn":
        return LearnedPositions(prefix, interp_mode)
    if pos_embed == "sincos":
        return SincosPositions(prefix, dim)
    return NoPositions()
