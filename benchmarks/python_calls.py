"""Python calls of one forward, ours against timm's model of the same architecture (no timing: a count).

    python benchmarks/python_calls.py            # the table docs/performance.md shows
    python benchmarks/python_calls.py --top 15   # and where the calls of each model go

A small batch on a GPU waits for the CPU to issue its kernels, so what a forward costs there is set by how
many Python functions (``call`` events of ``sys.setprofile``) and builtins (``c_call`` events) it runs, not by
its arithmetic. Each model runs one eval-mode forward of one 224 x 224 image under ``torch.no_grad()`` after a
warm-up, on the CPU; the count does not depend on the machine's speed or load, only on the code.
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import timm
import torch

import timm_vitscratch  # noqa: F401  (registers our models)

#: (ours, timm's model of the same architecture)
PAIRS = (
    ("scratch_vit_b16", "vit_base_patch16_224"),
    ("scratch_dinov3_b16", "vit_base_patch16_dinov3"),
)


@dataclass(frozen=True)
class CallCount:
    """Python function calls and builtin calls of one forward, and the most frequent of them by name."""

    python: int
    builtin: int
    by_name: collections.Counter[str]

    @property
    def total(self) -> int:
        return self.python + self.builtin


def count_forward_calls(model: torch.nn.Module, image: torch.Tensor) -> CallCount:
    """The calls of one ``model(image)`` in eval mode without autograd (after one forward as a warm-up)."""
    names: collections.Counter[str] = collections.Counter()
    events = {"call": 0, "c_call": 0}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            events["call"] += 1
            names[f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_name}"] += 1
        elif event == "c_call":
            events["c_call"] += 1
            names[f"builtin {getattr(arg, '__qualname__', arg)}"] += 1

    model.eval()
    with torch.no_grad():
        model(image)
        sys.setprofile(profile)
        try:
            model(image)
        finally:
            sys.setprofile(None)
    return CallCount(events["call"], events["c_call"], names)


def measure(pairs: Sequence[tuple[str, str]] = PAIRS) -> list[tuple[str, str, CallCount, CallCount]]:
    image = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    rows = []
    for ours, theirs in pairs:
        torch.manual_seed(0)
        rows.append(
            (
                ours,
                theirs,
                count_forward_calls(timm.create_model(ours), image),
                count_forward_calls(timm.create_model(theirs), image),
            )
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=0, help="also list each model's N most frequent calls")
    args = parser.parse_args(argv)
    print(f"{'ours':20} {'calls':>6} {'timm':26} {'calls':>6}  ours/timm")
    for ours, theirs, mine, reference in measure():
        ratio = mine.total / reference.total
        print(f"{ours:20} {mine.total:6d} {theirs:26} {reference.total:6d}  {ratio:.3f}")
        for label, count in (("ours", mine), ("timm", reference)) if args.top else ():
            print(f"  {label}: {count.python} Python, {count.builtin} builtin")
            for name, times in count.by_name.most_common(args.top):
                print(f"    {times:5d} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
