"""timm's intermediate-feature API on images: block outputs by index, as NCHW maps or NLC tokens.

``VisionTransformer.forward_intermediates`` takes an image batch here and a NaFlex batch in
models/naflex.py; both give their results in timm's forms through :func:`assemble`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

if TYPE_CHECKING:  # type-only: vision_transformer imports this module
    from .vision_transformer import VisionTransformer


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


def assemble(
    request: Request,
    intermediates: list[torch.Tensor],
    prefix_tokens: list[torch.Tensor],
    final_features: Callable[[], torch.Tensor],
    extra: dict[str, Any] | None = None,
):
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


def forward_intermediates(
    model: VisionTransformer, x: torch.Tensor, request: Request, attn_mask: torch.Tensor | None = None
):
    """Block outputs of an image batch (B, C, H, W) at the requested indices, split into patch and prefix tokens."""
    wanted = set(request.indices)
    batch, _, height, width = x.shape
    x = model._embed(x)
    blocks = model.blocks[: request.max_index + 1] if request.stop_early else model.blocks
    kept = []
    for index, block in enumerate(blocks):
        if model.grad_checkpointing and torch.is_grad_enabled():
            x = checkpoint(block, x, attn_mask, use_reentrant=False)
        else:
            x = block(x, attn_mask)
        if index in wanted:
            kept.append(model.norm(x) if request.norm else x)
    prefix = model.num_prefix_tokens
    intermediates = [y[:, prefix:] for y in kept]
    if request.output_fmt == "NCHW":
        grid_h, grid_w = model.patch_embed.dynamic_feat_size((height, width))
        intermediates = [y.reshape(batch, grid_h, grid_w, -1).permute(0, 3, 1, 2).contiguous() for y in intermediates]
    return assemble(request, intermediates, [y[:, :prefix] for y in kept], lambda: model.norm(x))
