"""numpy ``.npz`` archives (JAX checkpoints): ``allow_pickle=False``; shapes come from each member's
header, and the archive's expansion is bounded before anything is decompressed."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import torch

from ..errors import ConversionError
from .checkpoint import NPZ_PREFIXES, Checkpoint, Shape, brief

#: an .npz member larger than the floor may expand at most this many times over its stored size
NPZ_MAX_EXPANSION = 100
NPZ_EXPANSION_FLOOR = 256 << 20

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


class NpzCheckpoint(Checkpoint):
    container = "npz"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._npz = np.load(path, allow_pickle=False)
        except Exception as err:  # zipfile, zlib and numpy each have their own error types for damage
            raise ConversionError(f"not a readable .npz archive (truncated or corrupt?): {brief(err)}", path) from None
        try:
            if not isinstance(self._npz, np.lib.npyio.NpzFile):
                raise ConversionError("is a single .npy array, not an .npz archive of named arrays", path)
            archive = self._npz.zip
            if archive is None:  # numpy sets it to None once the file is closed
                raise ConversionError("the .npz archive was closed while it was being read", path)
            size = path.stat().st_size
            check_expansion(archive.infolist(), size, path)
            entries = {key: _npy_member(archive, key, size, path) for key in self._npz.files}
        except ConversionError:
            self.close()
            raise
        except Exception as err:
            self.close()
            raise ConversionError(f"not a readable .npz archive (truncated or corrupt?): {brief(err)}", path) from None
        self._set_entries(entries, NPZ_PREFIXES)

    def _read(self, key: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self._npz[self._raw[key]]))

    def close(self) -> None:
        if isinstance(self._npz, np.lib.npyio.NpzFile):
            self._npz.close()


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
