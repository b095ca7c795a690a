"""Google's JAX/Flax ViT ``.npz`` layout (``Transformer/encoderblock_N/...``), import and export.

Flax stores dense kernels as (in, out), so they are transposed; attention kernels keep the heads
as their own axis (query/key/value (D, heads, head_dim), out (heads, head_dim, D)), which also tells
the number of heads; the patch convolution is (ph, pw, in, out). Older checkpoints nest everything
under ``opt/target/``, which the reader strips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..errors import ConversionError
from ..layouts.checkpoint import Checkpoint
from ..layouts.jax import ATTN, BLOCK, JaxLayout, conv_from_flax, out_from_flax, qkv_from_flax
from ..layouts.keymap import KeyMap, Rule, identity, transpose
from ..models.architecture import Arch
from .source_format import (
    Reference,
    ReferenceSpec,
    SourceFormat,
    round_parameters,
    timm_reference,
)
from .timm_format import representation_head, timm_vit


def conv_to_flax(weight: torch.Tensor) -> torch.Tensor:
    return weight.permute(2, 3, 1, 0)  # (out, in, ph, pw) -> (ph, pw, in, out)


class JaxFormat(JaxLayout, SourceFormat):
    reference_name = "timm's VisionTransformer filled by timm's .npz loader"
    export_suffixes = (".npz",)

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
        model = timm_vit(VisionTransformer, spec, qkv_bias=True)
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
        if heads is None:  # the JAX layout splits the attention kernels per head
            raise ConversionError(
                "export to jax needs the attention head count, which this architecture does not state"
            )
        head_dim = dim // heads

        def qkv_to_flax(index: int, kernel: bool) -> Callable[[torch.Tensor], torch.Tensor]:
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


#: what conversion reads and writes of source jax (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = JaxFormat()
