"""Google's JAX/Flax ViT ``.npz`` layout (``Transformer/encoderblock_N/...``), import and export.

Flax stores dense kernels as (in, out), so they are transposed; attention kernels keep the heads
as their own axis (query/key/value (D, heads, head_dim), out (heads, head_dim, D)), which also tells
the number of heads; the patch convolution is (ph, pw, in, out). Older checkpoints nest everything
under ``opt/target/``, which the reader strips.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import ConversionError
from ..models.architecture import Arch
from .checkpoint import Checkpoint
from .formats import (
    Reference,
    ReferenceSpec,
    Resample,
    SourceFormat,
    register,
    round_parameters,
    timm_reference,
    without_init,
)
from .keymap import KeyMap, Rule, identity, transpose
from .timm_format import representation_head

BLOCK = "Transformer/encoderblock_{}/"
ATTN = "MultiHeadDotProductAttention_1/"
MLP = "MlpBlock_3/"


def conv_from_flax(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.permute(3, 2, 0, 1)  # (ph, pw, in, out) -> (out, in, ph, pw)


def conv_to_flax(weight: torch.Tensor) -> torch.Tensor:
    return weight.permute(2, 3, 1, 0)


def qkv_from_flax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(D, heads, head_dim) kernels -> our (3D, D) weight; (heads, head_dim) biases -> (3D,)."""
    if q.dim() == 3:
        return torch.cat([t.reshape(t.shape[0], -1).t() for t in (q, k, v)], dim=0)
    return torch.cat([t.reshape(-1) for t in (q, k, v)], dim=0)


def out_from_flax(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.reshape(-1, kernel.shape[-1]).t()  # (heads, head_dim, D) -> (D, heads*head_dim)


class JaxFormat(SourceFormat):
    name = "jax"
    library = "Google's JAX/Flax ViT"
    reference_name = "timm's VisionTransformer filled by timm's .npz loader"
    block_pattern = r"^Transformer/encoderblock_(\d+)/"
    example_keys = (
        "embedding/kernel",
        "cls",
        "Transformer/posembed_input/pos_embedding",
        "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel",
    )
    resample = Resample("bilinear", antialias=False)  # timm's npz loader
    export_suffixes = (".npz",)

    def detect(self, keys: set[str]) -> bool:
        return "embedding/kernel" in keys and "Transformer/posembed_input/pos_embedding" in keys

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        rules: KeyMap = {
            "patch_embed.proj.weight": Rule(("embedding/kernel",), conv_from_flax),
            "patch_embed.proj.bias": Rule.rename("embedding/bias"),
            "cls_token": Rule.rename("cls"),
            "pos_embed": Rule.rename("Transformer/posembed_input/pos_embedding"),
            "norm.weight": Rule.rename("Transformer/encoder_norm/scale"),
            "norm.bias": Rule.rename("Transformer/encoder_norm/bias"),
            "pre_logits.fc.weight": Rule(("pre_logits/kernel",), transpose),
            "pre_logits.fc.bias": Rule.rename("pre_logits/bias"),
            "head.weight": Rule(("head/kernel",), transpose),
            "head.bias": Rule.rename("head/bias"),
        }
        for i in range(depth):
            src, dst = BLOCK.format(i), f"blocks.{i}."
            for ours, theirs in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
                rules[f"{dst}{ours}.weight"] = Rule.rename(f"{src}{theirs}/scale")
                rules[f"{dst}{ours}.bias"] = Rule.rename(f"{src}{theirs}/bias")
            for part, ours in (("kernel", "weight"), ("bias", "bias")):
                rules[f"{dst}attn.qkv.{ours}"] = Rule(
                    tuple(f"{src}{ATTN}{n}/{part}" for n in ("query", "key", "value")), qkv_from_flax
                )
            for layer, theirs in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
                rules[f"{dst}mlp.{layer}.weight"] = Rule((f"{src}{MLP}{theirs}/kernel",), transpose)
                rules[f"{dst}mlp.{layer}.bias"] = Rule.rename(f"{src}{MLP}{theirs}/bias")
            rules[f"{dst}attn.proj.weight"] = Rule((f"{src}{ATTN}out/kernel",), out_from_flax)
            rules[f"{dst}attn.proj.bias"] = Rule.rename(f"{src}{ATTN}out/bias")
        return rules

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        query = BLOCK.format(0) + ATTN + "query/kernel"
        if query in keys and len(checkpoint.shape(query)) == 3:
            return {"num_heads": checkpoint.shape(query)[1]}
        return {}

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        # Google's ViT code has one activation (GELU) and one LayerNorm eps (1e-6); the query kernel's
        # (dim, heads, head_dim) shape gives the head count
        return super().recorded_facts(checkpoint, hints) | {"act_layer", "norm_eps"}

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        """timm's VisionTransformer filled by timm's own npz loader (``load_pretrained``)."""
        from timm.models.vision_transformer import VisionTransformer

        arch = spec.arch
        model = without_init(
            VisionTransformer,
            img_size=spec.img_size,
            patch_size=arch.patch_size,
            in_chans=arch.in_chans,
            num_classes=0 if arch.representation_size else arch.num_classes,
            embed_dim=arch.embed_dim,
            depth=arch.depth,
            num_heads=arch.num_heads,
            mlp_ratio=arch.mlp_ratio,
            qkv_bias=True,
        )
        model.load_pretrained(str(checkpoint.path))
        round_parameters(model.eval(), spec.round_to)
        if not arch.representation_size:
            return timm_reference(model, self.reference_name)
        # timm's loader no longer reads the representation layer; apply the file's own arrays
        has_head = "head/kernel" in checkpoint
        return representation_head(
            model,
            checkpoint.tensor("pre_logits/kernel").t(),
            checkpoint.tensor("pre_logits/bias"),
            checkpoint.tensor("head/kernel").t() if has_head else None,
            checkpoint.tensor("head/bias") if has_head else None,
            spec.round_to,
            self.reference_name + " + the file's representation layer",
        )

    def export_map(self, arch: Arch, keys: set[str]) -> KeyMap:
        if arch.distilled:
            raise ConversionError(
                "Google's JAX ViT layout has no distillation token; a distilled DeiT cannot be "
                "exported to it (export to timm instead)"
            )
        dim, heads = arch.embed_dim, arch.num_heads
        head_dim = dim // heads

        def qkv_to_flax(index: int, kernel: bool):
            # rows index*D:(index+1)*D of our qkv -> a (D, heads, head_dim) kernel or a (heads, head_dim) bias
            if kernel:
                return lambda w: w[index * dim : (index + 1) * dim].t().reshape(dim, heads, head_dim)
            return lambda b: b[index * dim : (index + 1) * dim].reshape(heads, head_dim)

        # the import map names every pair once; each of its tensor operations is undone here
        undo = {
            identity: identity,
            transpose: transpose,
            conv_from_flax: conv_to_flax,
            out_from_flax: lambda w: w.t().reshape(heads, head_dim, dim),
        }
        rules: KeyMap = {}
        for ours, rule in self.key_map(set(), arch.depth).items():
            if ours not in keys and ours.startswith(("pre_logits.", "head.")):
                continue  # a model without a representation layer or without a classifier
            if rule.op is qkv_from_flax:
                for index, theirs in enumerate(rule.sources):
                    rules[theirs] = Rule((ours,), qkv_to_flax(index, ours.endswith(".weight")))
            else:
                rules[rule.sources[0]] = Rule((ours,), undo[rule.op])
        return rules


FORMAT = register(JaxFormat())
