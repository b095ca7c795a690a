"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""
from .models.layers import Attention, Block, DropPath, Mlp, PatchEmbed
from .models.variants import ARCHITECTURES
from .models.checkpoint_filter import checkpoint_filter_fn
from .models.vision_transformer import VisionTransformer

__version__ = "0.1.0"
__all__ = [
    "ARCHITECTURES", "Attention", "Block", "DropPath", "Mlp", "PatchEmbed", "VisionTransformer",
    "checkpoint_filter_fn", "__version__",
]
