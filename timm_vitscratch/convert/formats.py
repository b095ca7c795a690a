"""The formats ``convert`` reads and writes, by name, and detection that returns one of them."""

from __future__ import annotations

from importlib import import_module

from ..choices import SOURCES
from ..layouts.checkpoint import Checkpoint
from ..layouts.detect import detect_layout
from .source_format import SourceFormat


def _format_of(source: str) -> SourceFormat:
    """``FORMAT`` of ``convert/SOURCE_format.py``: a source is registered by its name in ``choices.SOURCES`` alone."""
    fmt: SourceFormat = import_module(f"{__package__}.{source}_format").FORMAT
    return fmt


#: every format, by the name ``--from`` takes: the layout the loader reads, plus what conversion adds
FORMATS: dict[str, SourceFormat] = {source: _format_of(source) for source in SOURCES}

__all__ = ["FORMATS", "detect_format"]


def detect_format(checkpoint: Checkpoint, requested: str = "auto") -> tuple[SourceFormat, bool]:
    """The checkpoint's format and whether it was detected (True) or given (False)."""
    name, detected = detect_layout(checkpoint, requested)
    return FORMATS[name], detected
