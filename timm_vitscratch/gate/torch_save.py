"""``torch.save`` files (the zip format, and the older single-stream format), loaded only once every tensor
they describe is within bounds.

The file is opened once. Its pickle is read as tensor records (:mod:`.torch_pickle`, nothing run), and the
records are checked (:mod:`.checkpoints`): at most :data:`~.checkpoints.MAX_TENSORS` tensors, each a
view that stays inside its storage and stores each element once (no stride-0 expansion), every storage
backed by exactly its bytes in the file, and all tensors together reading the stored bytes at most
:data:`~.checkpoints.MAX_REUSE` times. Only then does ``torch.load(weights_only=True)`` run (memory-mapped
for the zip format) on that same open file, and what it built must be what the records said. A
single-stream file is not given to ``torch.load``: its storages follow the pickle as raw records (an element
count, then the bytes), so while they are checked the offset of each is noted, and
:func:`open_legacy_torch_file` reads each tensor's bytes, and only those, when it is asked for.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pickle
import reprlib
import sys
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO

import torch

from .checkpoints import (
    check_count,
    check_reuse,
    check_shape,
    check_view,
    descriptor_path,
    logical_bytes,
    open_checkpoint_file,
)
from .files import ErrorType, PathLike
from .torch_pickle import (
    MAX_PICKLE_BYTES,
    MAX_PICKLE_OPS,
    Incomplete,
    Namespace,
    Refused,
    StorageRecord,
    TensorRecord,
    UnsafeGlobal,
    check_ops_per_tensor,
    new_budget,
    unpickle,
    walk,
)
from .zip_archive import check_member, open_archive, read_member

#: the first two pickles of the single-stream format: torch's magic number and format version
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_VERSION = 1001
#: bytes of the small pickles before the single-stream format's main one (its magic number, version, sys info)
_SMALL_PICKLE_BYTES = 1 << 20
#: bytes read for a pickle at first (then four times more while it goes on, up to its bound)
_FIRST_READ = 1 << 16


def refused_to_unpickle(path: PathLike, name: str) -> str:
    return (
        f"{path}: refused to unpickle: it needs more than tensors (it asks for {name}). Checkpoints are "
        f"read as tensors only, then loaded with torch.load(weights_only=True), which never runs code from "
        f"the file. If this is a whole model saved with torch.save(model), save model.state_dict() instead"
    )


def load_torch_file(path: PathLike, error: ErrorType, zip_format: bool) -> Any:
    """What ``torch.save`` stored in ``path``, once its tensor records pass the bounds (see the module).

    ``argparse.Namespace`` (timm's train.py stores its ``args``) is the one object allowed besides tensors,
    containers and plain values. Any refusal is ``error("<path>: ...")``. A single-stream file is loaded
    whole here; :func:`open_legacy_torch_file` reads one tensor at a time.
    """
    with open_checkpoint_file(path, error) as handle:
        _, records, _ = _checked_records(handle, path, error, zip_format)
        loaded = _torch_load(handle, path, error, zip_format)
    _same_tensors(loaded, records, path, error)
    return loaded


def open_legacy_torch_file(path: PathLike, error: ErrorType) -> LegacyTorchFile:
    """A single-stream (``_use_new_zipfile_serialization=False``) ``torch.save`` file whose tensor records pass
    the bounds, kept open to read one tensor at a time (:class:`LegacyTorchFile`); the caller closes it."""
    if sys.byteorder != "little":  # torch writes the storages little-endian: let torch.load swap them
        return LegacyTorchFile(load_torch_file(path, error, zip_format=False), None, {}, path, error)
    handle = open_checkpoint_file(path, error)
    try:
        tree, _, offsets = _checked_records(handle, path, error, zip_format=False)
        sources: dict[int, tuple[TensorRecord, int]] = {}
        built = _placeholders(tree, sources, offsets, {})
    except BaseException:
        handle.close()
        raise
    return LegacyTorchFile(built, handle, sources, path, error)


class LegacyTorchFile:
    """What a single-stream ``torch.save`` file holds, its tensors as ``meta`` placeholders (shape and dtype,
    no storage) in :attr:`tree`; :meth:`read` reads one placeholder's bytes, and only those, from the file
    opened once (the storages follow the pickle, each as an element count and its raw little-endian bytes)."""

    def __init__(
        self,
        tree: Any,
        handle: BinaryIO | None,
        sources: dict[int, tuple[TensorRecord, int]],
        path: PathLike,
        error: ErrorType,
    ) -> None:
        self.tree = tree
        self._handle = handle
        self._sources = sources  # id(placeholder) -> its record, and where its storage's bytes start
        self._path = path
        self._error = error

    def read(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor a placeholder of :attr:`tree` stands for, read from the file (a tensor itself if loaded)."""
        source = self._sources.get(id(tensor))
        if source is None or self._handle is None:
            return tensor
        record, start = source
        dtype = record.storage.dtype
        shape, stride = tuple(record.shape), tuple(record.stride)
        if math.prod(shape) == 0:
            return torch.empty(shape, dtype=dtype)
        span = 1 + sum(step * (size - 1) for size, step in zip(shape, stride, strict=True))
        data = bytearray(span * dtype.itemsize)  # the bytes this tensor reaches in its storage, no more
        self._handle.seek(start + record.offset * dtype.itemsize)
        view, got = memoryview(data), 0
        while got < len(data):
            count = self._handle.readinto(view[got:])  # type: ignore[attr-defined]  # an open() in "rb" mode
            if not count:
                raise self._error(
                    f"{self._path}: the file ends inside the bytes of a tensor of shape {shape} (it changed while it "
                    f"was read?)"
                )
            got += count
        view.release()
        return torch.frombuffer(data, dtype=torch.uint8).view(dtype).as_strided(shape, stride)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
        self._sources = {}


def _checked_records(
    handle: BinaryIO, path: PathLike, error: ErrorType, zip_format: bool
) -> tuple[Any, list[tuple[str, TensorRecord]], dict[str, int]]:
    """The pickle's tree of records, its tensors in order, and (single-stream format) where each storage's
    bytes start, once every record is within bounds."""
    budget = new_budget()
    offsets: dict[str, int] = {}
    try:
        if zip_format:
            tree, stored = _zip_records(handle, path, budget, error)
        else:
            tree, stored = _legacy_records(handle, path, budget, error, offsets)
        records = list(walk(tree, TensorRecord, MAX_PICKLE_OPS))
        check_ops_per_tensor(budget, len(records))
    except UnsafeGlobal as err:
        raise error(refused_to_unpickle(path, err.name)) from None
    except Refused as err:
        raise error(f"{path}: {err}") from None
    _check_records(records, stored, path, error)
    return tree, records, offsets


def _placeholders(
    node: Any, sources: dict[int, tuple[TensorRecord, int]], offsets: dict[str, int], done: dict[int, Any]
) -> Any:
    """``node`` with each tensor record a ``meta`` tensor (noted in ``sources``) and each pickled Namespace an
    ``argparse.Namespace``; containers shared in the pickle stay shared. Its nesting was bounded by ``walk``."""
    if id(node) in done:
        return done[id(node)]
    built: Any
    if isinstance(node, TensorRecord):
        built = torch.empty_strided(tuple(node.shape), tuple(node.stride), dtype=node.storage.dtype, device="meta")
        sources[id(built)] = (node, offsets[node.storage.key])
    elif isinstance(node, dict):
        built = type(node)() if isinstance(node, OrderedDict) else {}
        for key, value in node.items():
            built[key] = _placeholders(value, sources, offsets, done)
    elif isinstance(node, list):
        built = [_placeholders(value, sources, offsets, done) for value in node]
    elif isinstance(node, tuple):
        built = tuple(_placeholders(value, sources, offsets, done) for value in node)
    elif isinstance(node, Namespace):
        state = getattr(node, "state", None)
        built = argparse.Namespace()
        state = state if isinstance(state, dict) else {}
        for key, value in state.items():
            if isinstance(key, str):
                setattr(built, key, _placeholders(value, sources, offsets, done))
    else:
        return node
    done[id(node)] = built
    return built


# --- the records, per format --------------------------------------------------------------------------
def _zip_records(handle: BinaryIO, path: PathLike, budget: list[int], error: ErrorType) -> tuple[Any, int]:
    with open_archive(handle, path, error) as archive:
        members = archive.infolist()
        first = members[0].filename if members else ""
        if "/" not in first:
            raise error(f"{path}: is a zip archive, but not a torch.save file (its first member is {first!r})")
        prefix = first.split("/", 1)[0]
        compressed = [info.filename for info in members if info.compress_type != zipfile.ZIP_STORED]
        if compressed:
            raise error(
                f"{path}: its member {compressed[0]!r} is compressed; torch.save stores every member as it is "
                f"(a re-packed or crafted archive)"
            )
        try:
            data = read_member(archive, f"{prefix}/data.pkl", MAX_PICKLE_BYTES, path, error)
        except KeyError:
            raise error(f"{path}: is a zip archive without {prefix}/data.pkl: not a torch.save file") from None
        tree, _, unpickler = unpickle(data, budget, "data.pkl")
        stored = 0
        for key, record in unpickler.storages.items():
            try:
                info = archive.getinfo(f"{prefix}/data/{key}")
            except KeyError:
                raise error(f"{path}: its pickle refers to storage {key!r}, which the archive does not hold") from None
            check_member(info, os.fstat(handle.fileno()).st_size, path, error)
            nbytes = record.numel * record.dtype.itemsize
            if info.file_size != nbytes:
                raise error(
                    f"{path}: storage {key!r} holds {info.file_size:,} bytes, but its pickle says {record.numel:,} "
                    f"elements of {record.dtype} ({nbytes:,} bytes)"
                )
            stored += nbytes
    return tree, stored


def _legacy_records(
    handle: BinaryIO, path: PathLike, budget: list[int], error: ErrorType, offsets: dict[str, int]
) -> tuple[Any, int]:
    size = os.fstat(handle.fileno()).st_size
    position = 0

    def next_pickle(label: str, limit: int, legacy: bool = False) -> tuple[Any, Any]:
        nonlocal position
        cap = min(_FIRST_READ, limit)
        while True:  # read as much as the pickle takes (at most limit), not limit each time
            handle.seek(position)
            chunk = handle.read(cap + 1)
            trial = list(budget)  # a retry with more bytes scans the opcodes again: count them once
            try:
                value, end, unpickler = unpickle(chunk if cap < limit else chunk[:limit], trial, label, legacy)
            except Incomplete:
                if len(chunk) <= cap:  # the file ends here
                    raise
                if cap >= limit:
                    raise Refused(f"its {label} is longer than {limit:,} bytes; at most that many are read") from None
                cap = min(cap * 4, limit)
                continue
            budget[:] = trial
            position += end
            return value, unpickler

    magic, _ = next_pickle("first pickle", _SMALL_PICKLE_BYTES)
    if magic != LEGACY_MAGIC:
        raise Refused("is a pickle, but not a torch.save file (no torch magic number)")
    version, _ = next_pickle("format version", _SMALL_PICKLE_BYTES)
    if version != LEGACY_VERSION:
        raise Refused(f"is a torch.save file of format version {_short(version)}; expected {LEGACY_VERSION}")
    next_pickle("system information", _SMALL_PICKLE_BYTES)
    tree, unpickler = next_pickle("pickle", MAX_PICKLE_BYTES, legacy=True)
    keys, _ = next_pickle("storage list", MAX_PICKLE_BYTES)
    storages: dict[str, StorageRecord] = unpickler.storages
    if not isinstance(keys, list) or sorted(map(str, keys)) != sorted(storages) or len(set(keys)) != len(keys):
        raise Refused(
            f"its storage list names {len(keys) if isinstance(keys, list) else '?'} storages, not the {len(storages)} its pickle uses"
        )
    if any(record.view is not None for record in storages.values()):
        raise Refused("it uses storage views (torch before 1.0 wrote them); re-save it with a current torch")
    stored = 0
    for key in keys:  # each storage: its element count (8 bytes), then its bytes
        record = storages[key]
        handle.seek(position)
        count = int.from_bytes(handle.read(8), "little", signed=True)
        nbytes = record.numel * record.dtype.itemsize
        if count != record.numel:
            raise Refused(
                f"its storage {key!r} is stored with {count:,} elements, but its pickle says {record.numel:,}"
            )
        offsets[str(key)] = position + 8
        position += 8 + nbytes
        if position > size:
            raise Refused(f"its storage {key!r} of {nbytes:,} bytes runs past the end of the file (truncated?)")
        stored += nbytes
    return tree, stored


# --- the bounds, then the load ------------------------------------------------------------------------
def _check_records(records: list[tuple[str, TensorRecord]], stored: int, path: PathLike, error: ErrorType) -> None:
    where = str(path)
    check_count(len(records), where, error)
    logical = 0
    for name, record in records:
        shape = check_shape(name, record.shape, where, error)
        stride = check_shape(name, record.stride, where, error, what="strides")
        check_view(name, shape, stride, record.offset, record.storage.numel, where, error)
        logical += logical_bytes(shape, record.storage.dtype.itemsize)
    check_reuse(logical, stored, where, error)


def _torch_load(handle: BinaryIO, path: PathLike, error: ErrorType, zip_format: bool) -> Any:
    allow = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allow([argparse.Namespace]) if allow else contextlib.nullcontext():
            if zip_format:  # memory-mapped: only a name will do, so the name of the open file
                return torch.load(descriptor_path(handle, path), map_location="cpu", weights_only=True, mmap=True)
            handle.seek(0)
            return torch.load(handle, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise error(refused_to_unpickle(path, str(err).strip().split("\n")[0])) from None
    except Exception as err:  # weights_only's unpickler fails on damage with many types (IndexError, struct.error ...)
        first = str(err).strip().split("\n")[0]
        raise error(
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): {type(err).__name__}: {first}"
        ) from None


def _same_tensors(loaded: Any, records: list[tuple[str, TensorRecord]], path: PathLike, error: ErrorType) -> None:
    """What torch.load built is what the records described: the same tensors, shapes, strides and storages."""
    try:
        tensors = list(walk(loaded, torch.Tensor, MAX_PICKLE_OPS))
    except Refused as err:
        raise error(f"{path}: {err}") from None
    if len(tensors) != len(records):
        raise error(
            f"{path}: torch.load read {len(tensors)} tensors, but the file's pickle describes {len(records)}: the "
            f"file changed while it was read, or its parts disagree"
        )
    for (name, tensor), (expected_name, record) in zip(tensors, records, strict=True):
        storage = record.storage
        if (
            name != expected_name
            or tuple(tensor.shape) != tuple(record.shape)
            or tensor.stride() != tuple(record.stride)
            or tensor.storage_offset() != record.offset
            or tensor.dtype != storage.dtype
            or tensor.untyped_storage().nbytes() != storage.numel * storage.dtype.itemsize
        ):
            raise error(
                f"{path}: torch.load read tensor {name!r} as {tuple(tensor.shape)} {tensor.dtype}, but the file's "
                f"pickle describes {expected_name!r} as {record.shape}: the file changed while it was read, or "
                f"its parts disagree"
            )


def _short(value: object) -> str:
    return reprlib.repr(value)
