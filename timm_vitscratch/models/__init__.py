"""The model zoo: layers, the Vision Transformer, the registered variants and their pretrained cfgs."""

from .attention import Attention
from .block import Block, TransformerBlock
from .checkpoint_filter import checkpoint_filter_fn
from .layers import DropPath, Mlp
from .patch_embed import PatchEmbed
from .registry import register_variants  # noqa: F401  (importing it registers the zoo with timm)
from .variants import ARCHITECTURES
from .vision_transformer import VisionTransformer

__all__ = [
    "ARCHITECTURES",
    "Attention",
    "Block",
    "DropPath",
    "Mlp",
    "PatchEmbed",
    "TransformerBlock",
    "VisionTransformer",
    "checkpoint_filter_fn",
]
