"""Safe, lazy reading of checkpoints: names, shapes and dtypes first, then one tensor at a time.

Three containers are read:

* safetensors — validated by the safetensors library, then read through a private memory map:
  tensors are views (nothing copied) and ``release`` gives a written tensor's pages back;
* ``torch.save`` files (``.pth``, ``.pt``, ``.bin``, timm's ``.pth.tar``) — ``torch.load`` with
  ``weights_only=True`` (only ``argparse.Namespace`` is allowed besides tensors and containers,
  for the ``args`` timm's ``train.py`` stores) and ``mmap=True`` for the zip format (pages given back
  the same way, see ``page_release``);
* numpy ``.npz`` (JAX) — ``allow_pickle=False``; shapes come from each member's header.

Training checkpoints are unwrapped (``state_dict``, ``model``; ``state_dict_ema`` / ``model_ema``
with ``ema=True``) and ``module.`` (DDP) / ``_orig_mod.`` (``torch.compile``) prefixes stripped.
A directory is read as a Hugging Face style model folder (weights file plus ``config.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import mmap
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from ..errors import ConversionError, listed
from ..reading import read_json_object, regular_file
from ..tensor_writer import SAFETENSORS_DTYPES
from .page_release import PageReleaser, release_mapped_range

WRAPPER_KEYS = ("state_dict", "model")
EMA_KEYS = ("state_dict_ema", "model_ema")
KEY_PREFIXES = ("module.", "_orig_mod.")
NPZ_PREFIXES = ("opt/target/",)
#: an .npz member larger than the floor may expand at most this many times over its stored size
NPZ_MAX_EXPANSION = 100
NPZ_EXPANSION_FLOOR = 256 << 20
#: weight files looked for, in order, when the source is a directory
DIRECTORY_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.pth", "model.npz")

NUMPY_DTYPES = {
    np.dtype(np.float64): torch.float64,
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}

Shape = tuple[int, ...]


class Checkpoint:
    """A read-only checkpoint: ``keys()``, ``shape(k)``, ``dtype(k)`` up front, ``tensor(k)`` on demand."""

    container = "?"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wrapper: str | None = None  # e.g. "state_dict_ema" when unwrapped from a train.py checkpoint
        self.side_config: dict[str, Any] = {}  # config.json beside the weights, when read from a directory
        self.preprocess_config: dict[str, Any] = {}  # preprocessor_config.json (Hugging Face), when present
        self.train_args: dict[str, Any] = {}  # the ``args`` a timm train.py checkpoint stores (model, model_kwargs)
        self._raw: dict[str, str] = {}  # clean name -> name in the file
        self._shapes: dict[str, Shape] = {}
        self._dtypes: dict[str, torch.dtype] = {}

    # --- what every container provides -----------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self._raw)

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def shape(self, key: str) -> Shape:
        return self._shapes[key]

    def dtype(self, key: str) -> torch.dtype:
        return self._dtypes[key]

    def meta(self, key: str) -> torch.Tensor:
        """A storage-less tensor with this entry's shape and dtype (for planning)."""
        return torch.empty(self._shapes[key], dtype=self._dtypes[key], device="meta")

    def tensor(self, key: str) -> torch.Tensor:
        """Read one tensor."""
        try:
            return self._read(key)
        except ConversionError:
            raise
        except Exception as err:  # a file that changed or broke after it was opened
            raise ConversionError(f"cannot read tensor {key!r}: {err}", self.path) from None

    def release(self, key: str) -> None:
        """Say that ``key`` has been consumed, so its memory can be given back."""

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every tensor, in memory (for verification, which builds whole models anyway)."""
        return {key: self.tensor(key) for key in self._raw}

    def close(self) -> None:
        pass

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- helpers for the containers ----------------------------------------------------------------
    def _read(self, key: str) -> torch.Tensor:
        raise NotImplementedError

    def _set_entries(self, entries: Mapping[str, tuple[Shape, torch.dtype]], prefixes: tuple[str, ...]) -> None:
        for raw_key, (shape, dtype) in entries.items():
            key = strip_prefixes(raw_key, prefixes)
            if key in self._raw:
                raise ConversionError(
                    f"keys {self._raw[key]!r} and {raw_key!r} both name {key!r} once the "
                    f"{'/'.join(prefixes)} prefixes are removed",
                    self.path,
                )
            self._raw[key] = raw_key
            self._shapes[key] = tuple(int(d) for d in shape)
            self._dtypes[key] = dtype
        if not self._raw:
            raise ConversionError("holds no tensors", self.path)


def safetensors_header(path: os.PathLike | str) -> dict[str, tuple[Shape, str]]:
    """Names -> (shape, dtype name) from a safetensors file's header, validated by the safetensors library
    (header, dtypes, byte ranges); no tensor is read. A damaged file raises ``ValueError`` with the reason."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {k: (tuple(handle.get_slice(k).get_shape()), handle.get_slice(k).get_dtype()) for k in handle.keys()}
    except Exception as err:  # SafetensorError for a bad header, sizes or offsets; OSError, ...
        raise ValueError(str(err)) from None


