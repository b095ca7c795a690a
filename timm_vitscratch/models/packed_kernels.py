"""Kernels for a packed sequence's attention, one call over every image instead of one per image length.

A packed sequence (models/packing.py) attends block-diagonally: each image's run to itself. The kernels,
chosen at run time by :func:`choose` from the device, the dtype and what is installed:

- ``"segments"``: one SDPA call per run of equal lengths (:func:`packing.attend`): every device and dtype,
  per-image masks, attention dropout and the eager attention (``attn_impl='eager'``) included.
- ``"flex"``: PyTorch's FlexAttention with a block mask of the images' runs, compiled on first use.
  Everywhere FlexAttention runs; on CPU inference only (it has no backward there).
- ``"varlen"``: ``torch.nn.attention.varlen.varlen_attn`` (CUDA flash kernels, float16 / bfloat16).
- ``"flash"``: flash-attn's ``flash_attn_varlen_func`` (CUDA, float16 / bfloat16), when installed.
- ``"auto"`` (the default): on CUDA varlen, then flash, then flex; on CPU segments, the fastest there.

Each computes softmax(q k^T * scale) v per image, the function the padded path computes, in another
order of summation. Per-image masks, attention dropout in training and the eager attention (whose
``attn_drop`` sees the materialised matrix) always take the segments kernel, whatever was chosen.
"""

from __future__ import annotations

import importlib.util
import weakref
from collections.abc import Callable
from functools import cache
from itertools import accumulate
from typing import Any

import torch

from .packing import AttentionFn, PackedSegments, segment_attention

#: the kernels ``set_packed_attention`` takes
PACKED_ATTENTION = ("auto", "segments", "flex", "varlen", "flash")
HALF = (torch.float16, torch.bfloat16)

# what one forward's segments need for a kernel, built at the first block and read by the others
_offsets: weakref.WeakKeyDictionary[PackedSegments, tuple[torch.Tensor, int]] = weakref.WeakKeyDictionary()
_block_masks: weakref.WeakKeyDictionary[PackedSegments, Any] = weakref.WeakKeyDictionary()


def check_packed_attention(kernel: str) -> str:
    if kernel not in PACKED_ATTENTION:
        raise ValueError(f"packed attention must be one of {PACKED_ATTENTION}, got {kernel!r}")
    return kernel


@cache
def _varlen() -> Callable[..., Any] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@cache
def _flash() -> Callable[..., Any] | None:
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:  # installed, but built for another torch or CUDA
        return None
    return flash_attn_varlen_func


@cache
def _flex() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """(flex_attention, create_block_mask), or None where FlexAttention is missing."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    return flex_attention, create_block_mask


@cache
def _compiled_flex(device_type: str) -> Callable[..., Any]:
    """FlexAttention compiled (eager FlexAttention materialises every score). On CUDA the second sequence length
    compiles shape-generic code; on CPU each length compiles its own, as inductor's CPU template does not
    build for symbolic lengths."""
    flex = _flex()
    assert flex is not None
    return torch.compile(flex[0], dynamic=False if device_type == "cpu" else None)


def available(kernel: str, q: torch.Tensor, needs_grad: bool = False) -> bool:
    """Whether ``kernel`` runs on queries like ``q`` (device, dtype), with a backward when ``needs_grad``."""
    if kernel == "segments":
        return True
    if kernel == "flex":
        return _flex() is not None and (q.is_cuda or not needs_grad)
    if not (q.is_cuda and q.dtype in HALF):
        return False
    return (_varlen() if kernel == "varlen" else _flash()) is not None


def choose(requested: str, q: torch.Tensor, segments: PackedSegments, fused: bool, needs_grad: bool) -> str:
    """The kernel a packed attention runs: ``requested`` (one of :data:`PACKED_ATTENTION`) on ``q``'s device
    and dtype. ``fused``: the layer's attention is SDPA without dropout, so any kernel computes what it does."""
    if not fused or segments.masks is not None or requested == "segments":
        return "segments"
    if requested == "auto":
        order = ("varlen", "flash", "flex") if q.is_cuda else ()
        return next((kernel for kernel in order if available(kernel, q, needs_grad)), "segments")
    if not available(requested, q, needs_grad):
        raise RuntimeError(
            f"packed attention {requested!r} does not run on {q.device.type} {q.dtype}"
            + (" with gradients" if needs_grad else "")
            + " here: choose 'auto' or 'segments'"
        )
    return requested


def offsets(segments: PackedSegments, device: torch.device) -> tuple[torch.Tensor, int]:
    """(images + 1,) int32 cumulative lengths (cu_seqlens) on ``device`` and the longest run, built once."""
    known = _offsets.get(segments)
    if known is None or known[0].device != device:
        cumulative = torch.tensor([0, *accumulate(segments.lengths)], dtype=torch.int32)
        known = (cumulative.to(device, non_blocking=True), max(segments.lengths))
        _offsets[segments] = known
    return known


def block_mask(segments: PackedSegments, device: torch.device) -> Any:
    """FlexAttention's block mask of the runs: token i attends to token j when both are one image's."""
    known = _block_masks.get(segments)
    if known is None:
        _, create_block_mask = _flex()  # type: ignore[misc]
        length = sum(segments.lengths)
        image = torch.repeat_interleave(
            torch.arange(len(segments.lengths), device=device),
            torch.tensor(segments.lengths).to(device, non_blocking=True),
            output_size=length,
        )

        def same_image(batch: torch.Tensor, head: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
            return image[query] == image[key]

        known = create_block_mask(same_image, None, None, length, length, device=device)
        _block_masks[segments] = known
    return known


def _tokens_major(t: torch.Tensor) -> torch.Tensor:
    """(1, heads, L, head_dim) -> (L, heads, head_dim), a view of the projection's token-major layout."""
    return t[0].transpose(0, 1)


def attend_with(
    kernel: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: PackedSegments, scale: float
) -> torch.Tensor:
    """(1, heads, L, head_dim) -> (1, heads, L, head_dim) through one of the one-call kernels."""
    if kernel == "flex":
        flex_attention = _compiled_flex(q.device.type)
        return flex_attention(q, k, v, block_mask=block_mask(segments, q.device), scale=scale)
    cumulative, longest = offsets(segments, q.device)
    function = _varlen() if kernel == "varlen" else _flash()
    assert function is not None
    q, k, v = _tokens_major(q), _tokens_major(k), _tokens_major(v)
    if kernel == "varlen":
        out = function(q, k, v, cumulative, cumulative, longest, longest, scale=scale)
    else:
        out = function(q, k, v, cumulative, cumulative, longest, longest, softmax_scale=scale)
    return out.transpose(0, 1)[None]


@torch.compiler.disable  # per-image lengths are data: compiled code around it stays shape-generic
def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    segments: PackedSegments,
    attention: AttentionFn,
    scale: float,
    fused: bool,
) -> torch.Tensor:
    """A packed sequence's attention (1, heads, L, head_dim) -> (1, heads, L, head_dim), each run to itself,
    through the kernel :func:`choose` picks for ``segments.kernel``; ``attention`` is the layer's own, which
    the segments kernel calls per run."""
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    kernel = choose(segments.kernel, q, segments, fused, needs_grad)
    if kernel == "segments":
        return segment_attention(q, k, v, segments, attention)
    return attend_with(kernel, q, k, v, segments, scale)
