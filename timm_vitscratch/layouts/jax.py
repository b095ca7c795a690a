"""Google's JAX/Flax ViT ``.npz`` layout (``Transformer/encoderblock_N/...``).

Flax stores dense kernels as (in, out), so they are transposed; attention kernels keep the heads
as their own axis (query/key/value (D, heads, head_dim), out (heads, head_dim, D)), which also tells
the number of heads; the patch convolution is (ph, pw, in, out). Older checkpoints nest everything
under ``opt/target/``, which the reader strips.
"""

from __future__ import annotations

import torch

from .keymap import KeyMap, Rule, transpose
from .layout import Layout, Resample

BLOCK = "Transformer/encoderblock_{}/"
ATTN = "MultiHeadDotProductAttention_1/"
MLP = "MlpBlock_3/"


def conv_from_flax(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.permute(3, 2, 0, 1)  # (ph, pw, in, out) -> (out, in, ph, pw)


def qkv_from_flax(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(D, heads, head_dim) kernels -> our (3D, D) weight; (heads, head_dim) biases -> (3D,)."""
    if q.dim() == 3:
        return torch.cat([t.reshape(t.shape[0], -1).t() for t in (q, k, v)], dim=0)
    return torch.cat([t.reshape(-1) for t in (q, k, v)], dim=0)


def out_from_flax(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.reshape(-1, kernel.shape[-1]).t()  # (heads, head_dim, D) -> (D, heads*head_dim)


class JaxLayout(Layout):
    name = "jax"
    library = "Google's JAX/Flax ViT"
    block_pattern = r"^Transformer/encoderblock_(\d+)/"
    example_keys = (
        "embedding/kernel",
        "cls",
        "Transformer/posembed_input/pos_embedding",
        "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel",
    )
    resample = Resample("bilinear", antialias=False)  # timm's npz loader

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


#: the layout of source jax (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = JaxLayout()
