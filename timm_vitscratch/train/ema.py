"""An exponential moving average of the weights (``--model-ema``), kept as the model is: whole, or sharded.

timm's ``ModelEmaV3`` deep-copies the model it is given; a model sharded by FSDP2 refuses a deep copy, and one built
on ``meta`` has no device for its generator. So the average is a second model of the same build: a deep copy
before wrapping where the model is whole, and under ``--fsdp`` with several ranks one more model built on ``meta``
and sharded the same way, its shards given the trained model's values. Each rank then averages its own shards
(``ema = decay x ema + (1 - decay) x model`` for every floating tensor of the state dict, a copy for the others),
as ``ModelEmaV3.update`` does with no warm-up.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from itertools import chain

import torch
from torch import nn


class ShardedEma:
    """The average of ``model``'s weights in ``module`` (a model built and sharded as ``model`` is)."""

    def __init__(self, module: nn.Module, decay: float) -> None:
        self.module = module.eval().requires_grad_(False)
        self.decay = decay

    @classmethod
    def copy_of(cls, model: nn.Module, decay: float) -> ShardedEma:
        """The average of a whole (not yet wrapped) model, starting at its weights."""
        return cls(copy.deepcopy(model), decay)

    @classmethod
    def sharded_like(cls, model: nn.Module, build: Callable[[], nn.Module], decay: float) -> ShardedEma:
        """``build()`` (a model sharded as ``model``, with storage) given ``model``'s values, shard by shard."""
        ema = cls(build(), decay)
        ema.set(model)
        return ema

    @torch.no_grad()
    def set(self, model: nn.Module) -> None:
        """The average restarts at ``model``'s weights (each rank its own shards)."""
        for mine, theirs in _pairs(self.module, model):
            _local(mine).copy_(_local(theirs))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for mine, theirs in _pairs(self.module, model):
            if mine.is_floating_point():
                _local(mine).lerp_(_local(theirs), 1.0 - self.decay)
            else:
                _local(mine).copy_(_local(theirs))


def _pairs(ema: nn.Module, model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    theirs = dict(chain(model.named_parameters(), model.named_buffers()))
    return [(tensor, theirs[name]) for name, tensor in chain(ema.named_parameters(), ema.named_buffers())]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded tensor's local shard (the storage this rank holds), a plain tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor
