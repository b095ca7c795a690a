"""numpy ``.npz`` archives (JAX checkpoints): plain numeric arrays only (never a pickle), each member's header
checked against the bytes it holds, once the archive's directory and expansion are bounded.

The archive is opened by :func:`.zip_archive.open_archive` (directory size, unique names, expansion). Every
member is an ``.npy`` array, at most :data:`~.checkpoints.MAX_TENSORS` of them; each one's header is read
(at most numpy's 10,000 characters) and must give a numeric dtype and a shape whose logical bytes are
exactly the member's bytes, before a byte of its data is read.
"""

from __future__ import annotations

import zipfile
from typing import Any

import numpy as np
import torch

from .checkpoints import check_count, check_shape, logical_bytes, open_checkpoint_file
from .files import ErrorType, PathLike
from .zip_archive import archive_size, check_member, open_archive

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


class NpzData:
    """An ``.npz`` archive opened once and checked (see the module): :attr:`entries` (name -> (shape, dtype)),
    then :meth:`array` reads one member. Close it (or use ``with``)."""

    def __init__(self, path: PathLike, error: ErrorType) -> None:
        self.path, self._error = path, error
        self._handle = open_checkpoint_file(path, error)
        try:
            self._archive = open_archive(self._handle, path, error)
        except BaseException:
            self._handle.close()
            raise
        try:
            members = self._archive.infolist()
            check_count(len(members), str(path), error)
            odd = [info.filename for info in members if not info.filename.endswith(".npy")]
            if odd or not members:
                raise error(
                    f"{path}: is a zip archive whose member {odd[0] if odd else None!r} is not a numpy .npy array"
                )
            self.entries = {info.filename[: -len(".npy")]: self._header(info) for info in members}
        except BaseException:
            self.close()
            raise

    def _header(self, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], torch.dtype]:
        path, error, key = self.path, self._error, info.filename[: -len(".npy")]
        check_member(info, archive_size(self._archive), path, error)
        try:
            with self._archive.open(info) as handle:
                version = np.lib.format.read_magic(handle)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
                header_size = handle.tell()
        except Exception as err:  # numpy's ValueError for a bad magic or header, zipfile's for damage
            raise error(f"{path}: array {key!r} has no readable .npy header: {type(err).__name__}: {err}") from None
        if dtype.hasobject or dtype not in NUMPY_DTYPES:
            raise error(
                f"{path}: array {key!r} has dtype {dtype}, which is not a plain numeric array "
                f"(object arrays are pickles and are never loaded)"
            )
        shape = check_shape(key, shape, str(path), error)
        claimed = logical_bytes(shape, dtype.itemsize)
        if claimed != info.file_size - header_size:
            raise error(
                f"{path}: array {key!r} has a header claiming shape {shape} {dtype} ({claimed} bytes), "
                f"but the member holds {info.file_size - header_size} bytes of data"
            )
        return shape, NUMPY_DTYPES[dtype]

    def array(self, key: str) -> np.ndarray[Any, Any]:
        """Member ``key``, read (its size was checked against its header when the archive was opened)."""
        with self._archive.open(key + ".npy") as handle:
            return np.lib.format.read_array(handle, allow_pickle=False)

    def close(self) -> None:
        if getattr(self, "_archive", None) is not None:
            self._archive.close()
        self._handle.close()

    def __enter__(self) -> NpzData:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
