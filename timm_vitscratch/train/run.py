"""The training loop: timm's data set, transforms, optimizer, scheduler and losses, one step at a time.

Each rank reads ``--batch-size`` images per step (:mod:`.data`), so the global batch of a step is the same images
whatever the number of processes; the logged loss is the mean over ranks, the loss of that global batch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2
from torch import nn

from ..files import atomic_write
from . import build, checkpoint, data, memory, parallel
from .export import export_checkpoint
from .options import build_parser

LOG = "log.jsonl"
SUMMARY = "summary.json"


def _model_arguments(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = dict(args.model_kwargs)
    if args.num_classes is not None:
        kwargs["num_classes"] = args.num_classes
    if args.drop:
        kwargs["drop_rate"] = args.drop
    if args.drop_path is not None:
        kwargs["drop_path_rate"] = args.drop_path
    return kwargs


def _losses(args: argparse.Namespace, num_classes: int) -> tuple[nn.Module, Mixup | None]:
    if args.mixup or args.cutmix:
        mixup = Mixup(
            mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, label_smoothing=args.smoothing, num_classes=num_classes
        )
        return SoftTargetCrossEntropy(), mixup
    if args.smoothing:
        return LabelSmoothingCrossEntropy(smoothing=args.smoothing), None
    return nn.CrossEntropyLoss(), None


def _autocast(args: argparse.Namespace, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    if args.amp_dtype == "float32" or args.fsdp:  # FSDP's MixedPrecisionPolicy casts instead
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=parallel.DTYPES[args.amp_dtype])


@dataclass
class Trained:
    """What a run leaves: its summary (also in ``OUTPUT/summary.json``) and the model as trained (wrapped)."""

    summary: dict[str, Any]
    model: nn.Module


def _refuse_mixtures(args: argparse.Namespace) -> None:
    if args.export_ema and not args.model_ema:
        raise ValueError("--export-ema needs --model-ema")
    if args.naflex_loader and (args.mixup or args.cutmix):
        raise ValueError("--naflex-loader trains without --mixup / --cutmix here")


def train(args: argparse.Namespace) -> Trained:
    _refuse_mixtures(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    processes = parallel.start(args.device, args.fsdp)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    model_kwargs = _model_arguments(args)
    built = build.build(args, model_kwargs, processes)
    model, wrapped = built.model, built.wrapped
    loader = data.naflex_loader(args, model, processes) if args.naflex_loader else data.loader(args, model, processes)
    num_classes = int(model.num_classes)  # type: ignore[arg-type]
    # timm's parameter groups (no decay on norms, biases and tokens; layer decay through group_matcher)
    optimizer = create_optimizer_v2(
        model,
        opt=args.opt,
        lr=args.lr,
        weight_decay=args.weight_decay,
        momentum=args.momentum,
        layer_decay=args.layer_decay,
    )
    updates_per_epoch = len(loader)
    scheduler, num_epochs = create_scheduler_v2(
        optimizer,
        sched=args.sched,
        num_epochs=args.epochs,
        warmup_epochs=args.warmup_epochs,
        warmup_lr=args.warmup_lr,
        min_lr=args.min_lr,
        updates_per_epoch=updates_per_epoch,
    )
    loss_fn, mixup = _losses(args, num_classes)
    scaler = torch.amp.GradScaler() if args.amp_dtype == "float16" and processes.device.type == "cuda" else None
    training = {
        "model": args.model,
        "model_kwargs": model_kwargs,
        "pretrained": bool(args.pretrained),
        "license": built.pretrained_cfg.get("license") if args.pretrained else None,
        "seed": args.seed,
        "global_batch": args.batch_size * processes.world_size,
    }

    ema_module = built.ema.module if built.ema is not None else None
    progress = checkpoint.Progress(epoch=0, step=0)
    if args.resume:
        source = checkpoint.latest(args.resume)
        record = checkpoint.load(source, wrapped, optimizer, processes, ema_module)
        if built.ema is not None and not record["ema_loaded"]:
            built.ema.set(model)  # a checkpoint without an average: it starts at the weights resumed
        progress = checkpoint.Progress(
            epoch=int(record["epoch"]), step=int(record["step"]), epoch_step=int(record.get("epoch_step", 0))
        )
        if progress.epoch_step and args.naflex_loader:
            raise ValueError(
                f"{source} is in the middle of an epoch: a --naflex-loader run resumes at an epoch's start"
            )
        if progress.epoch_step and isinstance(loader.sampler, data.ResumableSampler):
            loader.sampler.start_at(progress.epoch_step, args.batch_size)
        scheduler.load_state_dict(record["scheduler"])
        if record.get("global_batch") != training["global_batch"] and processes.main:
            print(f"note: global batch {training['global_batch']}, the checkpoint's was {record.get('global_batch')}")
        if processes.main:
            print(
                f"resumed from {source} at epoch {progress.epoch} (batch {progress.epoch_step}), step {progress.step}"
            )
    scheduler.step(progress.epoch)
    scheduler.step_update(progress.step)

    losses: list[float] = []
    log = output / LOG
    started = time.perf_counter()
    first = progress.epoch
    for epoch in range(progress.epoch, num_epochs):
        data.set_epoch(loader, epoch)
        wrapped.train()
        step = progress.step
        for batch, (images, targets) in enumerate(loader, start=progress.epoch_step + 1 if epoch == first else 1):
            if isinstance(images, dict):  # a NaFlex batch, on the device already; its size varies with its length
                scale = len(targets) / args.batch_size
            else:
                images, targets, scale = images.to(processes.device), targets.to(processes.device), 1.0
            if mixup is not None:
                images, targets = mixup(images, targets)
            with _autocast(args, processes.device):
                loss = loss_fn(wrapped(images), targets)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss * scale).backward()
                scaler.unscale_(optimizer)
            else:
                (loss * scale).backward()
            if args.clip_grad:
                torch.nn.utils.clip_grad_norm_(wrapped.parameters(), args.clip_grad)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if built.ema is not None:
                built.ema.update(model)
            step += 1
            scheduler.step_update(num_updates=step)
            value = parallel.mean_over_ranks(loss)
            losses.append(value)
            if processes.main:
                with open(log, "a", encoding="utf-8") as handle:
                    lr = optimizer.param_groups[0]["lr"]
                    handle.write(json.dumps({"epoch": epoch, "step": step, "loss": value, "lr": lr}) + "\n")
            if args.checkpoint_every_steps and step % args.checkpoint_every_steps == 0 and batch < len(loader):
                # in the middle of the epoch: the sampler starts the resumed epoch after this batch
                record = {**training, "scheduler": scheduler.state_dict()}
                mid = checkpoint.Progress(epoch=epoch, step=step, epoch_step=batch)
                checkpoint.save(output, wrapped, optimizer, mid, record, processes, ema_module)
        scheduler.step(epoch + 1)
        progress = checkpoint.Progress(epoch=epoch + 1, step=step)
        if processes.main:
            print(f"epoch {epoch + 1}/{num_epochs} step {step} loss {losses[-1]:.6f}", flush=True)
        last = epoch + 1 == num_epochs
        every_steps = bool(args.checkpoint_every_steps) and step % args.checkpoint_every_steps == 0
        if (
            (args.checkpoint_every and (epoch + 1) % args.checkpoint_every == 0)
            or (last and args.export)
            or every_steps
        ):
            record = {**training, "scheduler": scheduler.state_dict()}
            checkpoint.save(output, wrapped, optimizer, progress, record, processes, ema_module)

    # each rank's parameters, gradients and optimizer state as they stand after the last step (local shards)
    state_bytes = parallel.gather_objects(memory.local_state_bytes(wrapped, optimizer))
    exported = None
    if args.export and processes.main:
        last_checkpoint = output / checkpoint.CHECKPOINTS / f"step-{progress.step}"
        exported = str(export_checkpoint(last_checkpoint, args.export, ema=args.export_ema))
    parallel.barrier()
    summary = {
        "world_size": processes.world_size,
        "fsdp": bool(args.fsdp),
        "epoch": progress.epoch,
        "step": progress.step,
        "losses": losses,
        "seconds": time.perf_counter() - started,
        "export": exported,
        "state_bytes": state_bytes,
    }
    if processes.main:
        with atomic_write(output / SUMMARY, "w") as handle:
            json.dump(summary, handle, indent=2)
    return Trained(summary, wrapped)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Train as ``args`` say; 0, or 2 with the error on stderr (the console script's ``vitscratch train`` too)."""
    try:
        train(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        parallel.stop()
    return 0
