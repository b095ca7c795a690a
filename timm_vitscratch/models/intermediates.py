"""timm's intermediate-feature API: which blocks were asked for, and the forms timm gives the results in.

``VisionTransformer.forward_intermediates`` runs the blocks (images or a NaFlex batch) and hands the
kept outputs to :func:`assemble`. Plain data and functions: this module knows no model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch


def take_indices(num_blocks: int, indices: int | list[int] | None) -> tuple[list[int], int]:
    """timm's index convention: None = all blocks, int n = the last n, a list = those (negative ok)."""
    if indices is None:
        indices = num_blocks
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ValueError(f"indices={indices} must be between 1 and the number of blocks ({num_blocks})")
        taken = list(range(num_blocks - indices, num_blocks))
    else:
        taken = []
        for index in indices:
            if not -num_blocks <= index < num_blocks:
                raise ValueError(f"block index {index} is out of range for {num_blocks} blocks")
            taken.append(index % num_blocks)
    return taken, max(taken)


class Request(NamedTuple):
    """What ``forward_intermediates`` was asked for (timm's arguments, the indices resolved)."""

    indices: list[int]
    max_index: int
    return_prefix_tokens: bool
    norm: bool
    stop_early: bool
    output_fmt: str
    intermediates_only: bool
    output_dict: bool

    @property
    def depth(self) -> int:
        """How many blocks run: up to the last index asked for with ``stop_early``, else all (-1)."""
        return self.max_index + 1 if self.stop_early else -1


def to_nchw(tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(B, H*W, D) patch tokens -> (B, D, H, W) maps of a (H, W) patch grid."""
    return tokens.reshape(tokens.shape[0], grid[0], grid[1], -1).permute(0, 3, 1, 2).contiguous()


def assemble(
    request: Request,
    intermediates: list[torch.Tensor],
    prefix_tokens: list[torch.Tensor],
    final_features: Callable[[], torch.Tensor],
    extra: dict[str, Any] | None = None,
) -> Any:
    """timm's result forms: ``(final, intermediates)``, the intermediates alone, or a dict
    (``'image_intermediates'``, ``'image_intermediates_prefix'``, ``'image_features'``, plus ``extra``);
    with ``return_prefix_tokens`` each intermediate is paired with its prefix tokens."""
    with_prefix = request.return_prefix_tokens and bool(prefix_tokens) and prefix_tokens[0].shape[1] > 0
    if request.output_dict:
        result: dict[str, Any] = {"image_intermediates": intermediates, **(extra or {})}
        if with_prefix:
            result["image_intermediates_prefix"] = prefix_tokens
        if not request.intermediates_only:
            result["image_features"] = final_features()
        return result
    taken: list[Any] = list(zip(intermediates, prefix_tokens, strict=True)) if with_prefix else intermediates
    return taken if request.intermediates_only else (final_features(), taken)
