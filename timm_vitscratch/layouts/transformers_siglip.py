"""Hugging Face transformers ``SiglipVisionModel`` and ``Siglip2VisionModel`` state dicts (a full ``SiglipModel`` /
``Siglip2Model``: its vision tower), read by the ``transformers`` source (:mod:`timm_vitscratch.layouts.transformers`)
onto timm's SigLIP ``VisionTransformer`` names: no class token, the MAP attention pool ``attn_pool.*``.

transformers 5 saves a vision model's tensors without a prefix (``embeddings.…``, ``encoder.layers.N.…``); older
files and full models have them under ``vision_model.``. The text tower and the contrastive ``logit_scale`` /
``logit_bias`` of a full model are dropped. Separate ``q_proj`` / ``k_proj`` / ``v_proj`` stack into our fused
``qkv``; the pool's ``nn.MultiheadAttention`` ``in_proj`` (q, k, v rows) splits into timm's ``q`` and ``kv``.

SigLIP 2's patch embedding is a Linear over flattened patches, each flattened as (row, column, channel) as its
image processor does; it becomes our convolution by a reshape (3 channels: a Linear's width cannot tell the
channels from the patch size, and every SigLIP 2 is RGB). Its position table is resized per image bilinearly
with antialiasing (``Siglip2VisionEmbeddings.resize_positional_embeddings``), which :data:`SIGLIP2_RESAMPLE` says.

Export writes a classic (fixed-resolution) SigLIP row as a ``SiglipVisionModel``, whose patch convolution and
(N, D) table are ours, used at the one size as ours and timm's are. A SigLIP 2 NaFlex row (timm ``NaFlexVit``'s
names: ``embeds.proj`` a Linear over flattened patches, ``embeds.pos_embed`` a (1, H, W, D) grid) is written as a
``Siglip2VisionModel``: the Linear is SigLIP 2's as it is when its patches are (row, column, channel), as the
rows' are, and reordered from (channel, row, column) otherwise; the grid is the (H * W, D) table read row by row.
"""

from __future__ import annotations

import math

import torch

from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule, concat_rows, third, weight_and_bias
from .layout import Resample

