"""Native resolution: how a NaFlex batch is packed so that padding costs nothing, as index arithmetic.

A NaFlex batch (checked and bounded by gate/naflex_batch.py) holds each image at its own size as a
sequence of flattened patches, padded to one length. timm's ``NaFlexVit`` computes every padded
position and masks it out. The model (``VisionTransformer``'s NaFlex methods) packs the valid patches
of all images into one sequence instead: the patch projection, norms and MLPs run on real tokens only,
attention runs per image (models/packing.py), and each image's output equals that image alone through
the model with ``dynamic_img_size=True``. The model's padded path keeps timm's padded, masked layout,
with shapes that do not depend on the data: the path ``torch.export`` and ONNX take.

This module holds the bookkeeping of both, on plain tensors: where each packed token comes from and
goes back to, patch dropout per image, each image's part of an attention mask. It knows no model.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .packing import PackedSegments


class PackedLayout(NamedTuple):
    """Where the valid patches of a NaFlex batch go in the packed sequence (read from the data).

    The packed sequence is the padded layout (prefix + N slots per image) without the padding, images
    longest first (``image_order``), so that images of equal length are neighbours and attend in one
    batched call. Rows ``[0, B * prefix)`` of the tokens it gathers from are the prefix tokens, then the
    T valid patch tokens in image-major order.
    """

    valid_index: torch.Tensor  # (T,) each valid patch's index in the batch's B * N patches
    image: torch.Tensor  # (T,) the image of each valid patch
    token_coord: torch.Tensor  # (T, 2) its (row, column)
    grids: list[tuple[int, int]]  # each image's patch grid: its largest valid coordinate + 1
    lengths: list[int]  # tokens of each image in the packed order (prefix + valid patches)
    padded_index: torch.Tensor  # (L,) position of each packed token in the padded B * (prefix + N) layout
    image_order: torch.Tensor  # (B,) the batch index of the packed sequence's first, second, ... image
    order: torch.Tensor  # (L,) the row (prefix tokens, then valid patches) each packed token is gathered from


def packed_layout(valid: torch.Tensor, coord: torch.Tensor, prefix: int) -> PackedLayout:
    """The layout of a batch's (B, N) ``valid`` patches at (B, N, 2) ``coord``, with ``prefix`` tokens per image."""
    num_images, seq = valid.shape
    valid_index = valid.reshape(-1).nonzero().flatten()  # (T,) into B*N, image-major
    image = torch.div(valid_index, seq, rounding_mode="floor")
    token_coord = coord.reshape(-1, 2).index_select(0, valid_index)
    grid = torch.zeros(num_images, 2, dtype=torch.long, device=valid.device)
    grid = grid.scatter_reduce(0, image[:, None].expand(-1, 2), token_coord, "amax", include_self=False) + 1
    counts = valid.sum(dim=1)
    image_order = torch.sort(counts, descending=True, stable=True).indices
    keep = torch.cat([valid.new_ones(num_images, prefix), valid], dim=1)
    rows, columns = keep.index_select(0, image_order).nonzero(as_tuple=True)
    padded_index = image_order[rows] * (prefix + seq) + columns
    # where each packed token comes from: rows [0, B*prefix) are prefix tokens, then the T patch tokens
    source = torch.empty(num_images, prefix + seq, dtype=torch.long, device=valid.device)
    source[:, :prefix] = torch.arange(num_images * prefix, device=valid.device).view(num_images, prefix)
    patch_source = torch.zeros(num_images * seq, dtype=torch.long, device=valid.device)
    patch_source[valid_index] = num_images * prefix + torch.arange(valid_index.numel(), device=valid.device)
    source[:, prefix:] = patch_source.view(num_images, seq)
    return PackedLayout(
        valid_index=valid_index,
        image=image,
        token_coord=token_coord,
        grids=[(int(h), int(w)) for h, w in grid.tolist()],
        lengths=(counts + prefix).index_select(0, image_order).tolist(),
        padded_index=padded_index,
        image_order=image_order,
        order=source.reshape(-1).index_select(0, padded_index),
    )


class Packed(NamedTuple):
    """A NaFlex batch packed into one sequence (1, L, D): per image its prefix tokens, then its valid patches."""

    tokens: torch.Tensor
    segments: PackedSegments
    padded_index: torch.Tensor  # (L,) position of each packed token in the padded B * (prefix + N) layout
    batch: int
    slots: int  # prefix + N: the tokens of one image in the padded layout
    rope: torch.Tensor | None = None  # (2, L, head_dim) rotary terms of each packed token, with rotary position

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(1, L, D) packed tokens -> (B, prefix + N, D) in the batch's padded layout, zeros at padding."""
        out = x.new_zeros(self.batch * self.slots, x.shape[-1]).index_copy(0, self.padded_index, x[0])
        return out.view(self.batch, self.slots, -1)


class Padded(NamedTuple):
    """timm's padded layout, every slot computed: ``real`` (B, prefix + N) marks the real tokens."""

    real: torch.Tensor

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, prefix + N, D) tokens with zeros at padding, as the packed path gives them."""
        return x.masked_fill(~self.real[..., None], 0.0)


#: where a NaFlex batch's tokens run through the blocks: packed, or on the padded layout
Placement = Packed | Padded


def drop_patches(
    layout: PackedLayout, prob: float, prefix: int, seq: int, packed: torch.Tensor
) -> tuple[torch.Tensor, list[int], torch.Tensor, torch.Tensor]:
    """Patch dropout in training: prefix tokens stay; each image keeps a random ``1 - prob`` share of its
    patches (at least one), as ``PatchDropout`` does for one image. Returns the kept tokens, the images'
    new lengths (packed order), the kept tokens' padded positions and the (L,) mask of kept packed tokens."""
    padded_index, image = layout.padded_index, layout.image
    num_images = len(layout.lengths)
    counts = torch.bincount(image, minlength=num_images)
    keep_count = (counts.double() * (1.0 - prob)).floor().long().clamp(min=1)
    shuffled = torch.argsort(image.double() + 0.5 * torch.rand(image.shape, dtype=torch.float64, device=image.device))
    rank = torch.empty_like(shuffled)
    rank[shuffled] = (
        torch.arange(shuffled.numel(), device=image.device) - (torch.cumsum(counts, 0) - counts)[image[shuffled]]
    )
    is_prefix = padded_index % (prefix + seq) < prefix
    keep = is_prefix.clone()
    patch_rows = layout.order[~is_prefix] - num_images * prefix  # packed patch slots -> token rows
    keep[~is_prefix] = (rank < keep_count[image])[patch_rows]
    owner = torch.div(padded_index, prefix + seq, rounding_mode="floor")
    lengths = torch.bincount(owner[keep], minlength=num_images)
    return packed[:, keep], lengths.index_select(0, layout.image_order).tolist(), padded_index[keep], keep


def image_masks(
    attn_mask: torch.Tensor, padded_index: torch.Tensor, lengths: list[int], slots: int
) -> list[torch.Tensor]:
    """Each image's part of a (B, 1 | heads, prefix + N, prefix + N) mask, rows and columns of its kept tokens."""
    masks = []
    for positions in padded_index.split(lengths):
        image = int(positions[0]) // slots
        local = positions - image * slots
        masks.append(attn_mask[image : image + 1][:, :, local][:, :, :, local])
    return masks


def token_mask(valid: torch.Tensor, prefix: int) -> torch.Tensor:
    """(B, prefix + N) bool: the real tokens of the padded layout (prefix tokens, then the valid patches)."""
    return torch.cat([valid.new_ones(valid.shape[0], prefix, dtype=torch.bool), valid.bool()], dim=1)