def strip_prefixes(key: str, prefixes: tuple[str, ...]) -> str:
    """Remove wrapper prefixes, in any order and nesting (``_orig_mod.module.x`` -> ``x``)."""
    stripped = True
    while stripped:
        stripped = False
        for prefix in prefixes:
            if key.startswith(prefix):
                key, stripped = key[len(prefix) :], True
    return key


class SafetensorsCheckpoint(Checkpoint):
    container = "safetensors"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            entries = safetensors_header(path)
        except ValueError as err:
            raise ConversionError(f"not a valid safetensors file (truncated or corrupt?): {err}", path) from None
        header_size = struct.unpack("<Q", _read_exactly(path, 0, 8))[0]
        header = json.loads(_read_exactly(path, 8, header_size))
        self._data_start = 8 + header_size
        self._offsets = {key: tuple(header[key]["data_offsets"]) for key in entries}
        typed = {}
        for key, (shape, dtype_name) in entries.items():
            if dtype_name not in SAFETENSORS_DTYPES:
                raise ConversionError(
                    f"tensor {key!r} has dtype {dtype_name}, which is not supported "
                    f"(expected one of {', '.join(SAFETENSORS_DTYPES)})",
                    path,
                )
            typed[key] = (shape, SAFETENSORS_DTYPES[dtype_name])
        self._set_entries(typed, KEY_PREFIXES)
        with open(path, "rb") as handle:
            # a private (copy-on-write) mapping: tensors are views of it, nothing is copied on read,
            # and pages of written tensors are given back with madvise
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)

    def _span(self, key: str) -> tuple[int, int]:
        begin, end = self._offsets[self._raw[key]]
        return self._data_start + begin, end - begin

    def _read(self, key: str) -> torch.Tensor:
        start, size = self._span(key)
        shape, dtype = self._shapes[key], self._dtypes[key]
        if size == 0:
            return torch.empty(shape, dtype=dtype)
        count = size // torch.empty((), dtype=dtype).element_size()
        return torch.frombuffer(self._map, dtype=dtype, count=count, offset=start).reshape(shape)

    def release(self, key: str) -> None:
        release_mapped_range(self._map, *self._span(key))

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # tensors handed out still view the mapping; it closes when they are freed
            pass


class TorchCheckpoint(Checkpoint):
    container = "torch"

    def __init__(self, path: Path, ema: bool, is_zip: bool) -> None:
        super().__init__(path)
        obj = _torch_load(path, mmap=is_zip)
        state_dict, self.wrapper = _unwrap(obj, ema, path)
        if isinstance(obj, Mapping) and isinstance(obj.get("args"), argparse.Namespace):
            self.train_args = vars(obj["args"])
        self._tensors = state_dict
        self._set_entries({k: (tuple(v.shape), v.dtype) for k, v in state_dict.items()}, KEY_PREFIXES)
        self._pages = PageReleaser(str(path)) if is_zip else None

    def _read(self, key: str) -> torch.Tensor:
        return self._tensors[self._raw[key]]

    def release(self, key: str) -> None:
        if self._pages is not None:
            self._pages.release(self._tensors[self._raw[key]])

    def close(self) -> None:
        self._tensors = {}


