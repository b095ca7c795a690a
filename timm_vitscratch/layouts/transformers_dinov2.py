"""Hugging Face transformers ``Dinov2Model`` and ``Dinov2WithRegistersModel`` state dicts, read by the
``transformers`` source (:mod:`timm_vitscratch.layouts.transformers`) beside its ViT / DeiT and DINOv3 layouts.

They become timm's ``vit_*_patch14_dinov2`` / ``_reg4_dinov2`` state dict, which is ours: classic ViT names,
LayerScale ``ls1.gamma`` / ``ls2.gamma`` (transformers' ``layer_scale1/2.lambda1``), fused ``qkv``. Two namings
are read: the Hub's files (what ``save_pretrained`` writes: ``attention.attention.query`` ...,
``attention.output.dense``, the SwiGLU's packed ``weights_in`` / ``weights_out``) and transformers 5's module
names (``attention.q_proj`` ... ``o_proj``, ``gate_proj`` / ``up_proj`` / ``down_proj``). The SwiGLU is timm's
packed form: ``fc1`` holds the gate rows, then the value rows (``weights_in``, or ``gate_proj`` over
``up_proj``). The mask token is for pre-training only and dropped.

With registers, transformers' position table still has a class row, and the registers get no position; timm's
``_reg4`` models hold the table for the patches only (``no_embed_class``) with the class row folded into the
class token, which adds up to the same tokens. The export writes a zero class row back.
"""

from __future__ import annotations

import re

import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule, concat_rows, third, weight_and_bias
from .layout import Resample

#: where a Dinov2Model sits in a state dict: alone, or under its ForImageClassification wrapper
PREFIXES = ("", "dinov2.", "dinov2_with_registers.")
STEM = "embeddings.patch_embeddings.projection.weight"
LAYER_SCALE = re.compile(r"^(?:dinov2\.|dinov2_with_registers\.)?encoder\.layer\.\d+\.layer_scale1\.lambda1$")
LAYER = "encoder.layer.{}."
#: per naming: attention q / k / v / output, and the SwiGLU's input(s) and output
HUB_NAMES = dict(
    q="attention.attention.query",
    k="attention.attention.key",
    v="attention.attention.value",
    o="attention.output.dense",
)
CURRENT_NAMES = dict(q="attention.q_proj", k="attention.k_proj", v="attention.v_proj", o="attention.o_proj")
HUB_SWIGLU = (("mlp.weights_in",), "mlp.weights_out")
CURRENT_SWIGLU = (("mlp.gate_proj", "mlp.up_proj"), "mlp.down_proj")
#: block parts whose names are the same in both namings and ours
SAME_NAMES = ("norm1", "norm2")
PLAIN_MLP = ("mlp.fc1", "mlp.fc2")
#: how Dinov2WithRegistersEmbeddings resamples its table (Dinov2Embeddings: as ViT's, without antialiasing)
REGISTERS_RESAMPLE = Resample("bicubic", antialias=True)
#: transformers' classification heads, which read the class token beside the mean patch token
CLASSIFIER = "classifier.weight"


def is_dinov2(keys: set[str]) -> bool:
    """A Dinov2Model (or WithRegisters) state dict, or one of their ForImageClassification wrappers."""
    return any(p + STEM in keys for p in PREFIXES) and any(LAYER_SCALE.match(k) for k in keys)


def is_current(keys: set[str]) -> bool:
    """transformers 5's module names (a state dict in memory), not the Hub's."""
    return any(k.startswith("encoder.layer.") and ".attention.q_proj." in k for k in keys)


def is_swiglu(keys: set[str]) -> bool:
    return any(k.endswith(("mlp.weights_in.weight", "mlp.gate_proj.weight")) for k in keys)


def has_registers(keys: set[str]) -> bool:
    return "embeddings.register_tokens" in keys


def dinov2_resample(checkpoint: Checkpoint) -> Resample | None:
    """Dinov2WithRegistersEmbeddings resamples its table antialiased, as timm does; Dinov2Embeddings as ViT's
    (None: the layout's own way)."""
    keys = set(checkpoint.keys())
    return REGISTERS_RESAMPLE if is_dinov2(keys) and has_registers(keys) else None


def refuse_classifier(checkpoint: Checkpoint) -> None:
    """Dinov2ForImageClassification's classifier reads the class token beside the mean of the patch tokens
    (2 x width), a pooling neither timm's ViT nor ours has: refused, naming the backbone that does convert."""
    keys = set(checkpoint.keys())
    wrapped = next((p for p in PREFIXES[1:] if p + STEM in keys), None)
    if wrapped is None:
        return
    head = f" of shape {tuple(checkpoint.shape(CLASSIFIER))}" if CLASSIFIER in keys else ""
    raise ConversionError(
        f"this is a {'Dinov2WithRegisters' if 'with_registers' in wrapped else 'Dinov2'}ForImageClassification "
        f"({wrapped}… keys): its classifier{head} reads the class token beside the mean patch token, a pooling "
        f"the scratch models do not have; convert its backbone, saved as a Dinov2Model "
        f"(model.{wrapped.rstrip('.')}.save_pretrained(DIR))",
        checkpoint.path,
    )


