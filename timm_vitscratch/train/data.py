"""The training data: timm's data set and transforms, read in an order every world size shares, from any batch.

Each rank reads ``--batch-size`` images per step from a ``DistributedSampler`` (seeded by ``--seed`` and the
epoch). Rank ``r`` of ``N`` reads positions ``r, r + N, r + 2N ...`` of the epoch's order, so step ``k`` reads
positions ``k x G`` to ``(k + 1) x G - 1`` (``G`` the global batch) whatever ``N`` is: a run resumed in the middle
of an epoch skips the first ``k x batch`` of each rank's share (:class:`ResumableSampler`) and reads the same images
next as the run it resumes would have.

With ``--naflex-loader`` (NaFlex-capable models) timm's ``create_naflex_loader`` reads each image at its own size
and aspect as a sequence of patches, batched by sequence length (``--naflex-train-seq-lens``): the batch size
varies with the length, so the loss is scaled by ``batch / --batch-size`` as timm's ``train.py`` does
(``--naflex-loss-scale linear``). Its batches come from timm's own per-rank schedule, so such a run resumes at the
start of an epoch only.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import torch
from timm.data import create_dataset, create_naflex_loader, create_transform, resolve_data_config
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from .parallel import Processes


class ResumableSampler(DistributedSampler[Any]):
    """A ``DistributedSampler`` whose next epoch can start ``skip`` indices into this rank's share."""

    skip = 0

    def start_at(self, batches: int, batch_size: int) -> None:
        """The next epoch starts after its first ``batches`` batches of ``batch_size``."""
        self.skip = batches * batch_size

    def __iter__(self) -> Iterator[Any]:
        indices = list(super().__iter__())[self.skip :]
        self.skip = 0  # once: the epochs after start at their beginning
        return iter(indices)


def _model_img_size(model: nn.Module) -> int | None:
    """The square size the model was built for (``--model-kwargs img_size=N``), when it says."""
    img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    if isinstance(img_size, tuple) and len(img_size) == 2 and img_size[0] == img_size[1]:
        return int(img_size[0])
    return None


def loader(args: argparse.Namespace, model: nn.Module, processes: Processes) -> DataLoader:
    size = args.img_size or _model_img_size(model)
    config = resolve_data_config({"input_size": (3, size, size)} if size else {}, model=model)
    dataset = create_dataset("", root=args.data_dir, split=args.train_split, is_training=True)
    dataset.transform = create_transform(
        config["input_size"],
        is_training=True,
        no_aug=args.no_aug,
        interpolation=config["interpolation"],
        mean=config["mean"],
        std=config["std"],
        crop_pct=config["crop_pct"],
    )
    sampler = ResumableSampler(
        dataset, num_replicas=processes.world_size, rank=processes.rank, shuffle=True, seed=args.seed, drop_last=True
    )
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        persistent_workers=args.workers > 0,
        pin_memory=processes.device.type == "cuda",
    )


def naflex_loader(args: argparse.Namespace, model: nn.Module, processes: Processes) -> Any:
    """timm's NaFlex loader over ``--data-dir``: patch sequences of the lengths ``--naflex-train-seq-lens``."""
    config = resolve_data_config({}, model=model)
    dataset = create_dataset("", root=args.data_dir, split=args.train_split, is_training=True)
    return create_naflex_loader(
        dataset,
        patch_size=model.get_patch_size(),  # type: ignore[operator]
        train_seq_lens=tuple(args.naflex_train_seq_lens),
        batch_size=args.batch_size,
        is_training=True,
        no_aug=args.no_aug,
        interpolation=config["interpolation"],
        mean=config["mean"],
        std=config["std"],
        num_workers=args.workers,
        distributed=processes.distributed,
        rank=processes.rank,
        world_size=processes.world_size,
        seed=args.seed,
        pin_memory=processes.device.type == "cuda",
        img_dtype=torch.float32,
        device=processes.device,
        persistent_workers=args.workers > 0,
    )


def set_epoch(loader: Any, epoch: int) -> None:
    """The epoch the loader's order follows (its sampler's, or the NaFlex data set wrapper's)."""
    sampler = getattr(loader, "sampler", None)
    if sampler is not None and hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    else:  # the NaFlex prefetch loader wraps a DataLoader over timm's NaFlex data set wrapper
        getattr(loader, "loader", loader).dataset.set_epoch(epoch)
