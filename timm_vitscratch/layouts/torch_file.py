"""``torch.save`` files (``.pth``, ``.pt``, ``.bin``, timm's ``.pth.tar``), read through the gate
(:mod:`timm_vitscratch.gate.torch_save`): the pickle's tensor records are bounded first, then ``torch.load``
runs with ``weights_only=True`` (only ``argparse.Namespace`` is allowed besides tensors and containers,
for the ``args`` timm's ``train.py`` stores) and ``mmap=True`` for the zip format (pages given back after
use, see ``page_release``). A single-stream (legacy) file is not loaded whole: the gate reads each tensor's
bytes from the file when it is asked for (``open_legacy_torch_file``), so both formats are read one tensor
at a time."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

import torch

from ..gate.torch_save import LegacyTorchFile, load_torch_file, open_legacy_torch_file
from .checkpoint import KEY_PREFIXES, Checkpoint, gate_error, unwrap
from .page_release import PageReleaser


class TorchCheckpoint(Checkpoint):
    container = "torch"

    def __init__(self, path: Path, ema: bool, is_zip: bool) -> None:
        super().__init__(path)
        self._stream: LegacyTorchFile | None = None
        if is_zip:
            obj = load_torch_file(path, gate_error(path), zip_format=True)
        else:
            self._stream = open_legacy_torch_file(path, gate_error(path))
            obj = self._stream.tree
        try:
            state_dict, self.wrapper = unwrap(obj, ema, path)
        except BaseException:
            self.close()
            raise
        args = obj.get("args") if isinstance(obj, Mapping) else None
        if isinstance(args, argparse.Namespace):
            self.train_args = vars(args)
        self._tensors = state_dict
        self._set_entries({k: (tuple(v.shape), v.dtype) for k, v in state_dict.items()}, KEY_PREFIXES)
        self._pages = PageReleaser(str(path)) if is_zip else None

    def _read(self, key: str) -> torch.Tensor:
        tensor = self._tensors[self._raw[key]]
        return self._stream.read(tensor) if self._stream is not None else tensor

    def release(self, key: str) -> None:
        if self._pages is not None:
            self._pages.release(self._tensors[self._raw[key]])

    def close(self) -> None:
        self._tensors = {}
        if self._stream is not None:
            self._stream.close()
