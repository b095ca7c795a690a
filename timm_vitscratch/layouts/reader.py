"""Opening a checkpoint file or model directory: which container it is, from its first bytes (not its
name), and the reader for it. A directory is read as a Hugging Face style model folder (weights file
plus ``config.json`` / ``preprocessor_config.json``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConversionError
from ..gate.checkpoints import open_checkpoint_file
from ..gate.files import regular_file
from ..gate.json_data import read_json_object
from ..gate.zip_archive import open_archive
from .checkpoint import Checkpoint, gate_error
from .npz_file import NpzCheckpoint
from .safetensors_file import SafetensorsCheckpoint
from .torch_file import TorchCheckpoint

#: weight files looked for, in order, when the source is a directory
DIRECTORY_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.npz")


def _sniff(path: Path) -> str:
    """Which container a file is, from its first bytes (not its name)."""
    with open_checkpoint_file(path, gate_error(path)) as handle:
        head = handle.read(9)
        if not head:
            raise ConversionError("is empty", path)
        names = []
        if head.startswith(b"PK\x03\x04"):
            with open_archive(handle, path, gate_error(path)) as archive:
                names = archive.namelist()
    if head.startswith(b"PK\x03\x04"):
        if any(name.endswith("data.pkl") for name in names):
            return "torch-zip"
        if names and all(name.endswith(".npy") for name in names):
            return "npz"
        raise ConversionError("is a zip archive that is neither a torch.save file nor a numpy .npz", path)
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    if head[0] == 0x80:  # pickle protocol marker: torch.save's legacy (non-zip) format
        return "torch-legacy"
    raise ConversionError(
        "is not a checkpoint format that can be read: expected safetensors, a torch.save "
        "file (.pth/.pt/.bin) or a numpy .npz",
        path,
    )


def weights_file(directory: Path) -> Path:
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
    if path.is_dir():
        directory, path = path, weights_file(path)
        if os.path.lexists(directory / "config.json"):
            side_config = read_json_object(directory / "config.json", ConversionError, inside=directory)
        if os.path.lexists(directory / "preprocessor_config.json"):
            preprocess = read_json_object(directory / "preprocessor_config.json", ConversionError, inside=directory)
    else:
        regular_file(path, ConversionError)  # a FIFO or device would block or never end the read
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
    checkpoint.preprocess_config = preprocess
    return checkpoint
