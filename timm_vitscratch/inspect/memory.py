"""Memory estimates: weights by dtype, training state per parameter, and measured activations.

Activations are the tensors autograd saves for backward during one training forward, summed
through ``torch.autograd.graph.saved_tensors_hooks`` under mixed precision
(``torch.autocast('cpu', torch.bfloat16)``: 2-byte activations, as fp16 autocast on a GPU stores).
Parameters and the half-precision copies autocast makes of them are not activations (they are
in the per-parameter training state) and are left out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import timm
import torch

from ..models import TransformerBlock, VisionTransformer
from .model_ref import check_scratch_model

BYTES_PER_PARAM = OrderedDict(fp32=4, fp16=2, bf16=2)

#: Mixed-precision AdamW keeps, per parameter (bytes): the upper-end accounting of ≈ 20 bytes.
TRAINING_BYTES_PER_PARAM = OrderedDict(
    [
        ("fp16 weights", 2),
        ("fp16 gradients", 2),
        ("fp32 master weights", 4),
        ("fp32 master gradients", 4),
        ("AdamW first moment (fp32)", 4),
        ("AdamW second moment (fp32)", 4),
    ]
)

#: Measure the whole model directly when one training forward of the batch is at most this many MACs.
DIRECT_MEASURE_MAX_MACS = 5e9
#: the most activation bytes (by :func:`measuring_bytes_bound`) one measuring forward may hold; past it, small
#: copies are measured and the bytes fitted over the patch count
MEASURE_MAX_BYTES = 128 << 20
#: the square patch grids the small copies are measured at (three fix the quadratic, the last checks it)
FIT_GRIDS = (1, 2, 3, 4)


def weight_bytes(param_count: int) -> dict[str, int]:
    """Bytes of the weights stored in fp32, fp16 and bf16."""
    return OrderedDict((dtype, param_count * size) for dtype, size in BYTES_PER_PARAM.items())


def _reaches(node: Any, targets: set[int], memo: dict[int, tuple[Any, bool]]) -> bool:
    """Whether the autograd graph below ``node`` reaches one of the ``targets`` (leaf tensors' ids).

    ``memo`` holds earlier answers with their nodes (kept alive, so no id is reused meanwhile).
    """
    stack, visited, found = [node], {}, False
    while stack and not found:
        current = stack.pop()
        if current is None or id(current) in visited:
            continue
        visited[id(current)] = current
        if id(current) in memo:
            found = memo[id(current)][1]
            if found:
                break
            continue  # already known not to reach: skip its subgraph
        variable = getattr(current, "variable", None)
        found = variable is not None and id(variable) in targets
        stack.extend(next_node for next_node, _ in current.next_functions)
    memo[id(node)] = (node, found)
    return found


def measure_activation_bytes(model: VisionTransformer, batch: int, autocast: bool = True) -> int:
    """Bytes autograd saves for backward in one training forward of ``batch`` random images.

    Runs on real CPU tensors. Each storage counts once; parameters, and tensors computed from
    parameters alone (autocast's half-precision weight copies), are excluded.
    """
    in_chans, (height, width) = model.patch_embed.in_chans, model.patch_embed.img_size
    images = torch.randn(batch, in_chans, height, width, requires_grad=True)
    param_storages = {p.untyped_storage()._cdata for p in model.parameters()}
    inputs = {id(images)}
    memo: dict[int, tuple[Any, bool]] = {}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        # kept detached (the same storage): an output its own node saves, packed as itself, would hold its
        # grad_fn, which holds it, a cycle through C++ that no garbage collection frees
        storage = tensor.untyped_storage()
        if storage._cdata in param_storages or storage._cdata in saved:
            return tensor.detach()
        derived_from_weights_only = tensor.grad_fn is not None and not _reaches(tensor.grad_fn, inputs, memo)
        saved[storage._cdata] = 0 if derived_from_weights_only else storage.nbytes()
        return tensor.detach()

    was_training = model.training
    model.train()
    try:
        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
        ):
            output = model(images)
        del output
    finally:
        model.train(was_training)
        # the graph's saved tensors hold ``pack`` (and through it ``memo``), and ``memo`` holds graph nodes: the
        # same kind of cycle, which would keep every measured model alive
        memo.clear()
    return sum(saved.values())


def _scratch_model(model_name: str, **kwargs: Any) -> VisionTransformer:
    return check_scratch_model(timm.create_model(model_name, **kwargs), model_name)


def _one_and_two_block_models(model_name: str, init: bool = True, **kwargs: Any) -> Iterator[VisionTransformer]:
    """Copies of the model with 1 and 2 blocks; ``init=False``: weights left uninitialised (what autograd saves
    depends on shapes only), which skips timm's weight init, the slow part of building a copy."""
    for depth in (1, 2):
        if init:
            yield _scratch_model(model_name, **{**kwargs, "depth": depth})
        else:
            with torch.device("meta"):
                model = _scratch_model(model_name, **{**kwargs, "depth": depth})
            yield model.to_empty(device="cpu")


def measuring_bytes_bound(model: VisionTransformer, depth: int, batch: int) -> int:
    """A generous upper estimate of the activation bytes one measuring forward of ``model`` (on ``meta``) cut to
    ``depth`` blocks holds at ``batch``: several times what a block saves per token (norm inputs, q/k/v, MLP
    input and hidden, in fp32 and bf16) and per attention entry (the eager path's scores and probabilities)."""
    first = model.blocks[0]
    assert isinstance(
        first, TransformerBlock
    )  # nn.Sequential types its items as Module; a VisionTransformer's are Blocks
    embed = model.patch_embed
    tokens = embed.num_patches + model.num_prefix_tokens
    dim, heads = model.embed_dim, first.attn.num_heads
    hidden = first.mlp_shape[0] * first.mlp_shape[1] // 2  # a SwiGLU's gate and value count as one more half
    pixels = embed.in_chans * embed.img_size[0] * embed.img_size[1]
    block = tokens * (48 * dim + 8 * hidden + 16 * heads) + 16 * heads * tokens * tokens
    return batch * (8 * pixels + 16 * tokens * dim + depth * block)


def _quadratic(points: list[tuple[int, int]]) -> Callable[[int], Fraction]:
    """The quadratic through three ``(x, y)`` points (Lagrange form, exact)."""

    def value(x: int) -> Fraction:
        total = Fraction(0)
        for i, (xi, yi) in enumerate(points):
            term = Fraction(yi)
            for j, (xj, _) in enumerate(points):
                if j != i:
                    term *= Fraction(x - xj, xi - xj)
            total += term
        return total

    return value


def _fitted_over_patches(
    model_name: str, kwargs: dict[str, Any], reference: VisionTransformer, measured_batch: int
) -> tuple[Callable[[int], Fraction], Callable[[int], Fraction]] | None:
    """The bytes of the 1- and 2-block copies as functions of the patch count, measured at the small square grids
    :data:`FIT_GRIDS` (None when the last grid does not lie on the quadratic through the others).

    Every saved tensor is a fixed number of bytes per token, per pixel (the stem's input) or per attention entry
    (the eager path's scores): a polynomial of degree two in the number of patches, fitted exactly here.
    """
    patch = reference.patch_embed.patch_size
    points: list[tuple[int, int, int]] = []
    for grid in FIT_GRIDS:
        size = (grid * patch[0], grid * patch[1])
        one, two = (
            measure_activation_bytes(m, measured_batch)
            for m in _one_and_two_block_models(model_name, init=False, **{**kwargs, "img_size": size})
        )
        points.append((grid * grid, one, two))
    one_block = _quadratic([(x, one) for x, one, _ in points[:3]])
    two_blocks = _quadratic([(x, two) for x, _, two in points[:3]])
    x, one, two = points[-1]
    if one_block(x) != one or two_blocks(x) != two:
        return None
    return one_block, two_blocks


def estimate_activation_bytes(model_name: str, batch: int, **kwargs: Any) -> dict[str, Any]:
    """Training activations of ``timm.create_model(model_name, **kwargs)`` for ``batch`` images.

    Small models (one batch forward at most ``DIRECT_MEASURE_MAX_MACS``) are measured whole at the
    full batch. Larger ones are measured on real copies of the same architecture with 1 and 2 blocks
    at batch 1 (batch 2 for larger batches: at batch 1 some saved tensors are views that keep a
    bigger buffer alive, so bytes per image are exactly constant only from batch 2 on). Every block
    saves the same tensors and every saved tensor has a batch axis, so
    activations = (one-block + (depth - 1) x (two-block - one-block)) x batch / measured batch.
    Where even the 2-block copy would hold more than ``MEASURE_MAX_BYTES`` (by
    :func:`measuring_bytes_bound`: a large image), the copies are measured at patch grids of 1x1 to 4x4 and
    the bytes fitted exactly as a quadratic in the patch count: memory and time stay small whatever the size.

    Returns ``{"bytes": int or None, "method": str}`` (None, and why, when the fit does not hold).
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    from .flops import forward_macs  # local: keeps this module importable alone

    with torch.device("meta"):
        reference = _scratch_model(model_name, **kwargs)
    depth = len(reference.blocks)
    if (
        forward_macs(reference)["total"] * batch <= DIRECT_MEASURE_MAX_MACS
        and measuring_bytes_bound(reference, depth, batch) <= MEASURE_MAX_BYTES
    ):
        model = _scratch_model(model_name, **kwargs)
        return dict(
            bytes=measure_activation_bytes(model, batch),
            method=(f"measured: one training forward of the whole model at batch {batch}"),
        )
    measured_batch = min(batch, 2)
    if measuring_bytes_bound(reference, 2, measured_batch) <= MEASURE_MAX_BYTES:
        one, two = (
            measure_activation_bytes(m, measured_batch) for m in _one_and_two_block_models(model_name, **kwargs)
        )
        how = f"measured on real 1- and 2-block copies at batch {measured_batch}"
    else:
        grid = reference.patch_embed.grid_size
        patches = grid[0] * grid[1]
        fits = _fitted_over_patches(model_name, kwargs, reference, measured_batch)
        if fits is None:
            return dict(
                bytes=None,
                method=(
                    f"not measured: a {grid[0]}x{grid[1]} patch grid is too large to measure in bounded memory, "
                    f"and the bytes of smaller copies do not follow the patch count exactly (random token "
                    f"dropping?), so they cannot be extrapolated"
                ),
            )
        one, two = (round(fit(patches)) for fit in fits)
        how = (
            f"measured on real 1- and 2-block copies at batch {measured_batch} and patch grids 1x1 to "
            f"{FIT_GRIDS[-1]}x{FIT_GRIDS[-1]} (the {grid[0]}x{grid[1]} grid is too large to measure in bounded "
            f"memory), fitted exactly as a quadratic in the patch count, checked at the last grid"
        )
    per_block = two - one
    total = (one + (depth - 1) * per_block) * batch // measured_batch
    return dict(
        bytes=total,
        method=(
            f"{how} (each block {per_block // measured_batch:,} bytes per image), extrapolated to {depth} blocks "
            f"and batch {batch}"
        ),
    )


def training_bytes(param_count: int) -> dict[str, int]:
    """Per-parameter training state of mixed-precision AdamW, in bytes, by item."""
    return OrderedDict((item, param_count * size) for item, size in TRAINING_BYTES_PER_PARAM.items())
