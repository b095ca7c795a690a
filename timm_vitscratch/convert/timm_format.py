"""timm ViT / DeiT state dicts. Our parameter names are timm's classic names, so the key map is the identity.

Newer timm ViT features that have no counterpart in our model are refused by name: register tokens,
layer scale (unless every gamma is exactly 1), a pre-transformer norm, ``fc_norm``, qk-norm, scale
norms, attention-pool heads.
"""
from __future__ import annotations

import re
from typing import Any, Set

import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .formats import Forward, ReferenceSpec, Resample, SourceFormat, register, round_parameters, without_init
from .keymap import KeyMap, Rule
from .architecture import Arch

#: key patterns of timm ViT features our model does not have -> what the feature is
UNSUPPORTED = (
    (r"^reg_token$", "register tokens (reg_token)"),
    (r"^norm_pre\.", "a norm before the transformer blocks (norm_pre, as in CLIP ViTs)"),
    (r"^fc_norm\.", "a norm after pooling (fc_norm)"),
    (r"\.attn\.(q_norm|k_norm)\.", "qk-norm (attn.q_norm / attn.k_norm)"),
    (r"\.(attn\.norm|mlp\.norm)\.", "scale norms inside attention/MLP (attn.norm / mlp.norm)"),
    (r"^attn_pool\.", "an attention-pooling (MAP) head"),
    (r"^patch_embed\.norm\.", "a norm in the patch embedding"),
)
LAYER_SCALE = re.compile(r"^blocks\.\d+\.(ls[12]\.gamma|gamma_[12])$")


class TimmFormat(SourceFormat):
    name = "timm"
    library = "timm"
    reference_name = "timm's VisionTransformer"
    block_pattern = r"^blocks\.(\d+)\."
    example_keys = ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "pos_embed")
    resample = Resample("bicubic", antialias=True)  # timm's checkpoint_filter_fn
    export_suffixes = (".safetensors", ".pth", ".pt", ".bin")

    def detect(self, keys: Set[str]) -> bool:
        return "patch_embed.proj.weight" in keys and any(k.startswith("blocks.") for k in keys)

    def key_map(self, keys: Set[str], depth: int) -> KeyMap:
        return {key: Rule.rename(key) for key in keys}

    def ignorable_keys(self, checkpoint: Checkpoint) -> Set[str]:
        keys = checkpoint.keys()
        for pattern, feature in UNSUPPORTED:
            hits = [k for k in keys if re.search(pattern, k)]
            if hits:
                raise ConversionError(f"this timm model has {feature} ({hits[0]!r}), which the scratch ViT does not "
                                      f"have; only classic ViT / DeiT checkpoints convert", checkpoint.path)
        ignorable = set()
        for key in (k for k in keys if LAYER_SCALE.match(k)):
            gamma = checkpoint.tensor(key)
            if not torch.all(gamma == 1):
                raise ConversionError(f"this timm model uses layer scale ({key!r} is not all ones), which the scratch "
                                      f"ViT does not have", checkpoint.path)
            ignorable.add(key)  # a gamma of exactly 1 is the identity
        return ignorable

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Forward:
        from timm.models.deit import VisionTransformerDistilled
        from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

        arch = spec.arch
        cls = VisionTransformerDistilled if arch.distilled else VisionTransformer
        model = without_init(
            cls, img_size=spec.img_size, patch_size=arch.patch_size, in_chans=arch.in_chans,
            num_classes=0 if arch.representation_size else arch.num_classes, embed_dim=arch.embed_dim,
            depth=arch.depth, num_heads=arch.num_heads, mlp_ratio=arch.mlp_hidden / arch.embed_dim, qkv_bias=True,
        )
        state_dict = {k: v for k, v in checkpoint.state_dict().items() if not LAYER_SCALE.match(k)}
        heads = {k: state_dict.pop(k) for k in list(state_dict) if k.startswith(("head.", "pre_logits."))
                 and arch.representation_size}
        model.load_state_dict(checkpoint_filter_fn(state_dict, model), strict=True)
        round_parameters(model.eval(), spec.round_to)
        if not arch.representation_size:
            model.description = f"timm's {cls.__name__}"
            return model
        forward = representation_head(model, heads["pre_logits.fc.weight"], heads["pre_logits.fc.bias"],
                                      heads.get("head.weight"), heads.get("head.bias"), spec.round_to)
        forward.description = f"timm's {cls.__name__} + the checkpoint's representation layer"
        return forward

    def export_map(self, arch: Arch, keys: Set[str]) -> KeyMap:
        if arch.representation_size:
            raise ConversionError("timm's VisionTransformer has no representation layer (pre_logits), so a "
                                  "has_logits model cannot be exported to it; export to torchvision or jax instead")
        return {key: Rule.rename(key) for key in keys}


def representation_head(features_model: torch.nn.Module, fc_weight: torch.Tensor, fc_bias: torch.Tensor,
                        head_weight: Any, head_bias: Any, round_to: Any) -> Forward:
    """Reference for has_logits models whose library dropped the layer: pooled features -> Linear+Tanh -> head.

    ``features_model`` is the library's model built without a head (``num_classes=0``); the weights are
    the checkpoint's own tensors.
    """
    params = [fc_weight, fc_bias] + ([head_weight, head_bias] if head_weight is not None else [])
    if round_to is not None:
        params = [p.to(round_to).float() for p in params]

    def forward(x: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(torch.nn.functional.linear(features_model(x), params[0], params[1]))
        return torch.nn.functional.linear(hidden, params[2], params[3]) if len(params) == 4 else hidden

    return forward


FORMAT = register(TimmFormat())
