"""Where ``x`` goes in one ``VisionTransformer.forward``: the package files it passes through, in order.

``python -m tests.support.forward_walk`` prints, for a classic ViT and a DINOv3 model (one block each, eval):
the files entered (each switch from one package file to another, returns included), how many of those
entries go back to a file already left, and how many Python calls one forward makes (every Python function,
torch's included). A profiler (``sys.setprofile``) records the innermost frame of the package at each call
and return; frames outside the package (torch's ``Module.__call__``) do not count as a switch.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import timm
import torch

import timm_vitscratch

PACKAGE = str(Path(timm_vitscratch.__file__).parent)

#: the models walked: a classic ViT and DINOv3 (rotary position, register tokens, LayerScale), one block each
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "classic ViT": ("scratch_vit_ti16", dict(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4)),
    "DINOv3": ("scratch_dinov3_s16", dict(img_size=32, depth=1)),
}


@dataclass(frozen=True)
class Walk:
    files: list[str]  # the package files entered, in order (consecutive repeats collapsed)
    calls: int  # Python function calls in one forward

    @property
    def returns(self) -> int:
        """Entries into a file the walk had already left."""
        return len(self.files) - len(set(self.files))

    def line(self) -> str:
        return " > ".join(self.files)


def walk(model: torch.nn.Module, x: torch.Tensor) -> Walk:
    """The walk of one ``model(x)`` (a warm-up call first, so one-time work does not count)."""
    with torch.no_grad():
        model(x)
    files: list[str] = []
    stack: list[str | None] = []
    calls = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1
            name = frame.f_code.co_filename
            stack.append(Path(name).stem if name.startswith(PACKAGE) else None)
        elif event == "return" and stack:
            stack.pop()
        else:
            return
        current = next((stem for stem in reversed(stack) if stem is not None), None)
        if current is not None and (not files or files[-1] != current):
            files.append(current)

    with torch.no_grad():
        sys.setprofile(profile)
        try:
            model(x)
        finally:
            sys.setprofile(None)
    return Walk(files, calls)


def main() -> None:
    for label, (name, kwargs) in MODELS.items():
        model = timm.create_model(name, **kwargs).eval()
        torch.manual_seed(0)
        result = walk(model, torch.randn(1, 3, 32, 32))
        print(f"{label}: {len(result.files)} files entered, {result.returns} returns, {result.calls} Python calls")
        print(f"  {result.line()}")


if __name__ == "__main__":
    main()
