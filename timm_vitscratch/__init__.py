"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""

from .models.attention import Attention
from .models.block import Block
from .models.checkpoint_filter import checkpoint_filter_fn
from .models.layers import DropPath, Mlp
from .models.patch_embed import PatchEmbed
from .models.variants import ARCHITECTURES
from .models.vision_transformer import VisionTransformer

__version__ = "0.1.0"
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
