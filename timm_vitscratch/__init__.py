"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""
from .layers import Attention, Block, DropPath, Mlp, PatchEmbed
from .variants import ARCHITECTURES
from .vision_transformer import VisionTransformer, checkpoint_filter_fn

__version__ = "0.1.0"
__all__ = [
    "ARCHITECTURES", "Attention", "Block", "DropPath", "Mlp", "PatchEmbed", "VisionTransformer",
    "checkpoint_filter_fn", "__version__",
]
