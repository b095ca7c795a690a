"""Packed sequences: the tokens of several images back to back in one sequence, attention per image.

A NaFlex batch pads every image to one length. Packed, the valid tokens of all images form one
sequence of shape (1, L, D): linear layers, norms and MLPs run on real tokens only, and attention
runs per image over that image's contiguous run (block-diagonal, never across images). A block and
its attention take the runs as ``segments`` (a :class:`PackedSegments`), beside timm's ``attn_mask``;
models/packed_kernels.py chooses the kernel that attends, :func:`segment_attention` being the one that runs everywhere.
"""

# no ``from __future__ import annotations``: TorchScript reads PackedSegments' field types at run time
from collections.abc import Callable, Sequence
from itertools import groupby

import torch

#: ``attention(q, k, v, attn_mask)`` over (batch, heads, n, head_dim) tensors -> (batch, heads, n, head_dim)
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


class PackedSegments:
    """Where each image's tokens lie in a packed sequence: contiguous runs of ``lengths`` tokens.

    ``groups``: neighbouring runs of one length, as (length, count) pairs, which attend in one batched
    call. ``masks`` (optional, one per image) are the images' own attention masks, SDPA's convention.
    ``kernel``: the packed-attention kernel asked for (models/packed_kernels.py), ``"auto"`` by default.
    A plain class with typed fields: TorchScript types a block's ``segments`` argument with it (always
    None there), and torch.compile passes it to :func:`attend` without guarding on the lengths.
    """

    def __init__(
        self,
        lengths: list[int],
        groups: list[tuple[int, int]],
        masks: list[torch.Tensor] | None,
        kernel: str = "auto",
    ) -> None:
        self.lengths = lengths
        self.groups = groups
        self.masks = masks
        self.kernel = kernel


def segments_of(
    lengths: Sequence[int], masks: list[torch.Tensor] | None = None, kernel: str = "auto"
) -> PackedSegments:
    """The segments of runs of ``lengths`` tokens (each image's mask, if any, in ``masks``), attending through
    the packed-attention ``kernel`` (models/packed_kernels.py)."""
    groups = [(length, len(list(run))) for length, run in groupby(lengths)]
    return PackedSegments(list(lengths), groups, masks, kernel)


def segment_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: PackedSegments, attention: AttentionFn
) -> torch.Tensor:
    """(1, heads, L, head_dim) q, k, v -> (1, heads, L, head_dim), each run attending to itself only.

    Neighbouring images of equal length are one batch of the attention call (views, no copies);
    the others one call each: the same kernel each image alone would run. On CPU this is the
    fastest exact choice: nested-tensor SDPA falls back to a far slower path there, and a dense
    block-diagonal mask would cost the square of the whole sequence. The outputs are written
    token-major, the layout the output projection reads without another copy.
    """
    heads, head_dim = q.shape[1], q.shape[3]
    sizes = [length * count for length, count in segments.groups]

    # split (its backward is one concatenation), then per group a (count, heads, length, head_dim) view
    def parts(t: torch.Tensor) -> list[torch.Tensor]:
        t = t.squeeze(0)
        return [t] if len(sizes) == 1 else list(t.split(sizes, dim=1))

    runs = [
        [
            part.unflatten(1, (count, length)).transpose(0, 1)
            for part, (length, count) in zip(parts(t), segments.groups, strict=True)
        ]
        for t in (q, k, v)
    ]
    outputs, image = [], 0
    for (length, count), q_run, k_run, v_run in zip(segments.groups, *runs, strict=True):
        mask = None if segments.masks is None else torch.cat(segments.masks[image : image + count])
        out = attention(q_run, k_run, v_run, mask)
        outputs.append(out.transpose(1, 2).reshape(count * length, heads, head_dim))
        image += count
    tokens = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return tokens.unsqueeze(0).transpose(1, 2)