PREFIXES = ("", "vision_model.")
#: the key every SigLIP vision tower has (ViT's patch projection is ``patch_embeddings.projection``)
MARKER = "embeddings.patch_embedding.weight"
#: SigLIP 2's channels (the flattened patch width is channels x patch x patch)
SIGLIP2_CHANNELS = 3
#: how Siglip2VisionEmbeddings resizes its table (SigLIP 1 resizes as ViT does: bicubic, no antialias)
SIGLIP2_RESAMPLE = Resample("bilinear", antialias=True, align_corners=False)
#: keys of a full SiglipModel beside its vision tower: dropped
OTHER_TOWER = ("text_model.", "logit_scale", "logit_bias")
BLOCK_NAMES = (
    ("layer_norm1", "norm1"),
    ("self_attn.out_proj", "attn.proj"),
    ("layer_norm2", "norm2"),
    ("mlp.fc1", "mlp.fc1"),
    ("mlp.fc2", "mlp.fc2"),
)
HEAD_NAMES = (("attention.out_proj", "proj"), ("layernorm", "norm"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2"))


def siglip_prefix(keys: set[str]) -> str | None:
    """``""`` or ``vision_model.`` for a SigLIP vision tower's keys; None for other keys."""
    return next((p for p in PREFIXES if p + MARKER in keys), None)


def is_siglip(keys: set[str]) -> bool:
    return siglip_prefix(keys) is not None


def is_siglip2(checkpoint: Checkpoint) -> bool:
    """SigLIP 2's patch embedding is a Linear (2 dims), SigLIP's a convolution (4): the keys are the same."""
    prefix = siglip_prefix(set(checkpoint.keys()))
    return prefix is not None and len(checkpoint.shape(prefix + MARKER)) == 2


def siglip_resample(checkpoint: Checkpoint) -> Resample | None:
    """SigLIP 2's resampling for a SigLIP 2 checkpoint; None for any other (the layout's own)."""
    return SIGLIP2_RESAMPLE if is_siglip2(checkpoint) else None


def has_head(keys: set[str]) -> bool:
    prefix = siglip_prefix(keys) or ""
    return f"{prefix}head.probe" in keys


def patch_to_conv(weight: torch.Tensor) -> torch.Tensor:
    """A SigLIP patch convolution (D, C, p, p) as it is; SigLIP 2's Linear (D, p * p * C) as that convolution."""
    if weight.dim() != 2:
        return weight
    dim, width = weight.shape
    patch = math.isqrt(width // SIGLIP2_CHANNELS)
    if patch * patch * SIGLIP2_CHANNELS != width:
        raise ValueError(
            f"a SigLIP 2 patch embedding of {width} inputs is not {SIGLIP2_CHANNELS} channels x patch x patch"
        )
    return weight.reshape(dim, patch, patch, SIGLIP2_CHANNELS).permute(0, 3, 1, 2)


def conv_to_patch(weight: torch.Tensor) -> torch.Tensor:
    """Our patch convolution (D, C, p, p) as SigLIP 2's Linear over (row, column, channel) flattened patches."""
    return weight.permute(0, 2, 3, 1).reshape(weight.shape[0], -1)


def table_to_pos_embed(table: torch.Tensor) -> torch.Tensor:
    """transformers' ``nn.Embedding`` table (N, D) -> our position table (1, N, D)."""
    return table.unsqueeze(0)


def pos_embed_to_table(pos_embed: torch.Tensor) -> torch.Tensor:
    return pos_embed[0]


def in_proj_kv(tensor: torch.Tensor) -> torch.Tensor:
    """The key and value rows of an ``nn.MultiheadAttention`` ``in_proj`` (q, k, v): timm's ``kv``."""
    return tensor[tensor.shape[0] // 3 :]


def siglip_key_map(keys: set[str], depth: int) -> KeyMap:
    """Our names <- a SigLIP / SigLIP 2 vision tower's."""
    prefix = siglip_prefix(keys) or ""
    emb = f"{prefix}embeddings."
    rules: KeyMap = {
        "patch_embed.proj.weight": Rule((emb + "patch_embedding.weight",), patch_to_conv),
        "patch_embed.proj.bias": Rule.rename(emb + "patch_embedding.bias"),
        "pos_embed": Rule((emb + "position_embedding.weight",), table_to_pos_embed),
    }
    for i in range(depth):
        src, dst = f"{prefix}encoder.layers.{i}.", f"blocks.{i}."
        for theirs, ours in BLOCK_NAMES:
            weight_and_bias(rules, dst + ours, src + theirs)
        for part in ("weight", "bias"):
            rules[f"{dst}attn.qkv.{part}"] = Rule(tuple(f"{src}self_attn.{n}_proj.{part}" for n in "qkv"), concat_rows)
    weight_and_bias(rules, "norm", prefix + "post_layernorm")
    head = f"{prefix}head."
    rules["attn_pool.latent"] = Rule.rename(head + "probe")
    for part in ("weight", "bias"):
        rules[f"attn_pool.q.{part}"] = Rule((f"{head}attention.in_proj_{part}",), third(0))
        rules[f"attn_pool.kv.{part}"] = Rule((f"{head}attention.in_proj_{part}",), in_proj_kv)
    for theirs, ours in HEAD_NAMES:
        weight_and_bias(rules, f"attn_pool.{ours}", head + theirs)
    return rules


def siglip_ignorable_keys(checkpoint: Checkpoint) -> set[str]:
    """A full model's text tower and logit scale / bias; the position ids buffer, were it saved."""
    prefix = siglip_prefix(set(checkpoint.keys())) or ""
    return {
        k
        for k in checkpoint.keys()
        if (prefix and k.startswith(OTHER_TOWER)) or k == f"{prefix}embeddings.position_ids"
    }


def channels_first_to_last(weight: torch.Tensor) -> torch.Tensor:
    """A patch Linear over (channel, row, column) flattened patches as SigLIP 2's, over (row, column, channel)."""
    dim, width = weight.shape
    patch = math.isqrt(width // SIGLIP2_CHANNELS)
    return conv_to_patch(weight.reshape(dim, SIGLIP2_CHANNELS, patch, patch))


def grid_to_table(pos_embed: torch.Tensor) -> torch.Tensor:
    """A NaFlex row's (1, H, W, D) position grid -> transformers' (H * W, D) table, row by row."""
    return pos_embed.reshape(-1, pos_embed.shape[-1])


def siglip_export_map(depth: int, head: bool, naflex: bool = False, channels_last: bool = True) -> KeyMap:
    """A SiglipVisionModel's names (as ``save_pretrained`` writes them) <- a classic SigLIP row's; with ``naflex``
    a Siglip2VisionModel's <- a NaFlex row's (its patch Linear over ``channels_last`` flattened patches, or channels
    first). The two classes name every tensor alike; SigLIP's patch embedding is our convolution as it is."""
    if naflex:
        patch = (
            Rule.rename("embeds.proj.weight")
            if channels_last
            else Rule(("embeds.proj.weight",), channels_first_to_last)
        )
        rules: KeyMap = {
            "embeddings.patch_embedding.weight": patch,
            "embeddings.patch_embedding.bias": Rule.rename("embeds.proj.bias"),
            "embeddings.position_embedding.weight": Rule(("embeds.pos_embed",), grid_to_table),
        }
    else:
        rules = {
            "embeddings.patch_embedding.weight": Rule.rename("patch_embed.proj.weight"),
            "embeddings.patch_embedding.bias": Rule.rename("patch_embed.proj.bias"),
            "embeddings.position_embedding.weight": Rule(("pos_embed",), pos_embed_to_table),
        }
    for i in range(depth):
        src, dst = f"blocks.{i}.", f"encoder.layers.{i}."
        for theirs, ours in BLOCK_NAMES:
            weight_and_bias(rules, dst + theirs, src + ours)
        for part in ("weight", "bias"):
            for index, n in enumerate("qkv"):
                rules[f"{dst}self_attn.{n}_proj.{part}"] = Rule((f"{src}attn.qkv.{part}",), third(index))
    weight_and_bias(rules, "post_layernorm", "norm")
    if head:
        rules["head.probe"] = Rule.rename("attn_pool.latent")
        for part in ("weight", "bias"):
            rules[f"head.attention.in_proj_{part}"] = Rule((f"attn_pool.q.{part}", f"attn_pool.kv.{part}"), concat_rows)
        for theirs, ours in HEAD_NAMES:
            weight_and_bias(rules, "head." + theirs, f"attn_pool.{ours}")
    return rules
