"""Tensors without storage: a model built on ``meta`` is given storage later, or takes a checkpoint's tensors.

``VisionTransformer.materialize`` and its ``load_state_dict`` use these; models/build.py builds
such models for a fast cold start.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import torch
from torch import nn

from ..layouts.page_release import PageReleaser
from ..tensor_writer import CPU_ALIGNMENT
from .weight_init import own_tensors


def default_device() -> torch.device:
    """The device factory functions use now (honours ``with torch.device(...)``)."""
    return torch.empty(0).device


def has_meta_tensors(module: nn.Module) -> bool:
    """True while any parameter or buffer is still on the ``meta`` device (holds no data)."""
    return any(t.is_meta for t in itertools.chain(module.parameters(), module.buffers()))


def first_device(module: nn.Module) -> torch.device | None:
    """Where the first tensor that holds data lives (None: all are on ``meta``)."""
    return next((t.device for t in itertools.chain(module.parameters(), module.buffers()) if not t.is_meta), None)


def give_storage(module: nn.Module, device: torch.device) -> tuple[list[str], set[int]]:
    """Replace every ``meta`` tensor by uninitialised storage on ``device``; return their names and ids.

    Parameters stay parameters (with their ``requires_grad``), buffers stay buffers.
    """
    names, fresh = [], set()
    for module_name, sub in module.named_modules():
        for name, tensor in own_tensors(sub):
            if not tensor.is_meta:
                continue
            storage = torch.empty_like(tensor, device=device)
            if isinstance(tensor, nn.Parameter):
                storage = nn.Parameter(storage, requires_grad=tensor.requires_grad)
            setattr(sub, name, storage)
            fresh.add(id(storage))
            names.append(f"{module_name}.{name}" if module_name else name)
    return names, fresh


def assignable(module: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` ready to be assigned: floats cast to the module's dtypes, CPU tensors aligned.

    A tensor used as it is stays where it is (memory-mapped: pages read when first used). A tensor
    that is copied (cast, or aligned) gives its file pages back once copied, so a memory-mapped
    checkpoint is never resident twice: the load peaks at the model plus one tensor.
    """
    own = dict(itertools.chain(module.named_parameters(), module.named_buffers()))
    ready = {}
    pages: PageReleaser | None = None  # read /proc/self/smaps only when a CPU tensor is copied
    for key, value in state_dict.items():
        target = own.get(key)
        source = value
        if target is not None and value.is_floating_point() and value.dtype != target.dtype:
            value = value.to(target.dtype)
        elif value.device.type == "cpu" and value.data_ptr() % CPU_ALIGNMENT:
            # a memory-mapped tensor at an odd file offset: CPU kernels take other code paths for
            # unaligned data and round differently in the last bit; an aligned copy keeps the
            # logits bit-identical to a model that copied the checkpoint into its own tensors
            value = value.clone()
        if value is not source and source.device.type == "cpu":
            pages = pages or PageReleaser(None)
            pages.release(source)
        ready[key] = value
    return ready
