"""Source checkpoints for the conversion tests: models of the real libraries' classes at ViT-Ti size,
with random weights.

The weights are drawn here rather than by each library's init, for two reasons: every tensor must be
distinct and non-trivial (torchvision zero-initialises its classifier, LayerNorms start at exactly
1/0, and a converter that dropped or swapped such a tensor would otherwise still pass), and the
libraries' truncated-normal inits are slow on a small shared CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import timm
import torch
import torchvision
from torch import nn

if TYPE_CHECKING:
    from transformers import PretrainedConfig

#: ViT-Ti/16 (the smallest registered variant: scratch_vit_ti16)
TI = dict(embed_dim=192, depth=12, num_heads=3, patch_size=16)
NUM_CLASSES = 10
TOL = 1e-4


#: a small transformers ViT (hidden 32, 2 layers, 16 px at patch 8, 3 labels) for the transformers-route tests
TINY_HF_VIT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    image_size=16,
    patch_size=8,
    num_labels=3,
)


def randomized(build: Callable[[], nn.Module], seed: int = 0) -> nn.Module:
    """``build()`` on the meta device, then every parameter drawn at random (LayerNorm scales near 1)."""
    with torch.device("meta"):
        model = build()
    model.to_empty(device="cpu")
    assert not list(model.buffers()), "a model with buffers needs them initialised"
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            scale_like = param.dim() == 1 and name.endswith("weight")
            param.copy_(1 + 0.1 * noise if scale_like else 0.05 * noise)
    return model.eval()


def batch(img_size: int = 224, n: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, img_size, img_size, generator=torch.Generator().manual_seed(seed))


def timm_vit(**kwargs: Any) -> nn.Module:
    return randomized(lambda: timm.create_model("vit_tiny_patch16_224", **{"num_classes": NUM_CLASSES, **kwargs}))


def timm_deit_distilled() -> nn.Module:
    return randomized(lambda: timm.create_model("deit_tiny_distilled_patch16_224", num_classes=NUM_CLASSES))


def torchvision_vit(representation_size: int | None = None, image_size: int = 224) -> nn.Module:
    return randomized(
        lambda: torchvision.models.VisionTransformer(
            image_size=image_size,
            patch_size=16,
            num_layers=12,
            num_heads=3,
            hidden_dim=192,
            mlp_dim=768,
            num_classes=NUM_CLASSES,
            representation_size=representation_size,
        )
    )


def hf_config(cls_name: str = "ViTConfig", **kwargs: Any) -> PretrainedConfig:
    import transformers

    return getattr(transformers, cls_name)(
        **{
            **dict(
                hidden_size=192,
                num_hidden_layers=12,
                num_attention_heads=3,
                intermediate_size=768,
                image_size=224,
                patch_size=16,
                num_labels=NUM_CLASSES,
            ),
            **kwargs,
        }
    )


#: transformers 5 module names -> the names stored in checkpoints on the Hub (the original ones)
HF_LEGACY_NAMES = (
    (".attention.q_proj.", ".attention.attention.query."),
    (".attention.k_proj.", ".attention.attention.key."),
    (".attention.v_proj.", ".attention.attention.value."),
    (".attention.o_proj.", ".attention.output.dense."),
    (".mlp.fc1.", ".intermediate.dense."),
    (".mlp.fc2.", ".output.dense."),
)


def hf_legacy_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """A live transformers 5 model's state dict under the names stored in Hub checkpoints."""
    out = {}
    for key, value in model.state_dict().items():
        key = key.replace("vit.layers.", "vit.encoder.layer.").replace("deit.layers.", "deit.encoder.layer.")
        if key.startswith("layers."):
            key = "encoder.layer." + key[len("layers.") :]
        for new, old in HF_LEGACY_NAMES:
            key = key.replace(new, old)
        out[key] = value
    return out


def google_npz(model: nn.Module, path: Path, representation: dict[str, torch.Tensor] | None = None) -> Path:
    """Write a timm ViT in the layout of Google's original ViT .npz files (Flax: dense kernels are (in, out),
    attention kernels keep a heads axis). ``representation`` adds pre_logits/head arrays (in21k style)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    dim = sd["cls_token"].shape[-1]
    blocks = list(model.get_submodule("blocks").children())
    # timm's Attention and ours both hold it; nn.Module types undeclared attributes as Tensor | Module
    heads = cast(int, blocks[0].get_submodule("attn").num_heads)
    arrays = {
        "embedding/kernel": sd["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
        "embedding/bias": sd["patch_embed.proj.bias"],
        "cls": sd["cls_token"],
        "Transformer/posembed_input/pos_embedding": sd["pos_embed"],
        "Transformer/encoder_norm/scale": sd["norm.weight"],
        "Transformer/encoder_norm/bias": sd["norm.bias"],
    }
    if "head.weight" in sd:
        arrays["head/kernel"] = sd["head.weight"].T
        arrays["head/bias"] = sd["head.bias"]
    for name, value in (representation or {}).items():
        arrays[name] = value.detach().numpy()
    for i in range(len(blocks)):
        p, b = f"blocks.{i}.", f"Transformer/encoderblock_{i}/"
        mha = b + "MultiHeadDotProductAttention_1/"
        arrays[b + "LayerNorm_0/scale"], arrays[b + "LayerNorm_0/bias"] = sd[p + "norm1.weight"], sd[p + "norm1.bias"]
        arrays[b + "LayerNorm_2/scale"], arrays[b + "LayerNorm_2/bias"] = sd[p + "norm2.weight"], sd[p + "norm2.bias"]
        qkv_w, qkv_b = sd[p + "attn.qkv.weight"], sd[p + "attn.qkv.bias"]
        for j, name in enumerate(("query", "key", "value")):
            arrays[f"{mha}{name}/kernel"] = qkv_w[j * dim : (j + 1) * dim].T.reshape(dim, heads, dim // heads)
            arrays[f"{mha}{name}/bias"] = qkv_b[j * dim : (j + 1) * dim].reshape(heads, dim // heads)
        arrays[mha + "out/kernel"] = sd[p + "attn.proj.weight"].T.reshape(heads, dim // heads, dim)
        arrays[mha + "out/bias"] = sd[p + "attn.proj.bias"]
        for k in range(2):
            arrays[f"{b}MlpBlock_3/Dense_{k}/kernel"] = sd[f"{p}mlp.fc{k + 1}.weight"].T
            arrays[f"{b}MlpBlock_3/Dense_{k}/bias"] = sd[f"{p}mlp.fc{k + 1}.bias"]
    # Any: numpy's stub would match a dict's values against savez's own keyword ``allow_pickle: bool`` too
    contiguous: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    np.savez(path, **contiguous)
    return path


def logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(x)
    return getattr(out, "logits", out)


def load_converted(out_dir: Path) -> nn.Module:
    """Our converted model, loaded the way users load it: through timm's local-dir source."""
    return timm.create_model(f"local-dir:{out_dir}", pretrained=True).eval()


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()
