"""Checkpoint containers built byte by byte, for the tests of the gate's readers: ``torch.save`` zips and
single-stream files whose pickles claim any storage size, offset, shape and stride, and safetensors files
with any header. ``torch.save`` itself writes only what a real tensor is; these write what a file can say.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

STORAGE_NAMES = {
    torch.float64: "DoubleStorage",
    torch.float32: "FloatStorage",
    torch.float16: "HalfStorage",
    torch.bfloat16: "BFloat16Storage",
    torch.int64: "LongStorage",
    torch.int32: "IntStorage",
    torch.int16: "ShortStorage",
    torch.int8: "CharStorage",
    torch.uint8: "ByteStorage",
    torch.bool: "BoolStorage",
}
SAFETENSORS_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


@dataclass(eq=False)
class Storage:
    """A stored buffer: ``numel`` elements of ``dtype`` as the pickle claims, ``data`` as the file stores it
    (and, in the single-stream format, ``count`` as the element count written before the data)."""

    key: str
    dtype: torch.dtype
    numel: int
    data: bytes = b""
    count: int | None = None

    @classmethod
    def honest(cls, key: str, tensor: torch.Tensor) -> Storage:
        flat = tensor.detach().contiguous().reshape(-1)
        return cls(key, tensor.dtype, flat.numel(), flat.view(torch.uint8).numpy().tobytes())


@dataclass(eq=False)
class Tensor:
    """A tensor record: ``shape`` elements of ``storage`` from ``offset`` with ``stride``, as the pickle says."""

    storage: Storage
    offset: Any
    shape: Any
    stride: Any
    extra: tuple = field(default_factory=tuple)

    def __reduce__(self) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
        args = (self.storage, self.offset, self.shape, self.stride, False, OrderedDict(), *self.extra)
        return torch._utils._rebuild_tensor_v2, args


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, legacy: bool) -> None:
        super().__init__(file, protocol=2)
        self.legacy = legacy

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, Storage):
            return None
        storage_type = getattr(torch, STORAGE_NAMES[obj.dtype])
        if self.legacy:
            return ("storage", storage_type, obj.key, "cpu", obj.numel, None)
        return ("storage", storage_type, obj.key, "cpu", obj.numel)


def pickled(obj: Any, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, legacy).dump(obj)
    return buffer.getvalue()


def storages_of(obj: Any) -> list[Storage]:
    """The storages the tensors in ``obj`` (dicts, lists, tuples) refer to, each once, in order."""
    found: dict[int, Storage] = {}
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, Tensor):
            found.setdefault(id(node.storage), node.storage)
        elif isinstance(node, dict):
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
    return list(found.values())


def _aligned(archive: zipfile.ZipFile, name: str, data: bytes, handle: io.BufferedWriter) -> None:
    """A stored member whose data starts on a 64-byte boundary, as torch.save aligns them."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = handle.tell()
    pad = -(start + 30 + len(name.encode()) + 4) % 64
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad
    archive.writestr(info, data)


def write_torch_zip(path: Path, obj: Any, storages: list[Storage] | None = None, pkl: bytes | None = None) -> Path:
    """A torch.save zip of ``obj`` (holding :class:`Tensor` records); ``pkl`` replaces its pickle when given."""
    storages = storages_of(obj) if storages is None else storages
    with open(path, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
        _aligned(archive, "archive/data.pkl", pickled(obj) if pkl is None else pkl, handle)
        _aligned(archive, "archive/byteorder", b"little", handle)
        for storage in storages:
            _aligned(archive, f"archive/data/{storage.key}", storage.data, handle)
        _aligned(archive, "archive/version", b"3\n", handle)
    return path


def write_torch_legacy(path: Path, obj: Any, storages: list[Storage] | None = None) -> Path:
    """A single-stream torch.save file (``_use_new_zipfile_serialization=False``) of ``obj``."""
    storages = storages_of(obj) if storages is None else storages
    info = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
    parts = [
        pickle.dumps(LEGACY_MAGIC, protocol=2),
        pickle.dumps(1001, protocol=2),
        pickle.dumps(info, protocol=2),
        pickled(obj, legacy=True),
        pickle.dumps([s.key for s in storages], protocol=2),
    ]
    for storage in storages:
        count = storage.numel if storage.count is None else storage.count
        parts.append(struct.pack("<q", count) + storage.data)
    path.write_bytes(b"".join(parts))
    return path


def safetensors_bytes(header: dict[str, Any], data: bytes = b"", header_length: int | None = None) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if header_length is None else header_length) + raw + data


def expected_tensor(tensor: Tensor) -> torch.Tensor:
    """What a reader must return for ``tensor``: its logical elements, read from the stored bytes."""
    storage = tensor.storage
    flat = (
        torch.frombuffer(bytearray(storage.data), dtype=storage.dtype)
        if storage.data
        else torch.empty(0, dtype=storage.dtype)
    )
    return torch.as_strided(flat, tuple(tensor.shape), tuple(tensor.stride), tensor.offset).clone()