def fold_class_position(cls_token: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """The class token with its row of the position table added (timm's ``_reg4`` models hold it so)."""
    return cls_token + table[:, :1]


def patch_rows(table: torch.Tensor) -> torch.Tensor:
    return table[:, 1:]


def with_zero_class_row(table: torch.Tensor) -> torch.Tensor:
    """A patches-only table with transformers' class row in front, zero: the class token holds its position."""
    return torch.cat([table.new_zeros(1, 1, table.shape[-1]), table], dim=1)


def mask_token(cls_token: torch.Tensor) -> torch.Tensor:
    """A zero mask token (1, D): pre-training only, transformers' own init."""
    return cls_token.new_zeros(1, cls_token.shape[-1])


def dinov2_key_map(keys: set[str], depth: int) -> KeyMap:
    """Our (timm's DINOv2) names <- a Dinov2Model's or Dinov2WithRegistersModel's."""
    rules: KeyMap = {"reg_token": Rule.rename("embeddings.register_tokens")}
    cls, table = "embeddings.cls_token", "embeddings.position_embeddings"
    if has_registers(keys):
        rules["cls_token"] = Rule((cls, table), fold_class_position)
        rules["pos_embed"] = Rule((table,), patch_rows)
    else:
        rules["cls_token"], rules["pos_embed"] = Rule.rename(cls), Rule.rename(table)
    weight_and_bias(rules, "patch_embed.proj", "embeddings.patch_embeddings.projection")
    current = is_current(keys)
    names = CURRENT_NAMES if current else HUB_NAMES
    swiglu_in, swiglu_out = CURRENT_SWIGLU if current else HUB_SWIGLU
    swiglu = is_swiglu(keys)
    for i in range(depth):
        src, dst = LAYER.format(i), f"blocks.{i}."
        for part in ("weight", "bias"):
            rules[f"{dst}attn.qkv.{part}"] = Rule(tuple(f"{src}{names[n]}.{part}" for n in "qkv"), concat_rows)
            if swiglu:  # packed: the gate rows, then the value rows
                rules[f"{dst}mlp.fc1.{part}"] = Rule(tuple(f"{src}{n}.{part}" for n in swiglu_in), concat_rows)
                rules[f"{dst}mlp.fc2.{part}"] = Rule.rename(f"{src}{swiglu_out}.{part}")
        weight_and_bias(rules, dst + "attn.proj", src + names["o"])
        for name in SAME_NAMES + (() if swiglu else PLAIN_MLP):
            weight_and_bias(rules, dst + name, src + name)
        rules[dst + "ls1.gamma"] = Rule.rename(src + "layer_scale1.lambda1")
        rules[dst + "ls2.gamma"] = Rule.rename(src + "layer_scale2.lambda1")
    weight_and_bias(rules, "norm", "layernorm")
    return rules


def dinov2_ignorable_keys(checkpoint: Checkpoint) -> set[str]:
    """The mask token (pre-training only); a classification wrapper is refused."""
    refuse_classifier(checkpoint)
    return {"embeddings.mask_token"} & set(checkpoint.keys())


def dinov2_export_map(keys: set[str], depth: int, packed: bool, fold: bool) -> KeyMap:
    """A Dinov2Model's (or WithRegisters') names, as ``save_pretrained`` writes them (the Hub's) <- ours (``keys``).

    ``fold``: our table has no class row (``no_embed_class``), so transformers gets a zero one. ``packed``: our
    ``fc1`` is timm's packed SwiGLU, ``weights_in`` as it stands; a SwiGLU of separate ``fc1_g`` / ``fc1_x``
    stacks into it."""
    table = Rule(("pos_embed",), with_zero_class_row) if fold else Rule.rename("pos_embed")
    rules: KeyMap = {
        "embeddings.cls_token": Rule.rename("cls_token"),
        "embeddings.mask_token": Rule(("cls_token",), mask_token),
        "embeddings.position_embeddings": table,
    }
    if "reg_token" in keys:
        rules["embeddings.register_tokens"] = Rule.rename("reg_token")
    weight_and_bias(rules, "embeddings.patch_embeddings.projection", "patch_embed.proj")
    parts = ("weight", "bias") if "blocks.0.attn.qkv.bias" in keys else ("weight",)
    split = "blocks.0.mlp.fc1_g.weight" in keys
    for i in range(depth):
        src, dst = f"blocks.{i}.", LAYER.format(i)
        for part in parts:
            for index, n in enumerate("qkv"):
                rules[f"{dst}{HUB_NAMES[n]}.{part}"] = Rule((f"{src}attn.qkv.{part}",), third(index))
        weight_and_bias(rules, dst + HUB_NAMES["o"], src + "attn.proj")
        for name in SAME_NAMES:
            weight_and_bias(rules, dst + name, src + name)
        for part in ("weight", "bias"):
            if split:
                fc1 = Rule((f"{src}mlp.fc1_g.{part}", f"{src}mlp.fc1_x.{part}"), concat_rows)
            else:
                fc1 = Rule.rename(f"{src}mlp.fc1.{part}")
            rules[f"{dst}mlp.{'weights_in' if packed or split else 'fc1'}.{part}"] = fc1
            rules[f"{dst}mlp.{'weights_out' if packed or split else 'fc2'}.{part}"] = Rule.rename(
                f"{src}mlp.fc2.{part}"
            )
        rules[dst + "layer_scale1.lambda1"] = Rule.rename(src + "ls1.gamma")
        rules[dst + "layer_scale2.lambda1"] = Rule.rename(src + "ls2.gamma")
    weight_and_bias(rules, "layernorm", "norm")
    return rules
