"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry.
"""

from .gate.json_data import route_timm_configs
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

route_timm_configs()  # timm's local-dir: / hf-hub: config.json reads go through the gate too

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
