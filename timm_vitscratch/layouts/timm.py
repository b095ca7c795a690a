"""timm ViT / DeiT state dicts, and timm's ``Eva`` (DINOv3, EVA02, PE: its names are those families'): our parameter
names are timm's, so the key map is the identity."""

from __future__ import annotations

import re

from ..errors import ConversionError
from .baai_eva import eva_prefix
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule
from .layout import Layout, Resample
from .meta_dinov3 import MARKERS as META_DINOV3_MARKERS

#: timm ViT features the scratch ViT has no option for: key pattern -> what the feature is (a norm in the patch
#: embedding it has: ``embed_norm_layer``, AIMv2's)
UNSUPPORTED_FEATURES = ((r"\.(attn\.norm|mlp\.norm)\.", "scale norms inside attention/MLP (attn.norm / mlp.norm)"),)


class TimmLayout(Layout):
    name = "timm"
    library = "timm"
    block_pattern = r"^blocks\.(\d+)\."
    example_keys = ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "pos_embed")
    resample = Resample("bicubic", antialias=True)  # timm's checkpoint_filter_fn

    def detect(self, keys: set[str]) -> bool:
        return (
            "patch_embed.proj.weight" in keys
            and any(k.startswith("blocks.") for k in keys)
            and not any(marker in keys for marker in META_DINOV3_MARKERS)  # Meta's DINOv3 names: source meta_dinov3
            and eva_prefix(keys) is None  # BAAI's EVA02 names: source baai_eva
        )

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        return {key: Rule.rename(key) for key in keys}

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        # Eva's EVA02 (separate q/k/v) has its scale norms where the scratch ViT's EVA02 has them
        eva02 = "blocks.0.attn.q_proj.weight" in checkpoint
        for pattern, feature in UNSUPPORTED_FEATURES[eva02:]:
            hits = [k for k in checkpoint.keys() if re.search(pattern, k)]
            if hits:
                raise ConversionError(
                    f"this timm model has {feature} ({hits[0]!r}), which the scratch ViT does not have",
                    checkpoint.path,
                )
        return set()


#: the layout of source timm (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = TimmLayout()
