"""The model a run trains: built whole (one process, DDP), or on ``meta`` and sharded before it has storage (FSDP).

Under ``--fsdp`` with several ranks every rank builds the model on ``meta``, shards it with ``fully_shard`` and gives
storage to its own shards only (``to_empty``): no accelerator ever holds the whole model. The values come from
rank 0, which builds the model as the one-process run does (the same seed, so the same random draws, or the
pretrained weights) in host memory and broadcasts it one tensor at a time; each rank keeps its shard of each.
Rank 0's host memory holds the full fp32 model once, at the start (4 bytes per parameter): the price of
random draws equal to the one-process run's, whatever the world size.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

import timm
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor

from ..models.build import build_on_meta
from . import parallel
from .ema import ShardedEma


@dataclass
class Built:
    """The model to train (wrapped) and the one it wraps, the ``pretrained_cfg`` of the weights it starts from, and
    the average of its weights (``--model-ema``)."""

    wrapped: nn.Module
    model: nn.Module
    pretrained_cfg: dict[str, Any]
    ema: ShardedEma | None = None


def _cfg(model: nn.Module) -> dict[str, Any]:
    cfg = getattr(model, "pretrained_cfg", None)
    return dict(cfg) if isinstance(cfg, dict) else {}


def _whole(name: str, pretrained: bool, kwargs: dict[str, Any], seed: int, grad_checkpointing: bool) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights on every rank, and in every world size
    model = timm.create_model(name, pretrained=pretrained, **kwargs)
    if grad_checkpointing:
        model.set_grad_checkpointing(True)  # type: ignore[operator]
    return model


def _send_from_rank0(model: nn.Module, source: nn.Module | None, device: torch.device) -> None:
    """Rank 0's values into every rank's tensors, one whole tensor on the device at a time: a sharded parameter
    keeps its own shard of it (FSDP's own split, ``distribute_tensor`` with no further communication), a buffer
    (unsharded, and not always in the state dict: rotary periods, sincos tables) all of it."""
    reference = dict(chain(source.named_parameters(), source.named_buffers())) if source is not None else {}
    for name, tensor in chain(model.named_parameters(), model.named_buffers()):
        if source is not None:
            whole = reference[name].detach().to(device)
        else:
            whole = torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
        dist.broadcast(whole, src=0)
        if isinstance(tensor, DTensor):
            shard = distribute_tensor(whole, tensor.device_mesh, tensor.placements, src_data_rank=None)
            tensor.to_local().copy_(shard.to_local())
        else:
            tensor.copy_(whole)


def _sync_rng() -> None:
    """Rank 0 drew the initial weights; the others continue from the same generator state, as under DDP."""
    state = torch.get_rng_state()
    dist.broadcast(state, src=0)
    torch.set_rng_state(state)


@torch.no_grad()
def _sharded_from_rank0(name: str, pretrained: bool, kwargs: dict[str, Any], args: Any, processes: Any) -> Built:
    whole = _whole(name, pretrained, kwargs, args.seed, False) if processes.main else None
    cfgs = [_cfg(whole) if whole is not None else None]
    dist.broadcast_object_list(cfgs, src=0)
    model = build_on_meta(name, pretrained=False, **kwargs)
    model.pretrained_cfg = cfgs[0]  # type: ignore[assignment]  # what the data config reads, as rank 0's
    if args.grad_checkpointing:
        model.set_grad_checkpointing(True)  # type: ignore[operator]
    wrapped = parallel.wrap(model, processes, True, args.amp_dtype, args.fsdp_cpu_offload)
    wrapped.to_empty(device=processes.device)  # storage for this rank's shards (and the buffers) only
    _send_from_rank0(wrapped, whole, processes.device)
    del whole
    _sync_rng()
    ema = None
    if args.model_ema:

        def sharded_copy() -> nn.Module:
            copy = parallel.shard(
                build_on_meta(name, pretrained=False, **kwargs), args.amp_dtype, args.fsdp_cpu_offload
            )
            return copy.to_empty(device=processes.device)

        ema = ShardedEma.sharded_like(wrapped, sharded_copy, args.model_ema_decay)
    return Built(wrapped, model, cfgs[0] or {}, ema)


def build(args: Any, model_kwargs: dict[str, Any], processes: parallel.Processes) -> Built:
    """The model of ``args`` on ``processes.device``: sharded from ``meta`` under ``--fsdp`` with several ranks,
    else built whole on every rank (the same seed: the same weights) and wrapped."""
    if args.fsdp and processes.distributed:
        return _sharded_from_rank0(args.model, args.pretrained, model_kwargs, args, processes)
    model = _whole(args.model, args.pretrained, model_kwargs, args.seed, args.grad_checkpointing)
    if not args.fsdp_cpu_offload:
        model.to(processes.device)
    ema = ShardedEma.copy_of(model, args.model_ema_decay) if args.model_ema else None
    wrapped = parallel.wrap(model, processes, args.fsdp, args.amp_dtype, args.fsdp_cpu_offload)
    if ema is not None and args.fsdp:  # sharded as the model is, so that each rank averages its own shards
        parallel.shard(ema.module, args.amp_dtype, args.fsdp_cpu_offload)
    return Built(wrapped, model, _cfg(model), ema)
