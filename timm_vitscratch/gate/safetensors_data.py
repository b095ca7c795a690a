"""safetensors files: the header bounded in bytes and tensors, parsed by :mod:`.json_data`, and checked in
full before any tensor is read or the safetensors library opens the file.

A header is at most :data:`MAX_HEADER_BYTES` and lists at most :data:`~.checkpoints.MAX_TENSORS` tensors
(counted in the raw bytes, before parsing: a 92 MB header of 1.5 million tensors is refused at once).
Each entry has a known dtype, a bounded shape, and ``data_offsets`` spanning exactly its logical bytes;
together they tile the data that follows the header, with no gap, overlap or trailing byte. Then the
safetensors library validates the same file (so timm's own loader reads what passed here), and tensors
are views of one private memory map of that open file: nothing is copied on read.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import safe_open

from .checkpoints import MAX_TENSORS, check_count, check_shape, descriptor_path, logical_bytes, open_checkpoint_file
from .files import ErrorType, PathLike
from .json_data import JsonLimits, parse_json

#: safetensors' dtype names and torch's dtypes: the one table the writers and the readers share
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
#: bytes of a header (a ViT's is a few tens of KB; about 150 bytes a tensor, plus metadata)
MAX_HEADER_BYTES = 16 << 20
#: the header's JSON: per tensor an object, its name, dtype, shape list (up to 8 sizes) and two offsets
HEADER_LIMITS = JsonLimits(max_bytes=MAX_HEADER_BYTES, max_values=16 * MAX_TENSORS + 4096, max_depth=3)

#: the safetensors format's dtypes of whole bytes, and their sizes (readers convert only SAFETENSORS_DTYPES)
DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "F8_E8M0": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "F64": 8,
    "C64": 8,
    "I64": 8,
    "U64": 8,
}


@dataclass(frozen=True)
class Entry:
    """One tensor of the header: its shape, dtype name and bytes ``[begin, end)`` of the data."""

    shape: tuple[int, ...]
    dtype: str
    begin: int
    end: int


def _invalid(path: PathLike, error: ErrorType) -> ErrorType:
    return lambda problem: error(f"{path}: not a valid safetensors file: {problem}")


def _parse_header(raw: bytes, data_size: int, path: PathLike, error: ErrorType) -> dict[str, Entry]:
    invalid = _invalid(path, error)
    count = raw.count(b'"data_offsets"')  # at least one per tensor: an upper bound, before parsing
    if count > MAX_TENSORS:
        raise error(
            f"{path}: its safetensors header lists {count:,} tensors; at most {MAX_TENSORS:,} are read "
            f"(a Vision Transformer has a few hundred)"
        )
    header = parse_json(raw, "its header", invalid, HEADER_LIMITS, unique_keys=True)
    if not isinstance(header, dict):
        raise invalid(f"its header is a JSON {type(header).__name__}; expected an object of tensors")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise invalid("its __metadata__ is not an object of strings")
    check_count(len(header), str(path), error)
    entries = {}
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
            raise invalid(f"tensor {name!r} is {str(info)[:60]}; expected an object with dtype, shape, data_offsets")
        dtype, offsets = info["dtype"], info["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise invalid(f"tensor {name!r} has dtype {str(dtype)[:20]!r}; expected one of {', '.join(DTYPE_SIZES)}")
        shape = check_shape(name, info["shape"], str(path), invalid)
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
        ):
            raise invalid(f"tensor {name!r} has data_offsets {str(offsets)[:60]}; expected [begin, end]")
        nbytes = logical_bytes(shape, DTYPE_SIZES[dtype])
        if offsets[1] - offsets[0] != nbytes:
            raise invalid(
                f"tensor {name!r} of shape {shape} {dtype} is {nbytes:,} bytes, but its data_offsets {offsets} "
                f"span {offsets[1] - offsets[0]:,}"
            )
        entries[name] = Entry(shape, dtype, offsets[0], offsets[1])
    covered = 0  # the tensors tile the data: no gap, no overlap, nothing after the last
    for name, entry in sorted(entries.items(), key=lambda item: (item[1].begin, item[1].end)):
        if entry.begin != covered:
            raise invalid(
                f"tensor {name!r} starts at data byte {entry.begin:,}, but the tensors before it end at "
                f"{covered:,} (a gap or an overlap)"
            )
        covered = entry.end
    if covered != data_size:
        raise invalid(
            f"its tensors take {covered:,} bytes, but {data_size:,} follow the header (truncated, or bytes added?)"
        )
    return dict(sorted(entries.items()))  # by name, as the safetensors library lists them


class SafetensorsData:
    """A safetensors file opened once, its header checked (see the module): :attr:`entries`, then
    :meth:`tensor` views of a private memory map. Close it (or use ``with``)."""

    def __init__(self, path: PathLike, error: ErrorType, inside: PathLike | None = None, mapped: bool = True) -> None:
        self.path = path
        invalid = _invalid(path, error)
        with open_checkpoint_file(path, error, inside) as handle:
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise invalid(f"it is {size} bytes, shorter than the 8 bytes that give its header's length")
            (header_size,) = struct.unpack("<Q", prefix)
            if header_size > MAX_HEADER_BYTES:
                raise error(
                    f"{path}: its safetensors header is {header_size:,} bytes; at most {MAX_HEADER_BYTES:,} are read "
                    f"(a Vision Transformer's is a few tens of KB)"
                )
            if 8 + header_size > size:
                raise invalid(f"its header of {header_size:,} bytes runs past the end of the {size:,}-byte file")
            raw = handle.read(header_size)
            self.entries = _parse_header(raw, size - 8 - header_size, path, error)
            self.data_start = 8 + header_size
            try:  # the library reads this same file the same way (timm's loader uses it)
                with safe_open(descriptor_path(handle, path), framework="pt"):
                    pass
            except Exception as err:  # SafetensorError, OSError ...
                raise invalid(str(err).strip().split("\n")[0]) from None
            # a private (copy-on-write) mapping: tensors are views of it, nothing is copied on read
            self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) if size and mapped else None

    def span(self, name: str) -> tuple[int, int]:
        """(first byte in the file, length) of tensor ``name``."""
        entry = self.entries[name]
        return self.data_start + entry.begin, entry.end - entry.begin

    def tensor(self, name: str) -> torch.Tensor:
        """Tensor ``name`` (a view of the file's mapping; a dtype outside the readers' table raises KeyError)."""
        entry = self.entries[name]
        dtype = SAFETENSORS_DTYPES[entry.dtype]
        start, size = self.span(name)
        if size == 0:
            return torch.empty(entry.shape, dtype=dtype)
        if self.map is None:
            raise ValueError(f"{self.path} was opened for its header only")
        return torch.frombuffer(self.map, dtype=dtype, count=size // dtype.itemsize, offset=start).reshape(entry.shape)

    def close(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # tensors handed out still view the mapping; it closes when they are freed
                pass

    def __enter__(self) -> SafetensorsData:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def safetensors_entries(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> dict[str, Entry]:
    """The checked header of a safetensors file (no tensor is read)."""
    with SafetensorsData(path, error, inside, mapped=False) as data:
        return data.entries
