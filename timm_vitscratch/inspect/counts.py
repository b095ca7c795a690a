"""Parameter accounting: the true count, the leaf-module count torchsummary prints, and the formulas.

The true count is ``models.model_args.true_param_count``, which also bounds what a file may ask for (the
model it describes, built on ``meta`` and counted); the formulas here explain it and are tested against it.

torchsummary hooks every module except the model itself and containers and sums each one's
``weight`` and ``bias``. Parameters the model holds directly (class token, position embedding,
distillation token) are never any module's weight or bias, so torchsummary does not see them.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ..models.model_args import true_param_count  # the one count; the size bound counts a meta model with it
from ..models.variants import ARCHITECTURES

#: torchvision builders with the same architecture as a registered variant.
TORCHVISION_EQUIVALENTS = {
    "scratch_vit_b16": "vit_b_16",
    "scratch_vit_b32": "vit_b_32",
    "scratch_vit_l16": "vit_l_16",
    "scratch_vit_l32": "vit_l_32",
    "scratch_vit_h14": "vit_h_14",
    "scratch_vit_b16_in21k": "vit_b_16",
    "scratch_vit_b32_in21k": "vit_b_32",
    "scratch_vit_l16_in21k": "vit_l_16",
    "scratch_vit_l32_in21k": "vit_l_32",
    "scratch_vit_h14_in21k": "vit_h_14",
}


def hidden_parameters(model: nn.Module) -> dict[str, int]:
    """Parameters torchsummary cannot see: those that are not a submodule's ``weight``/``bias``."""
    hidden = OrderedDict()
    for name, param in model.named_parameters():
        owner, _, attr = name.rpartition(".")
        if not owner or attr not in ("weight", "bias"):
            hidden[name] = param.numel()
    return hidden


def leaf_module_param_count(model: nn.Module) -> int:
    """The "Total params" torchsummary prints: the true count minus the hidden parameters."""
    return true_param_count(model) - sum(hidden_parameters(model).values())


def block_param_formula(embed_dim: int) -> int:
    """Parameters of one pre-norm block with MLP ratio 4 and qkv bias: 12h² + 13h.

    qkv 3h²+3h, attention projection h²+h, fc1 4h²+4h, fc2 4h²+h, two LayerNorms 4h.
    """
    return 12 * embed_dim**2 + 13 * embed_dim


def block_part_formulas(embed_dim: int) -> dict[str, int]:
    """The three parts of 12h² + 13h: attention 4h²+4h, MLP 8h²+5h, the two LayerNorms 4h."""
    h = embed_dim
    return OrderedDict(attention=4 * h * h + 4 * h, mlp=8 * h * h + 5 * h, norms=4 * h)


def block_param_breakdown(block: nn.Module) -> dict[str, int]:
    """One block's parameters by part: attention (qkv + proj), MLP (fc1 + fc2), norms (norm1 + norm2)."""
    parts = OrderedDict(attention=0, mlp=0, norms=0)
    for name, param in block.named_parameters():
        top = name.split(".", 1)[0]
        if top == "attn":
            parts["attention"] += param.numel()
        elif top == "mlp":
            parts["mlp"] += param.numel()
        elif top in ("norm1", "norm2"):
            parts["norms"] += param.numel()
        else:
            raise ValueError(f"block parameter {name!r} is in none of attention / MLP / norms")
    return parts


def analytic_param_count(
    patch_size: int,
    embed_dim: int,
    depth: int,
    num_classes: int = 1000,
    img_size: int = 224,
    in_chans: int = 3,
    representation_size: int | None = None,
    distilled: bool = False,
    **_: Any,
) -> int:
    """The true count from the architecture alone (learned position table, MLP ratio 4)."""
    prefix = 2 if distilled else 1
    patches = (img_size // patch_size) ** 2
    count = patch_size**2 * in_chans * embed_dim + embed_dim  # patch projection
    count += prefix * embed_dim + (patches + prefix) * embed_dim  # tokens + position table
    count += depth * block_param_formula(embed_dim) + 2 * embed_dim  # blocks + final norm
    head_in = embed_dim
    if representation_size:
        count += embed_dim * representation_size + representation_size
        head_in = representation_size
    if num_classes:
        count += (2 if distilled else 1) * (head_in * num_classes + num_classes)
    return count


def param_breakdown(model: nn.Module) -> dict[str, int]:
    """The tally a reader makes by hand: patch embedding, tokens, encoder blocks, final norm, head."""
    groups = OrderedDict(
        (k, 0)
        for k in (
            "patch embedding (conv)",
            "class/dist tokens",
            "position embedding",
            "encoder blocks",
            "final norm",
            "representation (pre_logits)",
            "classifier head(s)",
        )
    )
    for name, param in model.named_parameters():
        if name.startswith("patch_embed."):
            key = "patch embedding (conv)"
        elif name in ("cls_token", "dist_token"):
            key = "class/dist tokens"
        elif name == "pos_embed":
            key = "position embedding"
        elif name.startswith("blocks."):
            key = "encoder blocks"
        elif name.startswith("norm."):
            key = "final norm"
        elif name.startswith("pre_logits."):
            key = "representation (pre_logits)"
        else:
            key = "classifier head(s)"
        groups[key] += param.numel()
    return groups


def torchvision_reference(model_name: str, num_classes: int | None = None, device: Any = "meta") -> nn.Module | None:
    """torchvision's model of the same architecture (on ``meta`` by default), or None (DeiT has none).

    Uses torchvision's named builder (``vit_b_16`` ...) where one exists, else its generic
    ``VisionTransformer`` class (ViT-Ti/S). The benchmarks build their torchvision contestant here.
    """
    arch = ARCHITECTURES[model_name]
    if arch.get("distilled"):
        return None
    import torchvision

    default_classes = 21843 if model_name.endswith("_in21k") else 1000
    kwargs: dict[str, Any] = dict(num_classes=default_classes if num_classes is None else num_classes)
    if arch.get("representation_size"):
        kwargs["representation_size"] = arch["representation_size"]
    with torch.device(device):
        builder = TORCHVISION_EQUIVALENTS.get(model_name)
        if builder is not None:
            return getattr(torchvision.models, builder)(**kwargs)
        h = arch["embed_dim"]
        return torchvision.models.VisionTransformer(
            image_size=224,
            patch_size=arch["patch_size"],
            num_layers=arch["depth"],
            num_heads=arch["num_heads"],
            hidden_dim=h,
            mlp_dim=4 * h,
            **kwargs,
        )


def torchvision_param_count(model_name: str, num_classes: int | None = None) -> int | None:
    """True count of torchvision's equivalent model, or None if it has none."""
    reference = torchvision_reference(model_name, num_classes)
    return None if reference is None else true_param_count(reference)
