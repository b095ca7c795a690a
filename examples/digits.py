"""End to end on scikit-learn's digits: 1,797 grey 8x8 images that ship inside scikit-learn.

1. Train a small ``scratch_vit_ti16`` (shrunk for 8x8 inputs: 2x2 patches, 4 blocks of width 64)
   on all ten digits with timm's task, optimizer and scheduler; report validation top-1.
2. Pretrain the same model on digits 0-4 and save it as a model directory (``model.safetensors`` +
   timm's ``config.json``).
3. Push it to a local Hub-protocol server started here on 127.0.0.1 (what ``vitscratch push`` does),
   pull it back (``vitscratch pull``) and load it with ``timm.create_model("hf-hub:ORG/NAME",
   pretrained=True)``: the logits must equal the trained model's.
4. Load it once more with ``num_classes=5`` (a new head) and fine-tune it on digits 5-9, next to
   the same model trained from scratch for the same number of steps.

Run it with ``make demo`` or ``python -m examples.digits`` from the repository root (``examples`` is a
package of the repository, not of the installed wheel; ``--fast`` for a few-second smoke run). Without
``--out`` the model directories go to a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch
from timm.task import ClassificationTask
from torch import nn

from examples.local_hub_session import local_hub_session, request_summary
from examples.training_loop import create_train_state, evaluate_top1, tensor_batches, train_step
from timm_vitscratch import hub
from timm_vitscratch.model_dir import save_model_directory

MODEL = "scratch_vit_ti16"
ALL_DIGITS = tuple(range(10))
PRETRAIN_DIGITS = (0, 1, 2, 3, 4)
FINETUNE_DIGITS = (5, 6, 7, 8, 9)
#: the Hub repository the pretrained model is pushed to (on the local server only)
REPO_ID = "digits-demo/scratch_vit_ti16.digits04"


@dataclass(frozen=True)
class Recipe:
    """The model arguments and training budget of one run of the example."""

    model_args: dict[str, Any]
    epochs: int  # all ten digits
    pretrain_epochs: int  # digits 0-4
    finetune_steps: int  # digits 5-9, for both the pretrained and the from-scratch model
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.05
    smoothing: float = 0.1
    drop_args: dict[str, float] = field(default_factory=lambda: dict(drop_rate=0.1, drop_path_rate=0.1))


_DIGITS_VIT = dict(img_size=8, patch_size=2, in_chans=1, embed_dim=64, depth=4, num_heads=4)
FULL = Recipe(model_args=_DIGITS_VIT, epochs=20, pretrain_epochs=15, finetune_steps=60)
#: A smoke run for the test suite: one narrow block, a handful of steps.
FAST = Recipe(
    model_args=dict(_DIGITS_VIT, embed_dim=32, depth=1, num_heads=2),
    epochs=1,
    pretrain_epochs=1,
    finetune_steps=5,
    drop_args={},
)


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
    steps: int | None  # None: no training in this step
    top1: float
    seconds: float


@dataclass
class HubRoundTrip:
    """What the Hub step did: the push's commit, and how far the ``hf-hub:`` model is from the trained one."""

    url: str
    repo_id: str
    commit: str
    max_abs_diff: float
    images: int
    requests: dict[str, int]


@dataclass
class ExampleResult:
    rows: list[Row]
    hub: HubRoundTrip


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
        list(range(len(labels))), test_size=val_fraction, stratify=data.target, random_state=seed
    )
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
    return timm.create_model(
        MODEL, num_classes=num_classes, pretrained_cfg_overlay=DIGITS_DATA_CFG, **recipe.model_args, **recipe.drop_args
    )


