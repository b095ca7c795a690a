"""BAAI's original EVA02 checkpoints (``baaivision/EVA``): the MIM-pretrained and fine-tuned image models, EVA-CLIP's
whole CLIP models (the image tower under ``visual.``), and open_clip's EVA02-CLIP (timm's ``Eva`` under
``visual.trunk.``, timm's own names).

BAAI's names are timm's ``Eva`` names but for what timm's importer (``timm.models.eva.checkpoint_filter_fn``)
renames, and so does this map: the SwiGLU's ``w1`` / ``w2`` / ``w3`` are ``fc1_g`` / ``fc1_x`` / ``fc2`` (a packed
``w12`` is ``fc1``), the norms inside the MLP and the attention ``ffn_ln`` / ``inner_attn_ln`` are ``mlp.norm`` /
``attn.norm``, and beside separate ``q_proj`` / ``k_proj`` / ``v_proj`` the ``q_bias`` / ``v_bias`` are their
biases. A MIM checkpoint's final ``norm`` becomes ``fc_norm`` (what the fine-tuned models pool through) and its mask
token and ``lm_head`` (the pretraining target's head) are dropped, as are the rotary tables (``rope.*``: fixed
buffers, rebuilt) and a CLIP model's text tower and logit scale.
"""

from __future__ import annotations

import re

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule
from .layout import Layout
from .meta_dinov3 import MARKERS as META_DINOV3_MARKERS

#: where the image tower's keys are: a vision checkpoint's own, EVA-CLIP's ``visual.``, open_clip's timm trunk
PREFIXES = ("", "visual.", "visual.trunk.")
#: BAAI's names timm's importer renames: pattern -> timm's name (``w12`` before ``w1``: the names overlap)
RENAMES = (
    (re.compile(r"\.mlp\.ffn_ln\."), ".mlp.norm."),
    (re.compile(r"\.attn\.inner_attn_ln\."), ".attn.norm."),
    (re.compile(r"\.mlp\.w12\."), ".mlp.fc1."),
    (re.compile(r"\.mlp\.w1\."), ".mlp.fc1_g."),
    (re.compile(r"\.mlp\.w2\."), ".mlp.fc1_x."),
    (re.compile(r"\.mlp\.w3\."), ".mlp.fc2."),
)
#: keys only BAAI's names have (timm's Eva names have none of them)
ORIGINAL = re.compile(r"^(rope\.|lm_head\.|blocks\.\d+\.(mlp\.(ffn_ln|w12?|w2|w3)|attn\.inner_attn_ln)\.)")
#: a pretraining (MIM) checkpoint's parts that inference never uses, and the fixed rotary tables
TRAINING_ONLY = re.compile(r"^(mask_token|lm_head\..*|rope\..*)$")


def eva_prefix(keys: set[str]) -> str | None:
    """Where a BAAI / open_clip EVA02 image tower's keys are; None for other keys (timm's own Eva names, or
    Meta's DINOv3, which share ``patch_embed`` and ``blocks``)."""
    for prefix in PREFIXES:
        tower = {k[len(prefix) :] for k in keys if k.startswith(prefix)}
        if "patch_embed.proj.weight" not in tower or "pos_embed" not in tower:
            continue
        if any(marker in tower for marker in META_DINOV3_MARKERS):
            return None
        eva = "blocks.0.attn.q_bias" in tower or "blocks.0.attn.q_proj.weight" in tower
        if eva and (prefix or any(ORIGINAL.match(k) for k in tower)):  # unprefixed timm names: source timm
            return prefix
    return None


def timm_name(key: str, separate_qkv: bool, mim: bool) -> str:
    """timm's Eva name for one of BAAI's (after the prefix)."""
    for pattern, name in RENAMES:
        key = pattern.sub(name, key)
    if separate_qkv:
        key = re.sub(r"\.attn\.([qv])_bias$", r".attn.\1_proj.bias", key)
    if mim and key in ("norm.weight", "norm.bias"):
        key = "fc_" + key
    return key


class BaaiEvaLayout(Layout):
    name = "baai_eva"
    library = "BAAI's EVA02 / EVA-CLIP"
    block_pattern = r"^(?:visual\.(?:trunk\.)?)?blocks\.(\d+)\."
    example_keys = ("pos_embed", "blocks.0.attn.q_bias", "blocks.0.mlp.ffn_ln.weight", "rope.freqs_cos")

    def detect(self, keys: set[str]) -> bool:
        return eva_prefix(keys) is not None

    def prefix(self, keys: set[str]) -> str:
        return eva_prefix(keys) or ""

    def depth(self, keys: set[str]) -> int:
        prefix = self.prefix(keys)
        return super().depth({k for k in keys if k.startswith(prefix)})

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        prefix = self.prefix(keys)
        tower = [k[len(prefix) :] for k in keys if k.startswith(prefix)]
        separate = "blocks.0.attn.q_proj.weight" in tower
        mim = "mask_token" in tower and "fc_norm.weight" not in tower
        return {timm_name(k, separate, mim): Rule.rename(prefix + k) for k in tower if not TRAINING_ONLY.match(k)}

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        keys = set(checkpoint.keys())
        prefix = self.prefix(keys)
        if prefix == "visual.trunk.":
            head = sorted(k for k in keys if k.startswith("visual.") and not k.startswith(prefix))
            if head:  # open_clip's own projection after the trunk (timm_proj 'linear' / 'mlp')
                raise ConversionError(
                    f"has a projection of open_clip's after the timm trunk ({head[0]!r}); only open_clip models "
                    f"whose projection is the trunk's own head (timm_proj None, as EVA02-CLIP's) convert",
                    checkpoint.path,
                )
        outside = {k for k in keys if not k.startswith(prefix)}  # a CLIP model's text tower and logit scale
        return outside | {k for k in keys if k.startswith(prefix) and TRAINING_ONLY.match(k[len(prefix) :])}


#: the layout of source baai_eva (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = BaaiEvaLayout()
