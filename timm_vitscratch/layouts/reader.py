"""Opening a checkpoint file or model directory: which container it is, from its first bytes (not its
name), and the reader for it. A directory is read as a Hugging Face style model folder (weights file
plus ``config.json`` / ``preprocessor_config.json``).

A sharded checkpoint (``model-00001-of-00002.safetensors`` ..., ``model.safetensors.index.json``) is not read:
a directory holding shards or a shard index, and a file named as one shard of several, are refused in one line
saying how many of the shards are there and which are missing, rather than read as a model of fewer blocks
(a ``model.safetensors`` beside an index may be one shard of its set)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import ConversionError, listed, shown
from ..gate.containers import CONTAINERS, container_of
from ..gate.files import regular_file
from ..gate.json_data import read_json_object
from .checkpoint import Checkpoint, gate_error
from .npz_file import NpzCheckpoint
from .safetensors_file import SafetensorsCheckpoint
from .torch_file import TorchCheckpoint

#: weight files looked for, in order, when the source is a directory
DIRECTORY_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.npz")


def _sniff(path: Path) -> str:
    """Which container a file is, from its first bytes (not its name; the gate reads them)."""
    kind = container_of(path, gate_error(path))
    if kind in CONTAINERS:
        return kind
    if kind == "empty":
        raise ConversionError("is empty", path)
    if kind == "zip":
        raise ConversionError("is a zip archive that is neither a torch.save file nor a numpy .npz", path)
    raise ConversionError(
        "is not a checkpoint format that can be read: expected safetensors, a torch.save "
        "file (.pth/.pt/.bin) or a numpy .npz",
        path,
    )


#: a shard of a sharded checkpoint, as transformers and huggingface_hub name them: index and count, from one
SHARD = re.compile(r"^(?:model|pytorch_model)-(\d{5})-of-(\d{5})\.(?:safetensors|bin)$")
#: the index a sharded checkpoint's shards come with (tensor name -> shard file)
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: the most shard names kept while listing a directory (the listing itself goes on)
MAX_SHARD_NAMES = 10_000
NOT_READ = "sharded checkpoints are not read: save the model as one model.safetensors (or pass that file)"


def _shard_files(directory: Path) -> dict[str, tuple[int, int]]:
    """The shard-named entries of ``directory``: name -> (index, count)."""
    found: dict[str, tuple[int, int]] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            match = SHARD.match(entry.name)
            if match and len(found) < MAX_SHARD_NAMES:
                found[entry.name] = (int(match.group(1)), int(match.group(2)))
    return found


def _index_shards(index: Path, directory: Path) -> list[str]:
    """The shard files an index's ``weight_map`` names (shown escaped; the index is data and never opens them)."""
    weight_map = read_json_object(index, ConversionError, inside=directory).get("weight_map")
    files = weight_map.values() if isinstance(weight_map, dict) else ()
    return sorted({shown(f) if not isinstance(f, str) or not SHARD.match(f) else f for f in files})


def check_not_sharded(directory: Path) -> None:
    """Refuse a directory that holds a sharded checkpoint (its shards, or its index): how many of the shards are
    there, which are missing, and whether a ``model.safetensors`` beside them may be one of them."""
    shards = _shard_files(directory)
    indexes = [name for name in SHARD_INDEXES if os.path.lexists(directory / name)]
    if not shards and not indexes:
        return
    beside = [name for name in DIRECTORY_WEIGHTS if os.path.lexists(directory / name)]
    also = f"; {listed(beside)} beside them may be one shard of the set" if beside else ""
    counts = sorted({count for _, count in shards.values()})
    if len(counts) > 1:
        sets = ", ".join(f"-of-{count:05d}" for count in counts)
        raise ConversionError(
            f"holds the shards of different sharded checkpoints ({sets}){also}; {NOT_READ}", directory
        )
    if shards:
        count, present = counts[0], sorted(shards)
        stem = next(iter(shards)).split("-")[0]
        suffix = next(iter(shards)).rsplit(".", 1)[1]
        have = {index for index, _ in shards.values()}
        missing = [f"{stem}-{i:05d}-of-{count:05d}.{suffix}" for i in range(1, count + 1) if i not in have]
        state = f"missing {listed(missing, limit=3)}" if missing else "the whole set"
        if count == 1 and not indexes and not beside and not missing:
            return  # one shard of one: whole (read as the file itself, when passed)
        raise ConversionError(
            f"holds a sharded checkpoint: {len(have)} of {count} shards ({listed(present, limit=3)}; {state}){also}; "
            f"{NOT_READ}",
            directory,
        )
    named = _index_shards(directory / indexes[0], directory)
    raise ConversionError(
        f"holds {indexes[0]} (a sharded checkpoint's index) but none of the {len(named)} shard file(s) it names "
        f"({listed(named, limit=3, quote=False)}){also}; {NOT_READ}",
        directory,
    )


def check_not_a_shard(path: Path) -> None:
    """Refuse a file named as one shard of several (``model-00001-of-00002.safetensors``): it holds part of a model."""
    match = SHARD.match(path.name)
    if match and int(match.group(2)) > 1:
        raise ConversionError(
            f"is shard {int(match.group(1))} of {int(match.group(2))} of a sharded checkpoint (its name says so): it "
            f"holds part of the model's tensors; {NOT_READ}",
            path,
        )


def weights_file(directory: Path) -> Path:
    check_not_sharded(directory)
    for name in DIRECTORY_WEIGHTS:
        if os.path.lexists(directory / name):
            return regular_file(directory / name, ConversionError, inside=directory)
    raise ConversionError(
        f"is a directory without a weights file (looked for {', '.join(DIRECTORY_WEIGHTS)})", directory
    )


def open_checkpoint(path: str | os.PathLike[str], ema: bool = False) -> Checkpoint:
    """Open a checkpoint file or model directory for lazy, safe reading."""
    path = Path(path)
    if not path.exists():
        raise ConversionError("does not exist", path)
    side_config: dict[str, Any] = {}
    preprocess: dict[str, Any] = {}
    directory: Path | None = None
    if path.is_dir():
        directory, path = path, weights_file(path)
        if os.path.lexists(directory / "config.json"):
            side_config = read_json_object(directory / "config.json", ConversionError, inside=directory)
        if os.path.lexists(directory / "preprocessor_config.json"):
            preprocess = read_json_object(directory / "preprocessor_config.json", ConversionError, inside=directory)
    else:
        regular_file(path, ConversionError)  # a FIFO or device would block or never end the read
        check_not_a_shard(path)
    try:
        kind = _sniff(path)
    except OSError as err:
        raise ConversionError(f"cannot be read: {err.strerror}", path) from None
    if kind.startswith("torch"):
        checkpoint: Checkpoint = TorchCheckpoint(path, ema, is_zip=kind == "torch-zip")
    elif ema:
        raise ConversionError(
            f"EMA weights requested, but a {kind} file holds one set of weights; EMA weights "
            f"come from a train.py checkpoint's state_dict_ema",
            path,
        )
    elif kind == "safetensors":
        checkpoint = SafetensorsCheckpoint(path)
    else:
        checkpoint = NpzCheckpoint(path)
    checkpoint.side_config = side_config
    checkpoint.directory = directory
    checkpoint.preprocess_config = preprocess
    return checkpoint
