"""Packed sequences: the tokens of several images back to back in one sequence, attention per image.

A NaFlex batch pads every image to one length. Packed, the valid tokens of all images form one
sequence of shape (1, L, D): linear layers, norms and MLPs run on real tokens only, and attention
runs once per image over that image's contiguous run (block-diagonal, never across images).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch

#: ``attention(q, k, v, attn_mask)`` over (1, heads, n, head_dim) tensors -> (1, heads, n, head_dim)
AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


class PackedSegments:
    """Where each image's tokens lie in a packed sequence: contiguous runs of ``lengths`` tokens.

    Passed where a block takes its ``attn_mask``; the attention layer then attends within each run.
    ``masks`` (optional, one per image) are the images' own attention masks, SDPA's convention.
    """

    def __init__(self, lengths: Sequence[int], masks: Optional[List[Optional[torch.Tensor]]] = None) -> None:
        self.lengths = list(lengths)
        self.masks = masks

    def __len__(self) -> int:
        return len(self.lengths)

    @torch.compiler.disable  # per-image lengths are data: compiled code around it stays shape-generic
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        """(1, heads, L, head_dim) q, k, v -> (1, heads, L, head_dim), each run attending to itself only.

        One attention call per image on CPU is the fastest exact choice: the same kernel the image
        alone would run, on a view of the packed tensors (nested-tensor SDPA falls back to a much
        slower path on CPU, and a dense block-diagonal mask would cost the square of the whole
        sequence).
        """
        runs = zip(q.split(self.lengths, dim=2), k.split(self.lengths, dim=2), v.split(self.lengths, dim=2))
        masks = self.masks if self.masks is not None else [None] * len(self.lengths)
        return torch.cat([attention(qi, ki, vi, mask) for (qi, ki, vi), mask in zip(runs, masks)], dim=2)
