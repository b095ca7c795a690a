"""Streaming writers: the file layout is fixed from shapes first, then one tensor at a time is produced and written.

Every writer goes through ``files.atomic_write`` (temporary name, fsync, rename), so a failed or
killed write never replaces an existing file. Peak memory is one tensor (plus whatever its producer
needs), never the whole model.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
import zipfile
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

import numpy as np
import torch

from .errors import ConversionError
from .files import PathLike, atomic_write
from .gate.safetensors_data import SAFETENSORS_DTYPES

#: Byte alignment of PyTorch's CPU allocator (c10's ``gAlignment``). A safetensors file written here puts
#: its tensors at multiples of it where their sizes allow, so that a memory-mapped load uses them in place
#: (models/storage.py copies a CPU tensor that is not aligned).
CPU_ALIGNMENT = 64
SAFETENSORS_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}
#: the dtype names weights may have (a model's tensors are floating point)
FLOAT_NAMES = tuple(name for name, dtype in SAFETENSORS_DTYPES.items() if dtype.is_floating_point)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the output, known before any data is read."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


Producer = Callable[[TensorSpec], torch.Tensor]


def _checked(spec: TensorSpec, tensor: torch.Tensor) -> torch.Tensor:
    if tuple(tensor.shape) != spec.shape or tensor.dtype != spec.dtype:
        raise ConversionError(
            f"tensor {spec.name!r} came out as {tuple(tensor.shape)} {tensor.dtype}, but the file "
            f"layout planned {spec.shape} {spec.dtype}"
        )
    return tensor.contiguous()


def _raw_bytes(tensor: torch.Tensor) -> memoryview:
    if sys.byteorder != "little":  # safetensors and .npy headers below are written little-endian
        raise ConversionError("writing checkpoints needs a little-endian machine")
    if tensor.numel() == 0:
        return memoryview(b"")
    return tensor.reshape(-1).view(torch.uint8).numpy().data


def safetensors_header(specs: Iterable[TensorSpec], metadata: dict[str, str] | None = None) -> bytes:
    """The complete header for tensors written in ``specs`` order: length prefix + JSON, padded with spaces
    so that the data starts at a multiple of ``CPU_ALIGNMENT`` (the format asks for 8)."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for spec in specs:
        if spec.name in header:
            raise ConversionError(f"tensor name {spec.name!r} appears twice")
        header[spec.name] = {
            "dtype": SAFETENSORS_NAMES[spec.dtype],
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % CPU_ALIGNMENT)
    return struct.pack("<Q", len(encoded)) + encoded


class _HashingWriter:
    """Writes to a file and hashes what it writes: the sha256 of the finished file, with no re-read.

    Hashing runs on a second thread (hashlib releases the GIL), overlapping the write of the same
    bytes and the reading of the next tensor. At most one buffer waits to be hashed, so memory stays
    at about two tensors. ``done(tag)`` is called once a buffer has been both written and hashed.
    """

    def __init__(self, handle: IO[bytes], done: Callable[[TensorSpec | None], None]) -> None:
        self.handle = handle
        self._done = done
        self._digest = hashlib.sha256()
        self._hasher = ThreadPoolExecutor(max_workers=1)
        self._pending: tuple[Future, TensorSpec | None] | None = None

    def write(self, data: bytes | memoryview, tag: TensorSpec | None = None) -> None:
        self._wait()
        self._pending = (self._hasher.submit(self._digest.update, data), tag)
        self.handle.write(data)

    def _wait(self) -> None:
        if self._pending is not None:
            future, tag = self._pending
            future.result()
            self._pending = None
            self._done(tag)

    def hexdigest(self) -> str:
        self._wait()
        return self._digest.hexdigest()

    def close(self) -> None:
        self._hasher.shutdown(wait=True)


def write_safetensors(
    path: PathLike,
    specs: list[TensorSpec],
    produce: Producer,
    metadata: dict[str, str] | None = None,
    written: Callable[[TensorSpec], None] | None = None,
) -> str:
    """Write a safetensors file tensor by tensor; returns its sha256.

    Tensors whose byte size is a multiple of ``CPU_ALIGNMENT`` come first (in ``specs`` order), then the
    others: the format allows no gaps, so this keeps all the former aligned. ``written(spec)``, when given,
    is called as soon as that tensor is on its way to disk and hashed, so whatever memory produced it can
    be given back.
    """
    specs = sorted(specs, key=lambda spec: spec.nbytes % CPU_ALIGNMENT != 0)

    def release(spec: TensorSpec | None) -> None:  # the header's buffer carries no spec
        if spec is not None and written is not None:
            written(spec)

    header = safetensors_header(specs, metadata)
    with atomic_write(path, "wb") as handle:
        out = _HashingWriter(handle, release)
        try:
            out.write(header)
            for spec in specs:
                out.write(_raw_bytes(_checked(spec, produce(spec))), tag=spec)
            sha256 = out.hexdigest()
        finally:
            out.close()
    return sha256


def write_npz(path: PathLike, specs: list[TensorSpec], produce: Producer) -> None:
    """Write a numpy ``.npz`` (uncompressed, as ``numpy.savez``) one member at a time."""
    with atomic_write(path, "wb") as handle:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
            for spec in specs:
                tensor = _checked(spec, produce(spec))
                if tensor.dtype == torch.bfloat16:
                    raise ConversionError("numpy has no bfloat16: export to .npz as float32 or float16")
                with archive.open(spec.name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, tensor.numpy(), allow_pickle=False)


def write_torch(path: PathLike, specs: list[TensorSpec], produce: Producer) -> None:
    """Write a ``torch.save`` state dict (this format needs the whole dict in memory)."""
    state_dict = {spec.name: _checked(spec, produce(spec)).clone() for spec in specs}
    with atomic_write(path, "wb") as handle:
        torch.save(state_dict, handle)
