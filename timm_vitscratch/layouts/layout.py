"""What every checkpoint layout tells the loader: detection, depth, the key map, droppable keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, block_indices


@dataclass(frozen=True)
class Resample:
    """How a layout's own library resamples a position table (the loader matches it)."""

    interpolation: str = "bicubic"
    antialias: bool = True
    align_corners: bool | None = None

    def kwargs(self) -> dict[str, Any]:
        return dict(interpolation=self.interpolation, antialias=self.antialias, align_corners=self.align_corners)


class Layout:
    """One library's ViT state-dict layout, as far as loading it into the scratch ViT goes."""

    name = "?"
    library = "?"  # the library that defines the layout, for messages
    block_pattern = r"^$"  # one group capturing the block number
    example_keys: tuple[str, ...] = ()
    resample = Resample()

    def resample_of(self, checkpoint: Checkpoint) -> Resample:
        """How this checkpoint's library resamples its table: the layout's, unless a model kind of it differs."""
        return self.resample

    def detect(self, keys: set[str]) -> bool:
        raise NotImplementedError

    def depth(self, keys: set[str]) -> int:
        indices = block_indices(keys, self.block_pattern)
        missing = sorted(set(range(max(indices) + 1)) - set(indices)) if indices else []
        if missing:
            raise ConversionError(f"missing keys: block(s) {missing} absent while block {max(indices)} is present")
        return len(indices)

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        raise NotImplementedError

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        """Keys that are identity for our model and may be dropped; raise for features we cannot hold."""
        return set()
