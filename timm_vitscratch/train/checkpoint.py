"""Distributed Checkpoint (DCP) checkpoints that outlive the job and resume at another world size.

A checkpoint is a directory ``OUTPUT/checkpoints/step-N/``: DCP's shards and ``.metadata`` (the model and optimizer
state as ``torch.distributed.checkpoint.state_dict.get_state_dict`` gives them, keyed by parameter name whatever
the wrapping, each rank's RNG states and, with ``--model-ema``, the average of the weights under ``ema.``), ``training.json`` (the epoch, batch and step reached, the scheduler's state, the
model's name and arguments) and last the completion marker ``COMPLETE``. Every rank writes into
``.step-N.partial/``; rank 0 adds ``training.json`` and the marker and renames the directory. A run killed on the
way leaves a ``.partial`` directory, which nothing resumes from: only ``step-N`` directories holding ``COMPLETE``
count. DCP reshards on load, so a checkpoint of two FSDP ranks resumes on one process, under DDP or on four.

DCP's ``.metadata`` is a pickle: :class:`GatedReader` reads it through the gate
(:mod:`timm_vitscratch.gate.dcp_metadata`: bounded, DCP's record types only) wherever this package reads a
checkpoint; DCP reads the shards themselves with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from ..errors import ModelDirectoryError
from ..files import atomic_write
from ..gate.dcp_metadata import read_dcp_metadata
from ..gate.json_data import read_json_object
from .parallel import Processes, barrier

CHECKPOINTS = "checkpoints"
COMPLETE = "COMPLETE"
TRAINING = "training.json"
STEP_NAME = re.compile(r"^step-(\d+)$")
#: where the model's tensors sit in a checkpoint's flat DCP keys (``model.<parameter name>``)
MODEL_PREFIX = "model."
#: ... and those of the average of its weights (``--model-ema``)
EMA_PREFIX = "ema."


class CheckpointError(ModelDirectoryError):
    """No complete checkpoint where one was asked for, or one that cannot be read."""


@dataclass(frozen=True)
class Progress:
    """Where a run stands: ``epoch`` epochs done and ``epoch_step`` batches of the next, ``step`` optimizer steps."""

    epoch: int
    step: int
    epoch_step: int = 0


def rng_state() -> dict[str, torch.Tensor]:
    """This process's RNG states (torch, CUDA, numpy, Python's ``random``) as tensors."""
    numpy_state: tuple[Any, ...] = tuple(np.random.get_state())
    python_state = random.getstate()
    gauss = python_state[2]
    state = {
        "torch": torch.get_rng_state(),
        "numpy_key": torch.from_numpy(np.asarray(numpy_state[1], dtype=np.int64)),
        "numpy_rest": torch.tensor([float(numpy_state[2]), float(numpy_state[3]), float(numpy_state[4])]),
        "python": torch.tensor(python_state[1], dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss], dtype=torch.float64),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["torch"])
    rest = state["numpy_rest"].tolist()
    key = state["numpy_key"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, int(rest[0]), int(rest[1]), float(rest[2])))
    gauss = float(state["python_gauss"][0])
    random.setstate((3, tuple(int(v) for v in state["python"].tolist()), None if gauss != gauss else gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


@contextlib.contextmanager
def one_process_quiet() -> Iterator[None]:
    """DCP warns that it saves or loads in one process when there is no process group: that is meant."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to", category=UserWarning)
        yield


