"""The formats ``convert`` reads and writes, by name, and detection that returns one of them."""

from __future__ import annotations

from ..layouts.checkpoint import Checkpoint
from ..layouts.detect import SOURCE_NAMES, detect_layout
from .jax_format import JaxFormat
from .source_format import SourceFormat
from .timm_format import TimmFormat
from .torchvision_format import TorchvisionFormat
from .transformers_format import TransformersFormat

FORMATS: dict[str, SourceFormat] = {
    fmt.name: fmt for fmt in (TimmFormat(), TorchvisionFormat(), TransformersFormat(), JaxFormat())
}
assert tuple(FORMATS) == SOURCE_NAMES, "every layout the loader reads converts, and nothing else"

__all__ = ["FORMATS", "SOURCE_NAMES", "detect_format"]


def detect_format(checkpoint: Checkpoint, requested: str = "auto") -> tuple[SourceFormat, bool]:
    """The checkpoint's format and whether it was detected (True) or given (False)."""
    name, detected = detect_layout(checkpoint, requested)
    return FORMATS[name], detected
