"""Give back the pages of a memory-mapped checkpoint once a tensor has been written (the one place
that calls ``madvise``).

Three mappings are released: a Python ``mmap`` of a safetensors file (:func:`release_mapped_range`),
the mapping ``torch.load(mmap=True)`` makes (:class:`PageReleaser`), and, for a load that copies a
checkpoint's tensors (models/storage.py), any file mapping this process has not written to (the one
``safetensors.torch.load_file`` makes for timm's loader: :func:`clean_file_mappings`).

A tensor read through ``torch.load(mmap=True)`` lives in a file mapping; every page it touched
stays in the process's resident set until the mapping goes away, so reading a whole checkpoint
that way ends with the whole file resident. ``madvise(MADV_DONTNEED)`` drops those pages (they
are clean file pages: touching them again just reads the file again). This is only ever applied
to address ranges that ``/proc/self/maps`` shows belong to the checkpoint file's own mapping, so
anonymous memory (which ``MADV_DONTNEED`` would zero) is never touched.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from typing import Any

import torch

_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)


def _libc_madvise() -> Any:
    """libc's madvise as a ctypes function (an untyped foreign function), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


_MADVISE = _libc_madvise()


def _whole_pages(start: int, length: int) -> tuple[int, int]:
    """The whole pages strictly inside ``[start, start + length)``: neighbours may be still in use."""
    page = mmap.PAGESIZE
    return -(-start // page) * page, (start + length) // page * page


def release_mapped_range(mapping: mmap.mmap, start: int, length: int) -> None:
    """Drop the resident pages of bytes ``[start, start + length)`` of a private file mapping."""
    first, last = _whole_pages(start, length)
    if last > first and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)


def file_mappings(path: str) -> list[tuple[int, int]]:
    """Address ranges this process has mapped from ``path`` (Linux; empty elsewhere)."""
    target = os.path.realpath(path)
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].strip() == target:
                    start, end = (int(v, 16) for v in parts[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        return []
    return ranges


def clean_file_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process's file mappings that hold no page it wrote (Linux; empty elsewhere).

    A private mapping's written pages are anonymous copies (smaps' ``Anonymous``, or ``Swap`` once swapped
    out); where there are none, every resident page is the file's own, and dropping it loses nothing.
    """
    ranges: list[tuple[int, int]] = []
    span: tuple[int, int] | None = None
    written = 0
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                head, _, rest = line.partition(" ")
                if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms offset dev inode path"
                    if span is not None and not written:
                        ranges.append(span)
                    fields = rest.split(maxsplit=4)
                    start, end = (int(v, 16) for v in head.split("-"))
                    span = (start, end) if len(fields) == 5 and fields[4].startswith("/") else None
                    written = 0
                elif head in ("Anonymous:", "Swap:"):
                    written += int(rest.split()[0])
    except (OSError, ValueError):
        return []
    if span is not None and not written:
        ranges.append(span)
    return ranges


class PageReleaser:
    """Drops the resident pages of tensors that live inside the mappings of one file (``path``), or,
    with ``path=None``, inside any file mapping this process has not written to (:func:`clean_file_mappings`)."""

    def __init__(self, path: str | None) -> None:
        if _MADVISE is None:
            self.ranges: list[tuple[int, int]] = []
        else:
            self.ranges = file_mappings(path) if path is not None else clean_file_mappings()

    def release(self, tensor: torch.Tensor) -> None:
        if not self.ranges:
            return
        storage = tensor.untyped_storage()
        start, length = storage.data_ptr(), storage.nbytes()
        if length == 0:
            return
        first, last = _whole_pages(start, length)
        if last <= first:
            return
        if any(lo <= first and last <= hi for lo, hi in self.ranges):
            _MADVISE(first, last - first, _MADV_DONTNEED)
