"""The process group, and the model as one process, DDP or FSDP2 trains it.

``torchrun`` sets ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``; without them the run is one plain process. FSDP2
shards every block (a :class:`~timm_vitscratch.models.block.TransformerBlock`, whatever its family) with
``fully_shard``, then the root, so that one block's parameters are gathered at a time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.block import TransformerBlock

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Processes:
    """Where this process stands: its rank among ``world_size`` and the device it computes on."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def start(device: str | None = None, fsdp: bool = False) -> Processes:
    """Join ``torchrun``'s process group (nccl on CUDA, gloo on CPU), or stay one process (in a group of one with
    ``fsdp``: FSDP2's device mesh needs a process group even then)."""
    name = device or ("cuda" if torch.cuda.is_available() else "cpu")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    place = torch.device(name, local_rank) if name == "cuda" else torch.device(name)
    if place.type == "cuda":
        torch.cuda.set_device(place)
    backend = "nccl" if place.type == "cuda" else "gloo"
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend)
    elif fsdp and not dist.is_initialized():
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    rank = dist.get_rank() if dist.is_initialized() else 0
    return Processes(rank, world_size, place)


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks, found by class, outermost first (a block holds no block)."""
    return [module for module in model.modules() if isinstance(module, TransformerBlock)]


def shard(model: nn.Module, amp_dtype: str = "float32", cpu_offload: bool = False) -> nn.Module:
    """FSDP2: ``fully_shard`` on every block, then on the root (which keeps the embeddings, norm and head).

    With ``amp_dtype`` bfloat16 (or float16) the blocks compute in it and gradients are reduced in float32; the
    sharded parameters and the optimizer stay float32. ``cpu_offload`` keeps shards, gradients and the optimizer
    step on the CPU.
    """
    dtype = DTYPES[amp_dtype]
    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()  # the plain policy: no offloading
    for block in blocks(model):
        fully_shard(block, mp_policy=policy, offload_policy=offload)
    fully_shard(model, mp_policy=policy, offload_policy=offload)
    return model


def wrap(model: nn.Module, processes: Processes, fsdp: bool, amp_dtype: str, cpu_offload: bool) -> nn.Module:
    """The model to train: sharded (``fsdp``), in DDP (several processes) or as it is (one)."""
    if fsdp:
        if amp_dtype == "float16":
            raise ValueError("--fsdp computes in bfloat16 or float32: float16 needs a sharded gradient scaler")
        return shard(model, amp_dtype, cpu_offload)
    if cpu_offload:
        raise ValueError("--fsdp-cpu-offload needs --fsdp")
    if processes.distributed:
        device_ids = [processes.device.index] if processes.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)
    return model


def mean_over_ranks(value: torch.Tensor) -> float:
    """The mean of a scalar over all ranks (each rank's local mean over equal batches: the global mean)."""
    value = value.detach().float().clone()
    if dist.is_initialized():
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value.item())


def gather_objects(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order (one process: ``[value]``)."""
    if not dist.is_initialized():
        return [value]
    found: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(found, value)
    return found


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
