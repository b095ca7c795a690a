"""Interleaved timing: contestants run in turn (A B C, B C A, ...) and are summarised by medians.

On a machine shared with other work, load comes and goes; running every contestant once per
round means each round sees roughly the same load for all of them, and the median of the
per-round ratios cancels most of what is left.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

#: A task runs its workload once and returns named durations in seconds (usually just "time").
Task = Callable[[], dict[str, float]]

#: What ``timed`` reads: wall-clock seconds, or the CPU seconds this process used. On a machine shared
#: with other work, CPU time leaves out the time other processes hold the cores (with one torch
#: thread; several threads would count their spin-waiting too).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = CLOCKS["wall"]


def use_clock(name: str) -> None:
    """Time throughput samples by ``name``, one of ``CLOCKS``."""
    global _clock
    _clock = CLOCKS[name]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, calls: int = 1) -> dict[str, float]:
    """Run ``fn`` ``calls`` times and return the seconds per call."""
    synchronize(device)
    start = _clock()
    for _ in range(calls):
        fn()
    synchronize(device)
    return {"time": (_clock() - start) / calls}


def calls_for(fn: Callable[[], object], device: torch.device, min_time: float) -> int:
    """How many calls make one sample last at least ``min_time`` (small batches are too quick to time once)."""
    once = timed(fn, device)["time"]
    return max(1, int(min_time / max(once, 1e-9)) + 1) if once < min_time else 1


def interleave(tasks: dict[str, Task], repeats: int, warmup: int = 1) -> dict[str, dict[str, list[float]]]:
    """Run every task ``warmup`` times, then ``repeats`` rounds, rotating the order each round.

    Returns, per task, each named duration's list of samples (one per round).
    """
    names = list(tasks)
    for _ in range(warmup):
        for name in names:
            tasks[name]()
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for round_index in range(repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            for key, value in tasks[name]().items():
                samples[name].setdefault(key, []).append(value)
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of numerator/denominator, both taken in the same round."""
    return statistics.median(n / d for n, d in zip(numerator, denominator, strict=False))


def inference_task(model: nn.Module, batch: torch.Tensor, calls: int, autocast_dtype: torch.dtype | None) -> Task:
    device = batch.device

    def forward() -> None:
        cast = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        with torch.inference_mode(), cast:
            model(batch)

    return lambda: timed(forward, device, calls)


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> Callable[[], None]:
    """One step of plain supervised training: forward, cross-entropy, backward, optimizer step."""

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW, the optimizer timm's train.py recipes for ViT use; identical for every contestant."""
    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)


def forward_flops(model: nn.Module, image: torch.Tensor) -> int:
    """FLOPs of one forward pass (2 per multiply-add, matmuls/convs/attention), counted by torch."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(image)
    return counter.get_total_flops()


def matmul_task(size: int, device: torch.device, calls: int = 1) -> Task:
    """The machine's fp32 ceiling: one large square matmul, reported as FLOP/s."""
    left = torch.randn(size, size, device=device)
    right = torch.randn(size, size, device=device)
    return lambda: timed(lambda: torch.mm(left, right), device, calls)
