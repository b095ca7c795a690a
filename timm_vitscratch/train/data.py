"""The training data: timm's data set and transforms, read in an order every world size shares, from any batch.

Each rank reads ``--batch-size`` images per step from a ``DistributedSampler`` (seeded by ``--seed`` and the
epoch). Rank ``r`` of ``N`` reads positions ``r, r + N, r + 2N ...`` of the epoch's order, so step ``k`` reads
positions ``k x G`` to ``(k + 1) x G - 1`` (``G`` the global batch) whatever ``N`` is: a run resumed in the middle
of an epoch skips the first ``k x batch`` of each rank's share (:class:`ResumableSampler`) and reads the same images
next as the run it resumes would have.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from timm.data import create_dataset, create_transform, resolve_data_config
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
