"""What every checkpoint container shares: its file, opened once, and the bounds on what it may claim
about its tensors (counts, shapes, strides and bytes).

A tensor costs its **logical** bytes (shape x dtype size) once it is read, converted or written,
whatever the file stores for it: a stride-0 view of one stored float claims gigabytes from four bytes.
Each container module (:mod:`.safetensors_data`, :mod:`.torch_save`, :mod:`.npz_data`) reads the
claims from the file's header or pickle, checks them here, and only then lets data be read or a
native parser run. Every check raises ``error("<file>: ...")`` naming the tensor, the value and the bound.

The file is opened once (:func:`open_checkpoint_file`) and read through that descriptor, so what is
checked and what is then loaded are the same file, even if its name is pointed elsewhere meanwhile.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Sequence
from typing import BinaryIO

from .files import ErrorType, PathLike, regular_file

#: tensors in one checkpoint: a depth-64 ViT has about 1,300; a train.py checkpoint adds its EMA copy and
#: the optimizer's state (three per parameter for AdamW), about 6,500 in all
MAX_TENSORS = 16_384
#: dimensions of one tensor (a ViT's are at most 4)
MAX_DIMS = 8
#: one dimension's size, one stride or a storage offset (2**48 elements is far past any weight)
MAX_EXTENT = 1 << 48
#: all tensors together may read the stored bytes at most this many times (tied weights read them twice)
MAX_REUSE = 4
#: ... beyond this many logical bytes, under which reuse is not counted
REUSE_FLOOR = 16 << 20


def open_checkpoint_file(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> BinaryIO:
    """``path`` opened for reading once it is a regular file (see :func:`.files.regular_file`); the caller closes it."""
    path = regular_file(path, error, inside)
    try:
        # O_NONBLOCK: if the file was swapped for a FIFO since the check, the open does not hang
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise error(f"{path}: cannot be read: {err.strerror}") from None
    handle = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        handle.close()
        raise error(f"{path}: is not a regular file; expected a file")
    return handle


def descriptor_path(handle: BinaryIO, path: PathLike) -> str:
    """A name that opens the very file ``handle`` has open (``/proc/self/fd/N`` on Linux), for a library
    that takes only names; ``path`` itself where there is no such name."""
    name = f"/proc/self/fd/{handle.fileno()}"
    return name if os.path.exists(name) else os.fspath(path)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(count: int, where: str, error: ErrorType) -> None:
    """At most :data:`MAX_TENSORS` tensors."""
    if count > MAX_TENSORS:
        raise error(
            f"{where}: holds {count:,} tensors; at most {MAX_TENSORS:,} are read "
            f"(a Vision Transformer's training checkpoint has a few thousand)"
        )


def check_shape(name: str, shape: object, where: str, error: ErrorType, what: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of sizes: a list of at most :data:`MAX_DIMS` integers in ``[0, MAX_EXTENT]``."""
    if not isinstance(shape, (list, tuple)) or not all(_is_int(d) for d in shape):
        raise error(f"{where}: tensor {name!r} has {what} {_short(shape)}; expected a list of integers")
    if len(shape) > MAX_DIMS:
        raise error(f"{where}: tensor {name!r} has {len(shape)} dimensions; expected at most {MAX_DIMS}")
    if any(d < 0 or d > MAX_EXTENT for d in shape):
        raise error(
            f"{where}: tensor {name!r} has {what} {tuple(shape)}; expected sizes from 0 to {MAX_EXTENT:,} (2**48)"
        )
    return tuple(shape)


def logical_bytes(shape: Sequence[int], itemsize: int) -> int:
    """Bytes of a tensor of ``shape`` once read (Python integers: no overflow, whatever the file says)."""
    return math.prod(shape) * itemsize


def check_view(
    name: str,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    storage_numel: int,
    where: str,
    error: ErrorType,
) -> None:
    """A tensor that is a view (offset, strides) into a storage of ``storage_numel`` elements: every element
    lies inside the storage, and no two elements share one (a stride-0 or overlapping view repeats stored
    bytes: an expanded tensor, not weights)."""
    if len(stride) != len(shape):
        raise error(f"{where}: tensor {name!r} has {len(shape)} sizes but {len(stride)} strides")
    if not _is_int(offset) or not 0 <= offset <= MAX_EXTENT:
        raise error(f"{where}: tensor {name!r} starts at storage offset {_short(offset)}; expected 0 to {MAX_EXTENT:,}")
    if math.prod(shape) == 0:
        return
    extent = 0  # the furthest element reachable through the dimensions checked so far
    for size, step in sorted(
        ((size, step) for size, step in zip(shape, stride, strict=True) if size > 1), key=lambda d: d[1]
    ):
        if step <= extent:
            raise error(
                f"{where}: tensor {name!r} of shape {shape} has strides {stride}: its elements repeat stored "
                f"values (a stride-0 or overlapping view, e.g. from tensor.expand), so its {math.prod(shape):,} "
                f"elements are not stored in the file; expected each element stored once"
            )
        extent += step * (size - 1)
    if offset + extent >= storage_numel:
        raise error(
            f"{where}: tensor {name!r} of shape {shape} (strides {stride}, offset {offset:,}) reaches element "
            f"{offset + extent:,} of a storage of {storage_numel:,} elements; expected it inside its storage"
        )


def check_reuse(logical: int, stored: int, where: str, error: ErrorType) -> None:
    """All tensors together read the stored bytes at most :data:`MAX_REUSE` times (beyond :data:`REUSE_FLOOR`)."""
    if logical > REUSE_FLOOR and logical > MAX_REUSE * stored:
        raise error(
            f"{where}: its tensors claim {logical:,} bytes in all but the file stores {stored:,} bytes of tensor "
            f"data: the same bytes under many names, more than {MAX_REUSE}x over; expected weights stored once "
            f"(tied weights at most twice)"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
