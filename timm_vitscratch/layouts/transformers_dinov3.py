"""Hugging Face transformers ``DINOv3ViTModel`` (and ``DINOv3ViTBackbone``) state dicts, read by the
``transformers`` source (:mod:`timm_vitscratch.layouts.transformers`) beside its ViT / DeiT layout.

Two namings: the Hub's files store ``layer.N.…`` and transformers 5 names its modules ``model.layer.N.…`` (and
renames the first on load). Separate ``q_proj`` / ``k_proj`` / ``v_proj`` stack into our fused ``qkv``; the key
projection has no bias (under rotary position a k bias would change the attention, so a non-zero one is
refused); q and v biases become Eva's ``q_bias`` / ``v_bias``, or are dropped when both are zero, as timm's
non-``_qkvb`` models drop them. ``layer_scale1.lambda1`` / ``layer_scale2.lambda1`` are ``gamma_1`` / ``gamma_2``;
the MLP is ``up_proj`` / ``down_proj`` (GELU) or, gated, ``gate_proj`` / ``up_proj`` / ``down_proj`` = SwiGLU's
``fc1_g`` / ``fc1_x`` / ``fc2``. The mask token is for pre-training only and dropped.
"""

from __future__ import annotations

import re

import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule, concat_rows, third, weight_and_bias

#: keys only a DINOv3ViTModel has (ViT's patch projection is ``patch_embeddings.projection``)
MARKER = "embeddings.patch_embeddings.weight"
BLOCK_PATTERN = r"^(?:model\.)?layer\.(\d+)\."
#: DINOv3ViTModel's own names (the Hub's, and what ``save_pretrained`` writes) -> ours, per block
BLOCK_NAMES = (
    ("norm1", "norm1"),
    ("attention.o_proj", "attn.proj"),
    ("norm2", "norm2"),
)
GELU_MLP = (("up_proj", "fc1"), ("down_proj", "fc2"))
GATED_MLP = (("gate_proj", "fc1_g"), ("up_proj", "fc1_x"), ("down_proj", "fc2"))


def is_dinov3(keys: set[str]) -> bool:
    return MARKER in keys


def block_prefix(keys: set[str]) -> str:
    """``model.layer.{}.`` (transformers 5 module names) or ``layer.{}.`` (the Hub's files)."""
    return "model.layer.{}." if any(k.startswith("model.layer.") for k in keys) else "layer.{}."


def is_gated(keys: set[str]) -> bool:
    return any(k.endswith("mlp.gate_proj.weight") for k in keys)


def zeros_like(tensor: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(tensor)


def dinov3_key_map(keys: set[str], depth: int) -> KeyMap:
    """Our names <- a DINOv3ViTModel's."""
    rules: KeyMap = {
        "cls_token": Rule.rename("embeddings.cls_token"),
        "reg_token": Rule.rename("embeddings.register_tokens"),
    }
    weight_and_bias(rules, "patch_embed.proj", "embeddings.patch_embeddings")
    layer = block_prefix(keys)
    mlp = GATED_MLP if is_gated(keys) else GELU_MLP
    for i in range(depth):
        src, dst = layer.format(i), f"blocks.{i}."
        for theirs, ours in BLOCK_NAMES:
            weight_and_bias(rules, dst + ours, src + theirs)
        qkv = tuple(f"{src}attention.{n}_proj.weight" for n in "qkv")
        rules[dst + "attn.qkv.weight"] = Rule(qkv, concat_rows)
        for n in "qv":  # a missing one of the two (query_bias xor value_bias) is a zero bias
            own, other = (f"{src}attention.{m}_proj.bias" for m in (n, "v" if n == "q" else "q"))
            rules[f"{dst}attn.{n}_bias"] = Rule.rename(own) if own in keys else Rule((other,), zeros_like)
        rules[dst + "gamma_1"] = Rule.rename(src + "layer_scale1.lambda1")
        rules[dst + "gamma_2"] = Rule.rename(src + "layer_scale2.lambda1")
        for theirs, ours in mlp:
            weight_and_bias(rules, f"{dst}mlp.{ours}", f"{src}mlp.{theirs}")
    weight_and_bias(rules, "norm", "norm")
    return rules


def dinov3_ignorable_keys(checkpoint: Checkpoint) -> set[str]:
    """The mask token (and the rotary's ``inv_freq`` buffer, were it saved), an empty register table; q / v biases
    when all are zero.
    Refuses a non-zero key bias."""
    keys = set(checkpoint.keys())
    ignored = {k for k in keys if k in ("embeddings.mask_token", "rope_embeddings.inv_freq")}
    if "embeddings.register_tokens" in keys and 0 in checkpoint.shape("embeddings.register_tokens"):
        ignored.add("embeddings.register_tokens")  # num_register_tokens=0: an empty table, no register tokens
    for key in sorted(k for k in keys if k.endswith("attention.k_proj.bias")):
        if bool(checkpoint.tensor(key).any()):
            raise ConversionError(
                f"{key!r} is not zero; DINOv3 models keep the key bias at zero (under rotary position it would "
                f"change the attention), and so do timm's and ours",
                checkpoint.path,
            )
        ignored.add(key)
    biases = sorted(k for k in keys if re.search(r"attention\.[qv]_proj\.bias$", k))
    if biases and not any(bool(checkpoint.tensor(k).any()) for k in biases):
        ignored.update(biases)  # all zero: a model without q/v biases computes the same
    return ignored


def no_rows(tensor: torch.Tensor) -> torch.Tensor:
    """An empty table of the tensor's width: ``(1, 0, D)`` from the class token ``(1, 1, D)``."""
    return tensor[:, :0].contiguous()


def dinov3_export_map(depth: int, gated: bool, has_qv_bias: bool, has_registers: bool = True) -> KeyMap:
    """A DINOv3ViTModel's names (as ``save_pretrained`` writes them) <- ours."""
    rules: KeyMap = {
        "embeddings.cls_token": Rule.rename("cls_token"),
        "embeddings.mask_token": Rule(("cls_token",), zeros_like),  # pre-training only; transformers' own init
        # num_register_tokens=0: transformers still holds the (1, 0, D) table
        "embeddings.register_tokens": Rule.rename("reg_token") if has_registers else Rule(("cls_token",), no_rows),
    }
    weight_and_bias(rules, "embeddings.patch_embeddings", "patch_embed.proj")
    for i in range(depth):
        src, dst = f"blocks.{i}.", f"layer.{i}."
        for theirs, ours in BLOCK_NAMES:
            weight_and_bias(rules, dst + theirs, src + ours)
        for index, n in enumerate("qkv"):
            rules[f"{dst}attention.{n}_proj.weight"] = Rule((src + "attn.qkv.weight",), third(index))
        if has_qv_bias:
            rules[dst + "attention.q_proj.bias"] = Rule.rename(src + "attn.q_bias")
            rules[dst + "attention.v_proj.bias"] = Rule.rename(src + "attn.v_bias")
        rules[dst + "layer_scale1.lambda1"] = Rule.rename(src + "gamma_1")
        rules[dst + "layer_scale2.lambda1"] = Rule.rename(src + "gamma_2")
        for theirs, ours in GATED_MLP if gated else GELU_MLP:
            weight_and_bias(rules, f"{dst}mlp.{theirs}", f"{src}mlp.{ours}")
    weight_and_bias(rules, "norm", "norm")
    return rules
