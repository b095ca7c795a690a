"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""

from .models import (
    ARCHITECTURES,
    Attention,
    Block,
    DropPath,
    Mlp,
    PatchEmbed,
    VisionTransformer,
    checkpoint_filter_fn,
)
from .version import __version__

__all__ = [
    "ARCHITECTURES",
    "Attention",
    "Block",
    "DropPath",
    "Mlp",
    "PatchEmbed",
    "VisionTransformer",
    "__version__",
    "checkpoint_filter_fn",
]
