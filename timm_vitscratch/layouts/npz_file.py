"""numpy ``.npz`` archives (JAX checkpoints), read through the gate (:mod:`timm_vitscratch.gate.npz_data`):
plain numeric arrays only, shapes from each member's header, the archive's expansion bounded before
anything is decompressed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..gate.npz_data import NpzData
from .checkpoint import NPZ_PREFIXES, Checkpoint, gate_error


class NpzCheckpoint(Checkpoint):
    container = "npz"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._npz = NpzData(path, gate_error(path))
        try:
            self._set_entries(self._npz.entries, NPZ_PREFIXES)
        except BaseException:
            self._npz.close()
            raise

    def _read(self, key: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self._npz.array(self._raw[key])))

    def close(self) -> None:
        self._npz.close()
