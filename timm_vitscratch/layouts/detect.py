"""The layouts ``convert`` and the loader read, and telling which one a checkpoint has from its keys."""

from __future__ import annotations

from importlib import import_module

from ..choices import SOURCES
from ..errors import ConversionError, listed
from .checkpoint import Checkpoint
from .layout import Layout


def _layout_of(source: str) -> Layout:
    """``LAYOUT`` of ``layouts/SOURCE.py``: a source is registered by its name in ``choices.SOURCES`` alone."""
    layout: Layout = import_module(f"{__package__}.{source}").LAYOUT
    return layout


#: every layout, by the name ``--from`` takes
LAYOUTS: dict[str, Layout] = {source: _layout_of(source) for source in SOURCES}


def detect_layout(checkpoint: Checkpoint, requested: str = "auto") -> tuple[str, bool]:
    """The name of the checkpoint's layout and whether it was detected (True) or given (False)."""
    if requested != "auto" and requested not in LAYOUTS:
        raise ConversionError(f"unknown source format {requested!r}; expected auto or one of {', '.join(SOURCES)}")
    keys = set(checkpoint.keys())
    found = [layout for layout in LAYOUTS.values() if layout.detect(keys)]
    if requested == "auto":
        if len(found) == 1:
            return found[0].name, True
        expected = "; ".join(f"{f.name}: {', '.join(f.example_keys)}" for f in LAYOUTS.values())
        raise ConversionError(
            f"cannot tell the checkpoint format from its keys ({listed(sorted(keys), 6)}); expected the "
            f"keys of one of — {expected}. Pass --from to say which",
            checkpoint.path,
        )
    layout = LAYOUTS[requested]
    if layout not in found:
        seen = f" (its keys look like {found[0].name})" if found else ""
        raise ConversionError(
            f"--from {requested}: the keys are not {layout.library}'s ViT layout{seen}; expected keys "
            f"such as {', '.join(layout.example_keys)}, found {listed(sorted(keys), 6)}",
            checkpoint.path,
        )
    return requested, False
