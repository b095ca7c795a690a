"""safetensors files, read through the gate (:mod:`timm_vitscratch.gate.safetensors_data`: the header bounded
and checked in full first); tensors are views of a private memory map (nothing copied), and ``release``
gives a written tensor's pages back."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import ConversionError
from ..gate.safetensors_data import SAFETENSORS_DTYPES, SafetensorsData, safetensors_entries
from ..gate.weight_dtypes import check_weight_dtypes
from .checkpoint import KEY_PREFIXES, Checkpoint, Shape, gate_error
from .page_release import release_mapped_range

_INVALID = "not a valid safetensors file: "


def safetensors_header(path: os.PathLike | str) -> dict[str, tuple[Shape, str]]:
    """Names -> (shape, dtype name) from a safetensors file's header, checked by the gate; no tensor is read.
    A damaged or oversized file raises ``ValueError`` with the reason."""

    def error(message: str) -> ValueError:
        return ValueError(message.removeprefix(f"{path}: ").removeprefix(_INVALID))

    return {name: (entry.shape, entry.dtype) for name, entry in safetensors_entries(path, error).items()}


class SafetensorsCheckpoint(Checkpoint):
    container = "safetensors"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._data = SafetensorsData(path, gate_error(path))
        try:
            typed = {}
            for key, entry in self._data.entries.items():
                if entry.dtype not in SAFETENSORS_DTYPES:  # float8, unsigned: never a weight (gate.weight_dtypes)
                    check_weight_dtypes([(key, entry.dtype)], "", lambda m: ConversionError(m, path))
                typed[key] = (entry.shape, SAFETENSORS_DTYPES[entry.dtype])
            self._set_entries(typed, KEY_PREFIXES)
        except BaseException:
            self._data.close()
            raise

    def _read(self, key: str) -> torch.Tensor:
        return self._data.tensor(self._raw[key])

    def release(self, key: str) -> None:
        if self._data.map is not None:
            release_mapped_range(self._data.map, *self._data.span(self._raw[key]))

    def close(self) -> None:
        self._data.close()
