"""Peak memory of one training step, measured in a fresh process per model.

Run by ``run.py`` as ``python benchmarks/step_memory.py CONTESTANT VARIANT BATCH DEVICE`` (one JSON line
on stdout). A process of its own gives every model the same clean start.

* CUDA: ``torch.cuda.max_memory_allocated`` over the second step (the first creates the
  optimizer state), i.e. everything the caching allocator handed out.
* CPU, two numbers:
  - ``torch_peak_bytes``: bytes of tensor storage alive at the step's peak, from the profiler's
    record of every allocation and free the CPU allocator made during the step (timeline summed
    in order), plus what was alive when the step began (parameters, the previous step's
    gradients, buffers, optimizer state).
    It counts exactly what the model's code asks torch for, independent of malloc behaviour.
  - ``rss_peak_bytes``: the process's peak resident set during the step (Linux ``VmHWM``, reset
    just before the step through ``/proc/self/clear_refs``). Everything the OS sees, including
    library buffers and memory malloc keeps after a free; the same harness for every model.
"""

from __future__ import annotations

import gc
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contestants import build
from timing import make_optimizer, training_step


def _storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    seen = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _live_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    for param in model.parameters():
        yield param
        if param.grad is not None:  # the previous step's gradients, freed by zero_grad in this one
            yield param.grad
    yield from model.buffers()
    for state in optimizer.state.values():
        yield from (v for v in state.values() if isinstance(v, torch.Tensor))


def _rss_high_water_mark() -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) * 1024 if match else None


def _reset_rss_high_water_mark() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _profiled_peak(step) -> int:
    """Highest net bytes the CPU allocator had handed out at any moment of ``step``."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    # the profiler's raw event list (a private attribute) holds one "[memory]" event per
    # allocation (+bytes) and free (-bytes); FunctionEvents only keep per-op aggregates
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def step_peaks(
    step: Callable[[], None], model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> dict[str, int | None]:
    """The peaks of one more ``step`` (after the one that created the optimizer state): CUDA's peak allocation on
    a GPU; on the CPU the resting tensor bytes, the allocator's peak above them, and the process's peak RSS."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return {"cuda_peak_bytes": torch.cuda.max_memory_allocated(device)}
    gc.collect()
    resting = _storage_bytes(_live_tensors(model, optimizer))
    result: dict[str, int | None] = {"resting_bytes": resting, "torch_peak_bytes": resting + _profiled_peak(step)}
    gc.collect()
    if _reset_rss_high_water_mark():
        step()
        result["rss_peak_bytes"] = _rss_high_water_mark()
    return result


def measure(contestant: str, variant: str, batch: int, device_name: str) -> dict[str, object]:
    device = torch.device(device_name)
    torch.manual_seed(0)
    model = build(contestant, variant).to(device).train()
    optimizer = make_optimizer(model)
    images = torch.randn(batch, 3, 224, 224, device=device)
    labels = torch.randint(0, 1000, (batch,), device=device)
    step = training_step(model, optimizer, images, labels)
    step()  # creates the optimizer state
    result: dict[str, object] = {"contestant": contestant, "variant": variant, "batch": batch}
    return {**result, **step_peaks(step, model, optimizer, device)}


if __name__ == "__main__":
    contestant_arg, variant_arg, batch_arg, device_arg = sys.argv[1:5]
    torch.set_num_threads(int(sys.argv[5]) if len(sys.argv) > 5 else torch.get_num_threads())
    print(json.dumps(measure(contestant_arg, variant_arg, int(batch_arg), device_arg)))