class StateDictCheckpoint(Checkpoint):
    """A state dict already in memory (what timm's loaders hand to ``checkpoint_filter_fn``)."""

    container = "state dict"

    def __init__(self, state_dict: Mapping[str, Any], label: str = "state dict") -> None:
        super().__init__(Path(label))
        tensors, self.wrapper = _unwrap(state_dict, False, self.path)
        self._tensors = {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for k, v in tensors.items()}
        self._set_entries({k: (tuple(v.shape), v.dtype) for k, v in self._tensors.items()}, KEY_PREFIXES + NPZ_PREFIXES)

    def _read(self, key: str) -> torch.Tensor:
        return self._tensors[self._raw[key]]


class NpzCheckpoint(Checkpoint):
    container = "npz"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._npz = np.load(path, allow_pickle=False)
        except Exception as err:  # zipfile, zlib and numpy each have their own error types for damage
            raise ConversionError(f"not a readable .npz archive (truncated or corrupt?): {_brief(err)}", path) from None
        try:
            if not isinstance(self._npz, np.lib.npyio.NpzFile):
                raise ConversionError("is a single .npy array, not an .npz archive of named arrays", path)
            size = path.stat().st_size
            check_expansion(self._npz.zip.infolist(), size, path)
            entries = {key: _npy_member(self._npz.zip, key, size, path) for key in self._npz.files}
        except ConversionError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise ConversionError(f"not a readable .npz archive (truncated or corrupt?): {_brief(err)}", path) from None
        self._set_entries(entries, NPZ_PREFIXES)

    def _read(self, key: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self._npz[self._raw[key]]))

    def close(self) -> None:
        if isinstance(self._npz, np.lib.npyio.NpzFile):
            self._npz.close()


