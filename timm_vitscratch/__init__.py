"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""

from .models.checkpoint_filter import checkpoint_filter_fn
from .models.layers import Attention, Block, DropPath, Mlp, PatchEmbed
from .models.variants import ARCHITECTURES
from .models.vision_transformer import VisionTransformer
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
