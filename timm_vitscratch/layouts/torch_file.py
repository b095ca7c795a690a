"""``torch.save`` files (``.pth``, ``.pt``, ``.bin``, timm's ``.pth.tar``): ``torch.load`` with
``weights_only=True`` (only ``argparse.Namespace`` is allowed besides tensors and containers, for the
``args`` timm's ``train.py`` stores) and ``mmap=True`` for the zip format (pages given back after use,
see ``page_release``)."""

from __future__ import annotations

import argparse
import contextlib
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import ConversionError
from .checkpoint import KEY_PREFIXES, Checkpoint, brief, unwrap
from .page_release import PageReleaser


class TorchCheckpoint(Checkpoint):
    container = "torch"

    def __init__(self, path: Path, ema: bool, is_zip: bool) -> None:
        super().__init__(path)
        obj = _torch_load(path, mmap=is_zip)
        state_dict, self.wrapper = unwrap(obj, ema, path)
        args = obj.get("args") if isinstance(obj, Mapping) else None
        if isinstance(args, argparse.Namespace):
            self.train_args = vars(args)
        self._tensors = state_dict
        self._set_entries({k: (tuple(v.shape), v.dtype) for k, v in state_dict.items()}, KEY_PREFIXES)
        self._pages = PageReleaser(str(path)) if is_zip else None

    def _read(self, key: str) -> torch.Tensor:
        return self._tensors[self._raw[key]]

    def release(self, key: str) -> None:
        if self._pages is not None:
            self._pages.release(self._tensors[self._raw[key]])

    def close(self) -> None:
        self._tensors = {}


def _torch_load(path: Path, mmap: bool) -> Any:
    # timm's train.py stores its argparse.Namespace under "args": the one non-tensor global allowed
    allow = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    try:
        with allow([argparse.Namespace]) if allow else contextlib.nullcontext():
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL\s+([\w.]+)", str(err))
        unsafe = f"it asks for {found.group(1)}" if found else str(err).strip().split("\n")[0]
        raise ConversionError(
            f"refused to unpickle: it needs more than tensors ({unsafe}). Checkpoints are loaded with "
            f"torch.load(weights_only=True), which never runs code from the file. If this is a whole model "
            f"saved with torch.save(model), save model.state_dict() instead",
            path,
        ) from None
    except Exception as err:  # weights_only's unpickler fails on damage with many types (IndexError, struct.error ...)
        raise ConversionError(f"not a readable torch checkpoint (truncated or corrupt?): {brief(err)}", path) from None
