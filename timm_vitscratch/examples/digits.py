"""End to end on scikit-learn's digits: 1,797 grey 8x8 images that ship inside scikit-learn.

1. Train a small ``scratch_vit_ti16`` (shrunk for 8x8 inputs: 2x2 patches, 4 blocks of width 64)
   on all ten digits with timm's task, optimizer and scheduler; report validation top-1.
2. Pretrain the same model on digits 0-4, save it as a model directory (``model.safetensors`` +
   timm's ``config.json``), share it and load it back with ``timm.create_model(<name>,
   pretrained=True)``, give it a new head and fine-tune it on digits 5-9.
3. Train the model from scratch on digits 5-9 for the same number of steps, and compare.

Run it with ``vitscratch demo`` or ``python -m timm_vitscratch.examples.digits`` (``--fast`` for a
few-second smoke run).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import timm
import torch
from timm.task import ClassificationTask
from torch import nn

from ..hub_format import save_model_directory
from ..training import create_train_state, evaluate_top1, tensor_batches, train_step

MODEL = "scratch_vit_ti16"
ALL_DIGITS = tuple(range(10))
PRETRAIN_DIGITS = (0, 1, 2, 3, 4)
FINETUNE_DIGITS = (5, 6, 7, 8, 9)


@dataclass(frozen=True)
class Recipe:
    """The model arguments and training budget of one run of the example."""

    model_args: Dict[str, Any]
    epochs: int  # all ten digits
    pretrain_epochs: int  # digits 0-4
    finetune_steps: int  # digits 5-9, for both the pretrained and the from-scratch model
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.05
    smoothing: float = 0.1
    drop_args: Dict[str, float] = field(default_factory=lambda: dict(drop_rate=0.1, drop_path_rate=0.1))


_DIGITS_VIT = dict(img_size=8, patch_size=2, in_chans=1, embed_dim=64, depth=4, num_heads=4)
FULL = Recipe(model_args=_DIGITS_VIT, epochs=20, pretrain_epochs=15, finetune_steps=60)
#: A smoke run for the test suite: one narrow block, a handful of steps.
FAST = Recipe(model_args=dict(_DIGITS_VIT, embed_dim=32, depth=1, num_heads=2), epochs=1, pretrain_epochs=1,
              finetune_steps=5, drop_args={})


@dataclass
class Split:
    """Train and validation tensors for a subset of the digits, labels renumbered from 0."""

    digits: Sequence[int]
    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor


@dataclass
class Row:
    task: str
    init: str
    steps: int
    top1: float
    seconds: float


def load_split(digits: Sequence[int], val_fraction: float = 0.2, seed: int = 0) -> Split:
    """Digits restricted to ``digits`` (label ``digits[i]`` becomes ``i``), from one stratified split.

    Pixels (0..16) are scaled to [-1, 1], which is the model's pretrained_cfg normalisation
    (mean 0.5, std 0.5), so timm's data config describes this data too.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("the digits example needs scikit-learn: pip install 'timm_vitscratch[examples]'") from None
    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = (images - 0.5) / 0.5
    labels = torch.tensor(data.target)
    train_index, val_index = train_test_split(
        list(range(len(labels))), test_size=val_fraction, stratify=data.target, random_state=seed)
    train_index, val_index = torch.tensor(train_index), torch.tensor(val_index)
    digit_tensor = torch.tensor(list(digits))

    def subset(index: torch.Tensor):
        keep = index[torch.isin(labels[index], digit_tensor)]
        renumbered = (labels[keep].unsqueeze(1) == digit_tensor).float().argmax(dim=1)
        return images[keep], renumbered

    return Split(digits, *subset(train_index), *subset(val_index))


#: grey images scaled to [-1, 1]: one channel, mean 0.5, std 0.5 (saved into config.json with the weights)
DIGITS_DATA_CFG = dict(mean=(0.5,), std=(0.5,), crop_pct=1.0, interpolation="bilinear")


