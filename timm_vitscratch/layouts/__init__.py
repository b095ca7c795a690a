"""What the loader knows of checkpoint layouts: reading checkpoint files, telling the layout from key
names, and the key maps (renames and small tensor operations) onto the scratch ViT's names.

A leaf of the package: plain data and small functions over ``torch`` tensors. Nothing here builds a
model or imports torchvision or transformers, so ``models`` (the loader) and ``convert`` (which adds
reference models, verification and export) both build on it.
"""

from .checkpoint import Checkpoint, StateDictCheckpoint
from .detect import LAYOUTS, detect_layout
from .layout import Layout, Resample
from .reader import open_checkpoint

__all__ = [
    "LAYOUTS",
    "Checkpoint",
    "Layout",
    "Resample",
    "StateDictCheckpoint",
    "detect_layout",
    "open_checkpoint",
]