def fit(
    model: nn.Module, split: Split, steps: int, recipe: Recipe, desc: str, progress: bool, seed: int
) -> tuple[float, float]:
    """Train ``model`` for ``steps`` updates on ``split`` with timm's components.

    Returns validation top-1 (percent) and the seconds it took.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    task = ClassificationTask(model, criterion_kwargs=dict(smoothing=recipe.smoothing), verbose=False)
    state = create_train_state(model, steps, lr=recipe.lr, weight_decay=recipe.weight_decay, warmup_updates=steps // 20)
    generator = torch.Generator().manual_seed(seed)
    bar = tqdm(total=steps, desc=desc, disable=not progress, leave=True, dynamic_ncols=True, mininterval=0.5)
    with bar:
        while state.updates < steps:
            for images, labels in tensor_batches(split.train_images, split.train_labels, recipe.batch_size, generator):
                loss = train_step(task, state, images, labels)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
                if state.updates == steps:
                    break
    top1 = evaluate_top1(model, tensor_batches(split.val_images, split.val_labels, 256))
    return top1, time.perf_counter() - start


def round_trip_through_hub(
    model: nn.Module,
    model_dir: Path,
    split: Split,
    out_dir: Path,
    recipe: Recipe,
    seed: int,
    log: Callable[[str], None],
    shown: Callable[[Path], str] = str,
) -> tuple[nn.Module, Row, HubRoundTrip]:
    """Push ``model_dir`` to a local Hub, pull it, reload it with ``hf-hub:``; returns that model with a new head.

    The reloaded model (old head) is compared with ``model`` on ``split``'s validation images: the
    max-abs-diff of the logits and its top-1 go into the report.
    """
    start = time.perf_counter()
    name = f"hf-hub:{REPO_ID}"
    with local_hub_session() as server:
        log(
            f"local Hub (a test/demo server, not huggingface.co) at {server.url}; this process's client: "
            f"HF_ENDPOINT={server.url} HF_HUB_DISABLE_XET=1 HF_HOME=<temporary>"
        )
        commit = hub.push(model_dir, REPO_ID).oid
        log(
            f"pushed {shown(model_dir)} to {REPO_ID}@main, commit {commit[:12]} "
            f"(what `vitscratch push DIR {REPO_ID}` does)"
        )
        pulled = hub.pull(REPO_ID, out_dir / "digits04-pulled", force=True)
        log(f"pulled {REPO_ID} into {shown(pulled)}, sha256 verified (what `vitscratch pull {REPO_ID} DIR` does)")
        reloaded = timm.create_model(name, pretrained=True).eval()
        with torch.inference_mode():
            max_abs_diff = (reloaded(split.val_images) - model.eval()(split.val_images)).abs().max().item()
        top1 = evaluate_top1(reloaded, tensor_batches(split.val_images, split.val_labels, 256))
        log(
            f"timm.create_model({name!r}, pretrained=True): logits max-abs-diff {max_abs_diff:g} against the "
            f"trained model on {len(split.val_labels)} validation images"
        )
        torch.manual_seed(seed)  # the new head's initialisation
        pretrained = timm.create_model(name, pretrained=True, num_classes=len(FINETUNE_DIGITS), **recipe.drop_args)
        log(
            f"timm.create_model({name!r}, pretrained=True, num_classes={len(FINETUNE_DIGITS)}): "
            "the 0-4 model with a new head, for digits 5-9"
        )
        requests = request_summary(server)
        log("requests the real huggingface_hub client made: " + ", ".join(f"{k} x{n}" for k, n in requests.items()))
    row = Row("digits 0-4", "reloaded from hf-hub: (push, pull)", None, top1, time.perf_counter() - start)
    return pretrained, row, HubRoundTrip(server.url, REPO_ID, commit, max_abs_diff, len(split.val_labels), requests)


def _steps_per_epoch(split: Split, batch_size: int) -> int:
    return -(-len(split.train_labels) // batch_size)


def run(
    recipe: Recipe,
    out_dir: Path,
    progress: bool = True,
    seed: int = 0,
    log: Callable[[str], None] = print,
    shown: Callable[[Path], str] = str,
) -> ExampleResult:
    """The whole example; returns the rows of the accuracy table and what the Hub step did.

    ``shown`` names a directory under ``out_dir`` in what is logged (a temporary ``out_dir`` is said to be one).
    """
    rows = []
    full = load_split(ALL_DIGITS, seed=seed)
    steps = recipe.epochs * _steps_per_epoch(full, recipe.batch_size)
    model = create_digits_model(recipe, 10, seed)
    log(
        f"{MODEL} for 8x8 digits: {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{len(full.train_labels)} training / {len(full.val_labels)} validation images"
    )
    rows.append(Row("digits 0-9", "random", steps, *fit(model, full, steps, recipe, "digits 0-9", progress, seed)))

    first, second = load_split(PRETRAIN_DIGITS, seed=seed), load_split(FINETUNE_DIGITS, seed=seed)
    model = create_digits_model(recipe, len(PRETRAIN_DIGITS), seed)
    steps = recipe.pretrain_epochs * _steps_per_epoch(first, recipe.batch_size)
    rows.append(Row("digits 0-4", "random", steps, *fit(model, first, steps, recipe, "pretrain 0-4", progress, seed)))

    model_dir = save_model_directory(  # weights trained here from scratch: their license is ours to name
        model,
        out_dir / "digits04",
        source=dict(example="digits", digits=list(PRETRAIN_DIGITS)),
        license="apache-2.0",
    )
    log(f"saved {shown(model_dir)}: model.safetensors + config.json")
    pretrained, hub_row, round_trip = round_trip_through_hub(model, model_dir, first, out_dir, recipe, seed, log, shown)
    rows.append(hub_row)

    steps = recipe.finetune_steps
    rows.append(
        Row(
            "digits 5-9",
            "pretrained on 0-4 (hf-hub:), new head",
            steps,
            *fit(pretrained, second, steps, recipe, "fine-tune 5-9", progress, seed),
        )
    )
    scratch = create_digits_model(recipe, len(FINETUNE_DIGITS), seed)
    rows.append(Row("digits 5-9", "random", steps, *fit(scratch, second, steps, recipe, "scratch 5-9", progress, seed)))
    return ExampleResult(rows, round_trip)


def format_table(rows: Sequence[Row]) -> str:
    header = ("task", "init", "steps", "val top-1", "time")
    cells = [
        (r.task, r.init, "-" if r.steps is None else f"{r.steps}", f"{r.top1:.1f} %", f"{r.seconds:.1f} s")
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *cells]) for i in range(len(header))]
    align = ("<", "<", ">", ">", ">")

    def line(values) -> str:
        return "  ".join(f"{v:{a}{w}}" for v, a, w in zip(values, align, widths, strict=False)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(c) for c in cells)])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m examples.digits", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The example's flags ."""
    parser.add_argument("--fast", action="store_true", help="a smoke run: tiny model, a few steps")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the pretrained model directory (digits04/) and its copy pulled from the "
        "local Hub (digits04-pulled/) go (default: a temporary directory)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: these small matrices gain little from more)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (there are none when stderr is not a terminal)"
    )


def temporary_name(path: Path) -> str:
    """A directory in the temporary folder, named as what it is: gone once the example ends."""
    return f"{path.name}/ in a temporary folder (removed at the end; --out DIR keeps it)"


def run_from_args(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    recipe = FAST if args.fast else FULL
    start = time.perf_counter()
    # bars only where a person watches them redrawn: into a file or a pipe they are lines of carriage returns
    progress = not args.no_progress and sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="vitscratch-digits-") as tmp:
        out_dir = args.out if args.out is not None else Path(tmp)
        shown = str if args.out is not None else temporary_name
        result = run(recipe, out_dir, progress=progress, seed=args.seed, shown=shown)
    print()
    print(format_table(result.rows))
    trip = result.hub
    print(
        f"\nHub round trip: {trip.repo_id} pushed to the local Hub (commit {trip.commit[:12]}), pulled, and loaded "
        f"with timm.create_model('hf-hub:{trip.repo_id}', pretrained=True): logits max-abs-diff "
        f"{trip.max_abs_diff:g} against the trained model ({trip.images} validation images)"
    )
    print(f"\ntotal {time.perf_counter() - start:.1f} s on {args.threads} thread(s) of {os.cpu_count()} CPU core(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_from_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
