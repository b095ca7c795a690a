"""Meta's original Perception Encoder checkpoints (``facebookresearch/perception_models``: ``PE-Core-*.pt``,
``PE-Spatial-*.pt``, ``PE-Lang-*.pt``): the vision tower alone, or a whole CLIP model with it under ``visual.``.

Meta's names follow OpenAI CLIP's; they map onto timm's ``Eva`` names, which are ours for PE, as timm's own
importer maps them (``timm.models.eva._convert_pe``): ``conv1`` the patch projection (no bias), ``class_embedding``
and ``positional_embedding`` the class token and position table (without the batch axis), ``ln_pre`` / ``ln_post``
the norms before and after the blocks, ``transformer.resblocks.N`` the blocks (``ln_1`` / ``ln_2``, the fused
``in_proj`` and ``out_proj`` of the attention, ``ls_1`` / ``ls_2`` layer scales, ``mlp.c_fc`` / ``mlp.c_proj``),
``attn_pool`` PE core's attention pool (its ``probe`` the latent, its fused ``in_proj`` timm's ``q`` and ``kv``) and
``proj`` the projection after it (width x output, no bias): timm's ``head``, whose bias is zero. A CLIP model's text
tower and logit scale are dropped.

OpenAI CLIP's image towers have the same names; they are not PE (QuickGELU, class-token pooling, no rotary
position) and are refused: PE core has an attention pool, PE spatial and lang neither a final norm nor ``proj``.
"""

from __future__ import annotations

import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule, third, weight_and_bias
from .layout import Layout
from .transformers_siglip import in_proj_kv

#: where the image tower's keys are: a vision checkpoint's own, or a CLIP model's ``visual.``
PREFIXES = ("", "visual.")
#: the keys every Meta PE image tower has
MARKERS = ("conv1.weight", "transformer.resblocks.0.attn.in_proj_weight")
BLOCK_NAMES = (
    ("norm1", "ln_1"),
    ("norm2", "ln_2"),
    ("attn.proj", "attn.out_proj"),
    ("mlp.fc1", "mlp.c_fc"),
    ("mlp.fc2", "mlp.c_proj"),
)
POOL_NAMES = (
    ("attn_pool.proj", "attn_pool.attn.out_proj"),
    ("attn_pool.norm", "attn_pool.layernorm"),
    ("attn_pool.mlp.fc1", "attn_pool.mlp.c_fc"),
    ("attn_pool.mlp.fc2", "attn_pool.mlp.c_proj"),
)


def pe_prefix(keys: set[str]) -> str | None:
    """``""`` or ``visual.`` for a Meta PE image tower's keys; None for other keys."""
    return next((p for p in PREFIXES if all(p + marker in keys for marker in MARKERS)), None)


def class_token(embedding: torch.Tensor) -> torch.Tensor:
    """Meta's ``class_embedding`` (D,) -> our ``cls_token`` (1, 1, D); one of another rank keeps its extra
    dimensions (and is refused by its shape), never reshaped into place."""
    return embedding[None, None]


def pos_table(table: torch.Tensor) -> torch.Tensor:
    """Meta's ``positional_embedding`` (N, D) -> our ``pos_embed`` (1, N, D)."""
    return table.unsqueeze(0)


def head_weight(proj: torch.Tensor) -> torch.Tensor:
    """Meta's ``proj`` (width x output) -> timm's ``head.weight`` (output x width), laid out as a loaded weight is
    (a transposed view would take another matrix-multiply path, and round differently)."""
    return proj.t().contiguous()


def zero_bias(proj: torch.Tensor) -> torch.Tensor:
    """The bias of the head ``proj`` becomes: zero (Meta's projection has none; timm's head has one)."""
    return proj.new_zeros(proj.shape[1])


class MetaPeLayout(Layout):
    name = "meta_pe"
    library = "Meta's Perception Encoder"
    block_pattern = r"^(?:visual\.)?transformer\.resblocks\.(\d+)\."
    example_keys = MARKERS + ("attn_pool.probe",)

    def detect(self, keys: set[str]) -> bool:
        return pe_prefix(keys) is not None

    def prefix(self, keys: set[str]) -> str:
        return pe_prefix(keys) or ""

    def depth(self, keys: set[str]) -> int:
        # the tower's blocks only: a CLIP model's text tower has transformer.resblocks too, outside visual.
        prefix = self.prefix(keys)
        return super().depth({k for k in keys if k.startswith(prefix)})

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        p = self.prefix(keys)
        rules: KeyMap = {
            "patch_embed.proj.weight": Rule.rename(p + "conv1.weight"),
            "cls_token": Rule((p + "class_embedding",), class_token),
            "pos_embed": Rule((p + "positional_embedding",), pos_table),
            "attn_pool.latent": Rule.rename(p + "attn_pool.probe"),
            "head.weight": Rule((p + "proj",), head_weight),
            "head.bias": Rule((p + "proj",), zero_bias),
        }
        weight_and_bias(rules, "norm_pre", p + "ln_pre")
        weight_and_bias(rules, "norm", p + "ln_post")
        for i in range(depth):
            ours, theirs = f"blocks.{i}.", f"{p}transformer.resblocks.{i}."
            for target, source in BLOCK_NAMES:
                weight_and_bias(rules, ours + target, theirs + source)
            rules[ours + "attn.qkv.weight"] = Rule.rename(theirs + "attn.in_proj_weight")
            rules[ours + "attn.qkv.bias"] = Rule.rename(theirs + "attn.in_proj_bias")
            rules[ours + "gamma_1"] = Rule.rename(theirs + "ls_1.gamma")
            rules[ours + "gamma_2"] = Rule.rename(theirs + "ls_2.gamma")
        for target, source in POOL_NAMES:
            weight_and_bias(rules, target, p + source)
        for part in ("weight", "bias"):
            fused = f"{p}attn_pool.attn.in_proj_{part}"
            rules[f"attn_pool.q.{part}"] = Rule((fused,), third(0))
            rules[f"attn_pool.kv.{part}"] = Rule((fused,), in_proj_kv)
        return rules

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        keys = set(checkpoint.keys())
        p = self.prefix(keys)
        if f"{p}attn_pool.probe" not in keys and f"{p}proj" in keys and f"{p}ln_post.weight" in keys:
            raise ConversionError(
                f"has OpenAI CLIP's image tower ({p}conv1, {p}ln_post and {p}proj, no attention pool), not a "
                f"Perception Encoder (PE core pools by attention; PE spatial and lang have no ln_post or proj); "
                f"CLIP's QuickGELU tower without rotary position is not a scratch model",
                checkpoint.path,
            )
        return {k for k in keys if not k.startswith(p)}  # a CLIP model's text tower and logit scale


#: the layout of source meta_pe (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = MetaPeLayout()