class GatedReader(FileSystemReader):
    """DCP's file-system reader, its ``.metadata`` read through the gate instead of a plain ``pickle.load``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        metadata = read_dcp_metadata(Path(self.path) / name, CheckpointError)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]
        return metadata


def _rng_key(rank: int) -> str:
    return f"rng_rank{rank}"


def is_complete(directory: Path) -> bool:
    return STEP_NAME.match(directory.name) is not None and (directory / COMPLETE).is_file()


def latest(path: str | os.PathLike[str]) -> Path:
    """The checkpoint to resume from: ``path`` itself when it is a complete checkpoint, else the complete one with
    the most steps under ``path/checkpoints`` (a run directory) or ``path`` (a checkpoints directory)."""
    path = Path(path)
    if STEP_NAME.match(path.name):
        if not is_complete(path):
            raise CheckpointError(
                f"{path} is not a complete checkpoint (no {COMPLETE} marker): the run was stopped while writing it"
            )
        return path
    folder = path / CHECKPOINTS if (path / CHECKPOINTS).is_dir() else path
    found = sorted(
        (int(match.group(1)), entry)
        for entry in (folder.iterdir() if folder.is_dir() else ())
        if (match := STEP_NAME.match(entry.name)) and is_complete(entry)
    )
    if not found:
        raise CheckpointError(f"{path} holds no complete checkpoint (step-N/ with {COMPLETE})")
    return found[-1][1]


def read_training(directory: Path) -> dict[str, Any]:
    """A checkpoint's ``training.json``, read through the gate."""
    return read_json_object(directory / TRAINING, CheckpointError)


def model_keys(directory: Path, prefix: str = MODEL_PREFIX) -> dict[str, Any]:
    """The model's tensors in a checkpoint (``prefix`` ``EMA_PREFIX``: their average's): parameter name -> DCP's
    storage metadata (size, dtype)."""
    metadata = GatedReader(str(directory)).read_metadata()
    return {
        key[len(prefix) :]: entry
        for key, entry in metadata.state_dict_metadata.items()
        if key.startswith(prefix) and hasattr(entry, "size")
    }


def save(
    output: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: Progress,
    training: dict[str, Any],
    processes: Processes,
    ema: nn.Module | None = None,
) -> Path:
    """Write ``output/checkpoints/step-N`` from every rank (with ``ema``, the average of the weights); returns its
    path once it is complete."""
    folder = output / CHECKPOINTS
    final = folder / f"step-{progress.step}"
    partial = folder / f".step-{progress.step}.partial"
    if processes.main:
        shutil.rmtree(partial, ignore_errors=True)  # left by a run killed while writing it
        partial.mkdir(parents=True)
    barrier()
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state, _rng_key(processes.rank): rng_state()}
    if ema is not None:
        state[EMA_PREFIX[:-1]] = get_model_state_dict(ema)
    with one_process_quiet():
        dcp.save(state, checkpoint_id=str(partial), no_dist=not processes.distributed)
    if processes.main:
        record = {**training, "epoch": progress.epoch, "epoch_step": progress.epoch_step, "step": progress.step}
        record["world_size"] = processes.world_size
        with atomic_write(partial / TRAINING, "w") as handle:
            json.dump(record, handle, indent=2)
        with atomic_write(partial / COMPLETE, "w") as handle:
            handle.write(f"step {progress.step}, epoch {progress.epoch}, batch {progress.epoch_step}\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
    barrier()
    return final


def load(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    processes: Processes,
    ema: nn.Module | None = None,
) -> dict[str, Any]:
    """Load a complete checkpoint into ``model`` and ``optimizer`` (resharded to this world size), into ``ema`` the
    average it holds, and this rank's RNG states when the checkpoint has this rank's; returns its
    ``training.json`` and whether ``ema`` was loaded (``"ema_loaded"``)."""
    if not is_complete(directory):
        raise CheckpointError(f"{directory} is not a complete checkpoint (no {COMPLETE} marker)")
    training = read_training(directory)
    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    saved = GatedReader(str(directory)).read_metadata().state_dict_metadata
    key = _rng_key(processes.rank)
    if any(name.startswith(key + ".") for name in saved):
        state[key] = rng_state()
    ema_saved = ema is not None and any(name.startswith(EMA_PREFIX) for name in saved)
    if ema is not None and ema_saved:
        state[EMA_PREFIX[:-1]] = get_model_state_dict(ema)
    with one_process_quiet():
        dcp.load(state, storage_reader=GatedReader(str(directory)), no_dist=not processes.distributed)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if ema is not None and ema_saved:
        set_model_state_dict(ema, state[EMA_PREFIX[:-1]])
    if key in state:
        set_rng_state(state[key])
    return {**training, "ema_loaded": ema_saved}
