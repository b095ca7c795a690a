"""The command line of ``python -m timm_vitscratch.train``: timm ``train.py``'s flag names where it has them.

Only the standard library is imported here, so ``--help`` is instant and the console script can reuse the parser.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from typing import Any

AMP_DTYPES = ("float32", "bfloat16", "float16")


class KeyValues(argparse.Action):
    """``--model-kwargs img_size=32 depth=2``: Python literals where they parse, strings otherwise (as timm's)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        found: dict[str, Any] = {}
        for item in values or ():
            key, sep, text = str(item).partition("=")
            if not sep or not key:
                parser.error(f"{option_string} expects KEY=VALUE items, got {item!r}")
            try:
                found[key] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                found[key] = text
        setattr(namespace, self.dest, found)


DESCRIPTION = (
    "Fine-tune a model with timm's data, optimizer, scheduler and losses: one process, DDP under torchrun, or FSDP2 "
    "with --fsdp; DCP checkpoints that resume at another world size."
)


def build_parser(prog: str = "python -m timm_vitscratch.train") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The training options, on ``parser`` (this module's own, or the console script's ``train`` command)."""
    model = parser.add_argument_group("model")
    model.add_argument("--model", required=True, help="a registered name, local-dir:DIR or hf-hub:ORG/NAME")
    model.add_argument("--model-kwargs", nargs="*", default={}, action=KeyValues, help="create_model arguments")
    model.add_argument("--pretrained", action="store_true", help="start from the model's pretrained weights")
    model.add_argument("--num-classes", type=int, default=None, help="a new head with this many classes")
    model.add_argument("--drop", type=float, default=0.0, help="dropout before the head")
    model.add_argument("--drop-path", type=float, default=None, help="stochastic depth rate")
    model.add_argument("--grad-checkpointing", action="store_true", help="recompute each block in the backward")
    model.add_argument("--model-ema", action="store_true", help="keep an exponential moving average of the weights")
    model.add_argument("--model-ema-decay", type=float, default=0.9998, help="its decay per optimizer step")

    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", required=True, help="an image folder with a train/ split")
    data.add_argument("--train-split", default="train")
    data.add_argument("--img-size", type=int, default=None, help="input size of the data pipeline")
    data.add_argument("--no-aug", action="store_true", help="resize and crop only (deterministic)")
    data.add_argument("-b", "--batch-size", type=int, default=32, help="images per process per step")
    data.add_argument("-j", "--workers", type=int, default=2, help="data-loading processes per rank")
    data.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (timm's Mixup)")
    data.add_argument("--cutmix", type=float, default=0.0, help="cutmix alpha (timm's Mixup)")
    data.add_argument("--smoothing", type=float, default=0.0, help="label smoothing")
    data.add_argument("--naflex-loader", action="store_true", help="timm's NaFlex loader (NaFlex-capable models)")
    data.add_argument(
        "--naflex-train-seq-lens",
        type=int,
        nargs="+",
        default=[128, 256, 576, 784, 1024],
        help="patch-sequence lengths of the NaFlex loader's batches",
    )

    optim = parser.add_argument_group("optimizer and schedule")
    optim.add_argument("--opt", default="adamw", help="timm's create_optimizer_v2 name")
    optim.add_argument("--lr", type=float, default=1e-4)
    optim.add_argument("--weight-decay", type=float, default=0.05)
    optim.add_argument("--momentum", type=float, default=0.9)
    optim.add_argument("--layer-decay", type=float, default=None, help="layer-wise learning-rate decay")
    optim.add_argument("--clip-grad", type=float, default=None, help="clip the gradient norm to this")
    optim.add_argument("--sched", default="cosine", help="timm's create_scheduler_v2 name")
    optim.add_argument("--epochs", type=int, default=10)
    optim.add_argument("--warmup-epochs", type=int, default=0)
    optim.add_argument("--warmup-lr", type=float, default=1e-6)
    optim.add_argument("--min-lr", type=float, default=0.0)

    run = parser.add_argument_group("run")
    run.add_argument("--seed", type=int, default=42)
    run.add_argument("--output", required=True, help="run directory: log, summary and checkpoints/")
    run.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    run.add_argument("--amp-dtype", choices=AMP_DTYPES, default="float32", help="compute dtype (bf16 or fp16)")
    run.add_argument("--fsdp", action="store_true", help="shard every block, then the root, with FSDP2")
    run.add_argument("--fsdp-cpu-offload", action="store_true", help="keep FSDP's shards and optimizer on CPU")
    run.add_argument("--checkpoint-every", type=int, default=1, help="a DCP checkpoint every N epochs (0: none)")
    run.add_argument(
        "--checkpoint-every-steps", type=int, default=0, help="also a DCP checkpoint every N optimizer steps (0: none)"
    )
    run.add_argument("--resume", default=None, help="a checkpoint directory, or a run directory (its latest)")
    run.add_argument("--export", default=None, help="write a model directory from the last checkpoint")
    run.add_argument("--export-ema", action="store_true", help="export the average (--model-ema), not the weights")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads per process")
