"""A minimal training loop on timm's own components (task, optimizer, scheduler, metrics).

timm's ``train.py`` is the full-featured way to fine-tune our models; these helpers are the few
lines a script needs around timm's pieces, shared by the digits example (``examples/digits.py``)
and the DDP check (``distributed.py``): a ``timm.task`` computes the loss, ``create_optimizer_v2``
builds the parameter groups (weight decay filtering, layer-wise LR decay through the model's
``group_matcher``), ``create_scheduler_v2`` steps the LR per update. A trained model is saved with
``timm_vitscratch.model_dir.save_model_directory``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from timm.scheduler.scheduler import Scheduler
from timm.task import TrainingTask
from timm.utils import accuracy
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class TrainState:
    """Optimizer, per-update LR scheduler and the number of updates taken so far."""

    optimizer: torch.optim.Optimizer
    scheduler: Scheduler | None
    updates: int = 0
    losses: list[float] = field(default_factory=list)


def create_train_state(
    model: nn.Module,
    total_updates: int,
    opt: str = "adamw",
    lr: float = 1e-3,
    weight_decay: float = 0.05,
    warmup_updates: int = 0,
    layer_decay: float | None = None,
    sched: str = "cosine",
    **opt_kwargs: Any,
) -> TrainState:
    """timm's optimizer and a scheduler stepped per update (one "epoch" of the schedule = one update)."""
    if total_updates < 1:
        raise ValueError(f"total_updates must be >= 1, got {total_updates}")
    optimizer = create_optimizer_v2(model, opt, lr=lr, weight_decay=weight_decay, layer_decay=layer_decay, **opt_kwargs)
    scheduler = None
    if sched:
        # epochs counted in updates keeps warmup and decay exact for short runs
        scheduler, _ = create_scheduler_v2(
            optimizer,
            sched=sched,
            num_epochs=total_updates,
            warmup_epochs=warmup_updates,
            warmup_lr=lr * 0.01,
            step_on_epochs=True,
            updates_per_epoch=1,
        )
    return TrainState(optimizer, scheduler)


def train_step(task: TrainingTask, state: TrainState, images: torch.Tensor, targets: torch.Tensor) -> float:
    """One update: the task's forward and loss, backward, optimizer step, EMA and LR schedule."""
    task.train()
    result = task(images, targets)
    result["loss"].backward()
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.updates += 1
    task.update_ema(step=state.updates)
    if state.scheduler is not None:
        state.scheduler.step(state.updates)
    loss = result["loss"].item()
    state.losses.append(loss)
    return loss


def train(
    task: TrainingTask,
    state: TrainState,
    batches: Iterable[Batch],
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Run :func:`train_step` over ``batches``; ``on_step(update, loss)`` after each (progress bars)."""
    losses = []
    for images, targets in batches:
        losses.append(train_step(task, state, images, targets))
        if on_step is not None:
            on_step(state.updates, losses[-1])
    return losses


@torch.inference_mode()
def evaluate_top1(model: nn.Module, batches: Iterable[Batch]) -> float:
    """Top-1 accuracy in percent (timm's ``accuracy``) of ``model`` in eval mode over ``batches``."""
    was_training = model.training
    model.eval()
    correct, seen = 0.0, 0
    for images, targets in batches:
        (top1,) = accuracy(model(images), targets, topk=(1,))
        correct += top1.item() * targets.shape[0]
        seen += targets.shape[0]
    model.train(was_training)
    if seen == 0:
        raise ValueError("evaluate_top1 got no batches to evaluate")
    return correct / seen


def tensor_batches(
    images: torch.Tensor, targets: torch.Tensor, batch_size: int, generator: torch.Generator | None = None
) -> Iterable[Batch]:
    """Batches of in-memory tensors, shuffled when a ``generator`` is given, the last one partial."""
    order = torch.randperm(len(images), generator=generator) if generator is not None else torch.arange(len(images))
    for start in range(0, len(images), batch_size):
        index = order[start : start + batch_size]
        yield images[index], targets[index]
