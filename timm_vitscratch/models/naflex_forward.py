"""The model's NaFlex path: a NaFlex batch read through the gate, embedded, and run through the blocks packed or
on timm's padded layout, decided in one place (:meth:`NaFlexForward._run_naflex`).

:class:`NaFlexForward` is a base of ``VisionTransformer``: these are the model's own methods, kept beside each
other here (models/vision_transformer.py holds the image path). ``forward``, ``forward_features`` and
``forward_intermediates`` each hand a NaFlex call to ``_run_naflex`` and shape what it returns; the packing
arithmetic is models/naflex.py's, the checks of the batch gate/naflex_batch.py's.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from ..choices import MAX_PATCHES
from ..gate.naflex_batch import NaFlexBatch, NaFlexSpec, read_naflex_batch
from . import naflex
from .block import TransformerBlock
from .layers import PatchDropout
from .naflex_embeds import NaFlexEmbeds
from .packed_kernels import check_packed_attention
from .packing import PackedSegments, segments_of
from .patch_embed import PatchEmbed
from .position import PositionEncoding
from .rotary import RotaryPosition, with_prefix_rows


class NaFlexRun(NamedTuple):
    """A NaFlex batch after the blocks: the batch, the last output, the outputs kept, and where the tokens lie
    (``placement.unpack`` gives them in the batch's padded layout, zeros at padding)."""

    batch: NaFlexBatch
    tokens: torch.Tensor
    kept: list[torch.Tensor]
    placement: naflex.Placement


class NaFlexForward(nn.Module):
    """The NaFlex methods of ``VisionTransformer`` (what they read of the model is declared below)."""

    # the model's, set by VisionTransformer.__init__
    patch_embed: PatchEmbed
    embeds: NaFlexEmbeds | None
    pos_embed: torch.Tensor | None
    pos_encoding: PositionEncoding
    rope: RotaryPosition | None
    patch_drop: nn.Module | None
    norm_pre: nn.Module
    pos_drop: nn.Module
    blocks: nn.Sequential
    in_chans: int
    num_prefix_tokens: int
    patchify_channels_last: bool
    naflex_packed: bool
    #: the kernel of packed attention (models/packed_kernels.py): ``set_packed_attention``
    packed_attention: str = "auto"

    def _prefix_tokens(self) -> torch.Tensor | None:
        raise NotImplementedError

    def _run_blocks(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        keep: list[int] | None = None,
        norm_kept: bool = False,
        depth: int = -1,
        last_tokens: int = 0,
        rope: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        raise NotImplementedError

    @torch.jit.ignore
    def naflex_spec(self) -> NaFlexSpec:
        """The numbers a NaFlex batch is checked against (gate/naflex_batch.py): patch size, channels, flat
        layout, prefix tokens, heads, the position grid and its resample bound, dtype and device."""
        weight, first = self.patch_embed.proj.weight, self.blocks[0]
        assert isinstance(first, TransformerBlock)  # nn.Sequential types its items as Module
        (ph, pw), (gh, gw) = self.patch_embed.patch_size, self.patch_embed.grid_size
        return NaFlexSpec(
            patch_size=(int(ph), int(pw)),
            in_chans=self.in_chans,
            channels_last=self.patchify_channels_last,
            prefix_tokens=self.num_prefix_tokens,
            heads=first.attn.num_heads,
            pos_grid=(int(gh), int(gw)),
            max_grid_cells=MAX_PATCHES,
            dtype=weight.dtype,
            device=weight.device,
        )

    @torch.jit.ignore
    def set_packed_attention(self, kernel: str = "auto") -> None:
        """The kernel packed NaFlex batches attend with: ``'auto'`` (by device, dtype and what is installed),
        ``'segments'`` (one SDPA call per run of equal lengths), ``'flex'`` (FlexAttention, a block mask),
        ``'varlen'`` (``torch.nn.attention.varlen``, CUDA half precision) or ``'flash'`` (flash-attn's varlen
        functions); see models/packed_kernels.py and docs/native_resolution.md."""
        self.packed_attention = check_packed_attention(kernel)

    @torch.compiler.disable  # reads the data (checks, dict entries): runs eagerly under torch.compile
    def _read_naflex(
        self,
        x: Any,
        attn_mask: torch.Tensor | None,
        patch_valid: torch.Tensor | None,
        patch_coord: torch.Tensor | None,
    ) -> NaFlexBatch:
        """A NaFlex batch from a dict (its entries win, as in timm) or from tensors given as arguments, checked
        by the gate against ``naflex_spec()``."""
        return read_naflex_batch(self.naflex_spec(), x, attn_mask, patch_valid, patch_coord)

    def _run_naflex(
        self,
        x: Any,
        attn_mask: torch.Tensor | None,
        patch_valid: torch.Tensor | None,
        patch_coord: torch.Tensor | None,
        keep: list[int] | None = None,
        norm_kept: bool = False,
        depth: int = -1,
    ) -> NaFlexRun:
        """A NaFlex call through the blocks: the batch read and checked, then packed (``naflex_packed``, the
        default) or on timm's padded layout, keys masked: with ``set_naflex_packed(False)``, and always while
        exporting (its shapes do not depend on the data). ``keep`` / ``norm_kept`` / ``depth``: as
        ``_run_blocks``'s."""
        batch = self._read_naflex(x, attn_mask, patch_valid, patch_coord)
        if self.naflex_packed and not torch.compiler.is_exporting():
            packed = self._pack(batch)
            tokens, kept = self._run_blocks(
                packed.tokens, segments=packed.segments, keep=keep, norm_kept=norm_kept, depth=depth, rope=packed.rope
            )
            return NaFlexRun(batch, tokens, kept, packed)
        real = naflex.token_mask(batch.patch_valid, self.num_prefix_tokens)
        # keys only: padded queries see real keys, so no row is all -inf (no NaN)
        mask = real[:, None, None, :] if batch.attn_mask is None else batch.attn_mask
        tokens, kept = self._run_blocks(
            self._embed_padded(batch), mask, keep=keep, norm_kept=norm_kept, depth=depth, rope=self._padded_rope(batch)
        )
        return NaFlexRun(batch, tokens, kept, naflex.Padded(real))

    def _naflex_prefix(self) -> torch.Tensor | None:
        """(k, D) prefix tokens with their positions (none with ``no_embed_class``): each NaFlex image's first tokens."""
        prefix = self._prefix_tokens()
        if prefix is None:
            return None
        positions = self.pos_encoding.for_prefix(self._pos_table())
        return prefix[0] if positions is None else prefix[0] + positions

    def _pos_table(self) -> torch.Tensor | None:
        """The position table as the position encoding reads it, (1, table prefix + H * W, D) (None without one)."""
        if self.embeds is not None:
            return self.embeds.table()
        return self.pos_embed

    @torch.compiler.disable  # per-image grids and lengths are data; the blocks after it compile shape-generically
    def _pack(self, batch: NaFlexBatch) -> naflex.Packed:
        """Embed the valid patches with their positions and pack them, each image's prefix tokens first,
        into one sequence (models/naflex.py); patch dropout keeps a share of each image's patches."""
        prefix = self.num_prefix_tokens
        num_images, seq = batch.patch_valid.shape
        layout = naflex.packed_layout(batch.patch_valid, batch.patch_coord, prefix)
        patches = batch.patches.reshape(-1, batch.patches.shape[-1]).index_select(0, layout.valid_index)
        tokens = self.patch_embed.project_flat(patches, batch.patch_size, self.patchify_channels_last)
        positions = self.pos_encoding.for_tokens(
            self._pos_table(), layout.token_coord, layout.image, layout.grids, self.patch_embed.grid_size, tokens
        )
        if positions is not None:
            tokens = tokens + positions
        prefix_tokens = self._naflex_prefix()
        if prefix_tokens is not None:
            tokens = torch.cat([prefix_tokens.to(tokens.dtype).repeat(num_images, 1), tokens])
        packed = tokens.index_select(0, layout.order)[None]
        rope = None
        if self.rope is not None:
            grids = torch.tensor(layout.grids, device=layout.image.device).index_select(0, layout.image)
            rope = with_prefix_rows(self.rope.for_coords(layout.token_coord, grids), num_images * prefix)
            rope = rope.index_select(1, layout.order)
        lengths, padded_index = layout.lengths, layout.padded_index
        if self.training and isinstance(self.patch_drop, PatchDropout):
            packed, lengths, padded_index, kept = naflex.drop_patches(layout, self.patch_drop.prob, prefix, seq, packed)
            rope = None if rope is None else rope[:, kept]
        packed = self.norm_pre(self.pos_drop(packed))
        masks = None
        if batch.attn_mask is not None:
            masks = naflex.image_masks(batch.attn_mask, padded_index, lengths, prefix + seq)
        return naflex.Packed(
            packed, segments_of(lengths, masks, self.packed_attention), padded_index, num_images, prefix + seq, rope
        )

    def _padded_rope(self, batch: NaFlexBatch) -> torch.Tensor | None:
        """(2, B, 1, prefix + N, head_dim) rotary terms of every slot of the padded layout (None without RoPE):
        each image's grid is its largest valid coordinate + 1."""
        if self.rope is None:
            return None
        coord = batch.patch_coord * batch.patch_valid[..., None]
        grid = coord.amax(dim=1, keepdim=True).expand_as(coord) + 1
        return with_prefix_rows(self.rope.for_coords(coord, grid), self.num_prefix_tokens)[:, :, None]

    def _embed_padded(self, batch: NaFlexBatch) -> torch.Tensor:
        """(B, prefix + N, D) embedded tokens on timm's padded layout, every slot (shapes fixed by the batch)."""
        if self.embeds is not None:  # timm NaFlexVit's embedding module, called as timm calls it
            tokens, _ = self.embeds(batch.patches, batch.patch_coord, batch.patch_valid, patch_size=batch.patch_size)
            return self.norm_pre(tokens)
        tokens = self.patch_embed.project_flat(batch.patches, batch.patch_size, self.patchify_channels_last)
        positions = self.pos_encoding.for_slots(
            self.pos_embed, batch.patch_coord, batch.patch_valid, self.patch_embed.grid_size, tokens
        )
        if positions is not None:
            tokens = tokens + positions
        prefix = self._naflex_prefix()
        if prefix is not None:
            tokens = torch.cat([prefix.to(tokens.dtype).expand(tokens.shape[0], -1, -1), tokens], dim=1)
        return self.norm_pre(self.pos_drop(tokens))
