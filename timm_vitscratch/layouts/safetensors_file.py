"""safetensors files: validated by the safetensors library, then read through a private memory map, so
tensors are views (nothing copied) and ``release`` gives a written tensor's pages back."""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path

import torch
from safetensors import safe_open

from ..errors import ConversionError
from ..tensor_writer import SAFETENSORS_DTYPES
from .checkpoint import KEY_PREFIXES, Checkpoint, Shape
from .page_release import release_mapped_range


def safetensors_header(path: os.PathLike | str) -> dict[str, tuple[Shape, str]]:
    """Names -> (shape, dtype name) from a safetensors file's header, validated by the safetensors library
    (header, dtypes, byte ranges); no tensor is read. A damaged file raises ``ValueError`` with the reason."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {k: (tuple(handle.get_slice(k).get_shape()), handle.get_slice(k).get_dtype()) for k in handle.keys()}
    except Exception as err:  # SafetensorError for a bad header, sizes or offsets; OSError, ...
        raise ValueError(str(err)) from None


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


def _read_exactly(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(size)
    if len(data) != size:
        raise ConversionError("is truncated", path)
    return data
