"""Memory estimates: weights by dtype, training state per parameter, and measured activations.

Activations are the tensors autograd saves for backward during one training forward, summed
through ``torch.autograd.graph.saved_tensors_hooks`` under mixed precision
(``torch.autocast('cpu', torch.bfloat16)``: 2-byte activations, as fp16 autocast on a GPU stores).
Parameters and the half-precision copies autocast makes of them are not activations (they are
in the per-parameter training state) and are left out.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import timm
import torch

from ..models import VisionTransformer
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
        storage = tensor.untyped_storage()
        if storage._cdata in param_storages or storage._cdata in saved:
            return tensor
        derived_from_weights_only = tensor.grad_fn is not None and not _reaches(tensor.grad_fn, inputs, memo)
        saved[storage._cdata] = 0 if derived_from_weights_only else storage.nbytes()
        return tensor

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
    return sum(saved.values())


def _scratch_model(model_name: str, **kwargs: Any) -> VisionTransformer:
    return check_scratch_model(timm.create_model(model_name, **kwargs), model_name)


def _one_and_two_block_models(model_name: str, **kwargs: Any) -> Iterator[VisionTransformer]:
    for depth in (1, 2):
        yield _scratch_model(model_name, **{**kwargs, "depth": depth})


def estimate_activation_bytes(model_name: str, batch: int, **kwargs: Any) -> dict[str, Any]:
    """Training activations of ``timm.create_model(model_name, **kwargs)`` for ``batch`` images.

    Small models (one batch forward at most ``DIRECT_MEASURE_MAX_MACS``) are measured whole at the
    full batch. Larger ones are measured on real copies of the same architecture with 1 and 2 blocks
    at batch 1 (batch 2 for larger batches: at batch 1 some saved tensors are views that keep a
    bigger buffer alive, so bytes per image are exactly constant only from batch 2 on). Every block
    saves the same tensors and every saved tensor has a batch axis, so
    activations = (one-block + (depth - 1) x (two-block - one-block)) x batch / measured batch.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    from .flops import forward_macs  # local: keeps this module importable alone

    with torch.device("meta"):
        reference = _scratch_model(model_name, **kwargs)
    depth = len(reference.blocks)
    if forward_macs(reference)["total"] * batch <= DIRECT_MEASURE_MAX_MACS:
        model = _scratch_model(model_name, **kwargs)
        return dict(
            bytes=measure_activation_bytes(model, batch),
            method=(f"measured: one training forward of the whole model at batch {batch}"),
        )
    measured_batch = min(batch, 2)
    one, two = (measure_activation_bytes(m, measured_batch) for m in _one_and_two_block_models(model_name, **kwargs))
    per_block = two - one
    total = (one + (depth - 1) * per_block) * batch // measured_batch
    return dict(
        bytes=total,
        method=(
            f"measured on real 1- and 2-block copies at batch {measured_batch} "
            f"(each block {per_block // measured_batch:,} bytes per image), extrapolated to {depth} blocks "
            f"and batch {batch}"
        ),
    )


def training_bytes(param_count: int) -> dict[str, int]:
    """Per-parameter training state of mixed-precision AdamW, in bytes, by item."""
    return OrderedDict((item, param_count * size) for item, size in TRAINING_BYTES_PER_PARAM.items())
