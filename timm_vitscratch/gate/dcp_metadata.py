"""A Distributed Checkpoint's ``.metadata``: a pickle, read bounded and with only DCP's own record types.

DCP's ``FileSystemReader`` reads ``.metadata`` with a plain ``pickle.load`` (its tensor shards it reads with
``torch.load(weights_only=True)``). Here the file is read with a bound on its size, and the unpickler's
``find_class`` knows only what DCP writes there: its metadata dataclasses, ``torch.Size``, torch's dtypes and
layouts, memory-format codes and a path. Anything else is refused by name, so nothing else can be built or called.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata

from .files import ErrorType, read_bytes

#: bytes of one ``.metadata`` (a few hundred bytes per tensor chunk: about 100,000 chunks)
MAX_METADATA_BYTES = 64 << 20
#: what DCP's metadata pickle refers to, by (module, name)
ALLOWED = {
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "ChunkStorageMetadata",
            "BytesStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
}


class _Refused(Exception):
    pass


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Refused(f"{module}.{name}")


def read_dcp_metadata(path: str | Path, error: ErrorType) -> Metadata:
    """The ``Metadata`` of ``path`` (a checkpoint's ``.metadata``), or ``error`` saying what was wrong."""
    path = Path(path)
    data = read_bytes(path, MAX_METADATA_BYTES, error)
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data)).load()
    except _Refused as refused:
        raise error(f"{path}: a checkpoint's metadata may not refer to {refused}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise error(f"{path}: not a checkpoint's metadata ({type(err).__name__}: {err})") from None
    if not isinstance(metadata, Metadata):
        raise error(f"{path}: not a checkpoint's metadata (a {type(metadata).__name__})")
    return metadata
