"""A model directory from a DCP checkpoint, one tensor at a time.

``model.safetensors`` is planned from the checkpoint's metadata (names, shapes, dtypes), then each tensor is read
from the shards on its own (DCP reassembles it from however many ranks wrote it) and written: peak memory is one
tensor, never the model. ``config.json`` describes the model built on ``meta`` from the name and arguments the
checkpoint records; the license of the weights training started from travels (its text too, where it must).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner

from ..licenses import UNKNOWN
from ..model_dir import write_model_directory
from ..models.build import build_on_meta
from ..tensor_writer import TensorSpec
from .checkpoint import (
    EMA_PREFIX,
    MODEL_PREFIX,
    CheckpointError,
    GatedReader,
    latest,
    model_keys,
    one_process_quiet,
    read_training,
)


def _read_one(directory: Path, spec: TensorSpec, prefix: str) -> torch.Tensor:
    tensor = torch.empty(spec.shape, dtype=spec.dtype)
    with one_process_quiet():
        dcp.load(
            {prefix[:-1]: {spec.name: tensor}},
            storage_reader=GatedReader(str(directory)),
            planner=DefaultLoadPlanner(allow_partial_load=True),
            no_dist=True,
        )
    return tensor


def export_checkpoint(checkpoint: str | os.PathLike[str], directory: str | os.PathLike[str], ema: bool = False) -> Path:
    """Write the model of ``checkpoint`` (a ``step-N`` directory, or a run directory: its latest complete one) as a
    model directory that ``timm.create_model("local-dir:DIRECTORY", pretrained=True)`` loads; ``ema``: the average
    of its weights (``--model-ema``) instead."""
    source = latest(checkpoint)
    training = read_training(source)
    name, kwargs = training.get("model"), training.get("model_kwargs", {})
    if not isinstance(name, str) or not isinstance(kwargs, dict):
        raise CheckpointError(f"{source / 'training.json'} does not name the model it trained")
    model = build_on_meta(name, pretrained=False, **kwargs)
    if not training.get("pretrained"):
        # weights trained from a random start: the default tag's facts (its license) are not theirs
        model.pretrained_cfg = {**getattr(model, "pretrained_cfg", {}), "license": UNKNOWN}  # type: ignore[assignment]
    expected = model.state_dict()
    prefix = EMA_PREFIX if ema else MODEL_PREFIX
    found = model_keys(source, prefix)
    if ema and not found:
        raise CheckpointError(f"{source} holds no average of the weights (train with --model-ema)")
    if set(found) != set(expected):
        missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
        raise CheckpointError(f"{source} does not hold {name}'s tensors (missing {missing[:5]}, extra {extra[:5]})")
    specs = [TensorSpec(key, tuple(found[key].size), found[key].properties.dtype) for key in expected]
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    origin: dict[str, Any] = {
        "format": "timm_vitscratch.train",
        "model": name,
        "weights": ("fine-tuned" if training.get("pretrained") else "trained") + (", averaged (EMA)" if ema else ""),
        "checkpoint": source.name,
        "epoch": training.get("epoch"),
    }
    write_model_directory(out, model, specs, lambda spec: _read_one(source, spec, prefix), source=origin)
    return out