def _read_exactly(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(size)
    if len(data) != size:
        raise ConversionError("is truncated", path)
    return data


def check_expansion(members: list[zipfile.ZipInfo], archive_size: int, path: Path) -> None:
    """The whole archive's budget: all members together may not expand past ``NPZ_MAX_EXPANSION`` times the
    file (beyond ``NPZ_EXPANSION_FLOOR``), however the bytes are split between them. Checked from the zip
    directory, before any member is decompressed."""
    total = sum(info.file_size for info in members)
    if total > NPZ_EXPANSION_FLOOR and total > NPZ_MAX_EXPANSION * max(archive_size, 1):
        raise ConversionError(
            f"its {len(members)} members would decompress from {archive_size:,} to {total:,} bytes in all (more than "
            f"{NPZ_MAX_EXPANSION}x): a decompression bomb, not weights; refused before decompressing anything",
            path,
        )


def _npy_member(archive: zipfile.ZipFile, key: str, archive_size: int, path: Path) -> tuple[Shape, torch.dtype]:
    """Shape and dtype of one ``.npz`` member, from its header; refuses members that would expand past reason.

    Checked before a byte of array data is read: the member lies inside the file, its header's shape
    accounts for exactly the bytes the member holds, and it does not decompress to more than
    ``NPZ_MAX_EXPANSION`` times its stored size (beyond ``NPZ_EXPANSION_FLOOR``): numeric weights
    barely compress, so a member that does is a decompression bomb, not a checkpoint.
    """
    info = archive.getinfo(key + ".npy")
    if info.header_offset + info.compress_size > archive_size:
        raise ConversionError(
            f"array {key!r} claims {info.compress_size} stored bytes, past the end of the "
            f"{archive_size}-byte file (truncated?)",
            path,
        )
    if info.file_size > NPZ_EXPANSION_FLOOR and info.file_size > NPZ_MAX_EXPANSION * max(info.compress_size, 1):
        raise ConversionError(
            f"array {key!r} would decompress from {info.compress_size} to {info.file_size} bytes (more than "
            f"{NPZ_MAX_EXPANSION}x): a decompression bomb, not weights; refused before decompressing it",
            path,
        )
    with archive.open(info) as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
        header_size = handle.tell()
    if dtype.hasobject or dtype not in NUMPY_DTYPES:
        raise ConversionError(
            f"array {key!r} has dtype {dtype}, which is not a plain numeric array "
            f"(object arrays are pickles and are never loaded)",
            path,
        )
    claimed = math.prod(shape) * dtype.itemsize  # Python integers: no overflow, whatever the header says
    if claimed != info.file_size - header_size:
        raise ConversionError(
            f"array {key!r} has a header claiming shape {tuple(shape)} {dtype} ({claimed} bytes), "
            f"but the member holds {info.file_size - header_size} bytes of data",
            path,
        )
    return tuple(shape), NUMPY_DTYPES[dtype]


def _brief(err: BaseException) -> str:
    """``Type: first line`` of a library's error, for messages about damaged files."""
    first = str(err).strip().split("\n")[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _torch_load(path: Path, mmap: bool) -> Any:
    # timm's train.py stores its argparse.Namespace under "args": the one non-tensor global allowed
    allow = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allow([argparse.Namespace]) if allow else contextlib.nullcontext():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL\s+([\w.]+)", str(err))
        unsafe = f"it asks for {found.group(1)}" if found else str(err).strip().split("\n")[0]
        raise ConversionError(
            f"refused to unpickle: it needs more than tensors ({unsafe}). Checkpoints are loaded with "
            f"torch.load(weights_only=True), which never runs code from the file. If this is a whole model "
            f"saved with torch.save(model), save model.state_dict() instead",
            path,
        ) from None
    except Exception as err:  # weights_only's unpickler fails on damage with many types (IndexError, struct.error ...)
        raise ConversionError(f"not a readable torch checkpoint (truncated or corrupt?): {_brief(err)}", path) from None


def _describe(obj: Any) -> str:
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _unwrap(obj: Any, ema: bool, path: Path) -> tuple[dict[str, torch.Tensor], str | None]:
    """The state dict inside a checkpoint: itself, or under state_dict/model (or the EMA keys)."""
    if not isinstance(obj, Mapping):
        raise ConversionError(
            f"holds {_describe(obj)}, not a state dict (a mapping of parameter names to tensors)", path
        )
    wrapper = None
    if ema:
        wrapper = next((k for k in EMA_KEYS if isinstance(obj.get(k), Mapping)), None)
        if wrapper is None:
            raise ConversionError(
                f"EMA weights requested but there is no {' or '.join(EMA_KEYS)} in it "
                f"(top-level keys: {listed(obj, 8)})",
                path,
            )
    elif not any(isinstance(v, torch.Tensor) for v in obj.values()):
        wrapper = next((k for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
    state_dict = obj[wrapper] if wrapper else obj
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            where = f" under {wrapper!r}" if wrapper else ""
            raise ConversionError(
                f"is not a state dict: entry {key!r}{where} is {_describe(value)}, not a tensor (expected a "
                f"mapping of parameter names to tensors, or a training checkpoint holding one under "
                f"{' / '.join(WRAPPER_KEYS + EMA_KEYS)}; top-level keys: {listed(obj, 8)})",
                path,
            )
    return dict(state_dict), wrapper


def _sniff(path: Path) -> str:
    """Which container a file is, from its first bytes (not its name)."""
    with open(path, "rb") as handle:
        head = handle.read(9)
    if not head:
        raise ConversionError("is empty", path)
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
                check_expansion(archive.infolist(), path.stat().st_size, path)
        except ConversionError:
            raise
        except Exception as err:  # BadZipFile, but also UnicodeDecodeError, NotImplementedError ... on damage
            raise ConversionError(f"is a damaged zip archive (truncated?): {_brief(err)}", path) from None
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


def open_checkpoint(path: os.PathLike, ema: bool = False) -> Checkpoint:
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