def create_digits_model(recipe: Recipe, num_classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return timm.create_model(MODEL, num_classes=num_classes, pretrained_cfg_overlay=DIGITS_DATA_CFG,
                             **recipe.model_args, **recipe.drop_args)


def fit(model: nn.Module, split: Split, steps: int, recipe: Recipe, desc: str, progress: bool,
        seed: int) -> Tuple[float, float]:
    """Train ``model`` for ``steps`` updates on ``split`` with timm's components.

    Returns validation top-1 (percent) and the seconds it took.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    task = ClassificationTask(model, criterion_kwargs=dict(smoothing=recipe.smoothing), verbose=False)
    state = create_train_state(model, steps, lr=recipe.lr, weight_decay=recipe.weight_decay,
                               warmup_updates=steps // 20)
    generator = torch.Generator().manual_seed(seed)
    bar = tqdm(total=steps, desc=desc, disable=not progress, leave=True, dynamic_ncols=True, mininterval=0.5)
    with bar:
        while state.updates < steps:
            for images, labels in tensor_batches(split.train_images, split.train_labels, recipe.batch_size,
                                                 generator):
                loss = train_step(task, state, images, labels)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
                if state.updates == steps:
                    break
    top1 = evaluate_top1(model, tensor_batches(split.val_images, split.val_labels, 256))
    return top1, time.perf_counter() - start


def share(directory: Path) -> str:
    """The name timm loads a saved model directory by.

    This is the seam for the Hub: here the directory itself (``local-dir:``); with ``vitscratch
    push`` it becomes an upload to a Hub server and an ``hf-hub:ORG/NAME`` id.
    """
    return f"local-dir:{directory}"


def _steps_per_epoch(split: Split, batch_size: int) -> int:
    return -(-len(split.train_labels) // batch_size)


def run(recipe: Recipe, out_dir: Path, progress: bool = True, seed: int = 0,
        log: Callable[[str], None] = print) -> List[Row]:
    """The whole example; returns the rows of the accuracy table."""
    rows = []
    full = load_split(ALL_DIGITS, seed=seed)
    steps = recipe.epochs * _steps_per_epoch(full, recipe.batch_size)
    model = create_digits_model(recipe, 10, seed)
    log(f"{MODEL} for 8x8 digits: {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{len(full.train_labels)} training / {len(full.val_labels)} validation images")
    rows.append(Row("digits 0-9", "random", steps, *fit(model, full, steps, recipe, "digits 0-9", progress, seed)))

    first, second = load_split(PRETRAIN_DIGITS, seed=seed), load_split(FINETUNE_DIGITS, seed=seed)
    model = create_digits_model(recipe, len(PRETRAIN_DIGITS), seed)
    steps = recipe.pretrain_epochs * _steps_per_epoch(first, recipe.batch_size)
    rows.append(Row("digits 0-4", "random", steps, *fit(model, first, steps, recipe, "pretrain 0-4", progress, seed)))

    model_dir = save_model_directory(model, out_dir / "digits04",
                               source=dict(example="digits", digits=list(PRETRAIN_DIGITS)))
    name = share(model_dir)
    pretrained = timm.create_model(name, pretrained=True, **recipe.drop_args)
    log(f"saved {model_dir} and loaded it back as timm.create_model({name!r}, pretrained=True)")
    torch.manual_seed(seed)
    pretrained.reset_classifier(len(FINETUNE_DIGITS))  # a new head for the new task
    steps = recipe.finetune_steps
    rows.append(Row("digits 5-9", "pretrained on 0-4, new head", steps,
                    *fit(pretrained, second, steps, recipe, "fine-tune 5-9", progress, seed)))

    scratch = create_digits_model(recipe, len(FINETUNE_DIGITS), seed)
    rows.append(Row("digits 5-9", "random", steps, *fit(scratch, second, steps, recipe, "scratch 5-9", progress, seed)))
    return rows


def format_table(rows: Sequence[Row]) -> str:
    header = ("task", "init", "steps", "val top-1", "time")
    cells = [(r.task, r.init, f"{r.steps}", f"{r.top1:.1f} %", f"{r.seconds:.1f} s") for r in rows]
    widths = [max(len(str(line[i])) for line in [header, *cells]) for i in range(len(header))]
    align = ("<", "<", ">", ">", ">")

    def line(values) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, a, w in zip(values, align, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(c) for c in cells)])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m timm_vitscratch.examples.digits",
                                     description=__doc__.split("\n")[0])
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The example's flags (shared with ``vitscratch demo``)."""
    parser.add_argument("--fast", action="store_true", help="a smoke run: tiny model, a few steps")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the pretrained model directory goes (default: a temporary directory)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: these small matrices gain little from more)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run_from_args(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    recipe = FAST if args.fast else FULL
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vitscratch-digits-") as tmp:
        out_dir = args.out if args.out is not None else Path(tmp)
        rows = run(recipe, out_dir, progress=not args.no_progress, seed=args.seed)
    print()
    print(format_table(rows))
    print(f"\ntotal {time.perf_counter() - start:.1f} s on {args.threads} thread(s)"
          f" of {os.cpu_count()} CPU core(s)")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    return run_from_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
