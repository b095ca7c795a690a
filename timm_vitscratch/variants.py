"""The zoo: architecture table, pretrained cfgs and timm ``@register_model`` entry points."""
from __future__ import annotations

import difflib
from typing import Any, Dict

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from .vision_transformer import VisionTransformer, checkpoint_filter_fn

_TI = dict(embed_dim=192, depth=12, num_heads=3)
_S = dict(embed_dim=384, depth=12, num_heads=6)
_B = dict(embed_dim=768, depth=12, num_heads=12)
_L = dict(embed_dim=1024, depth=24, num_heads=16)
_H = dict(embed_dim=1280, depth=32, num_heads=16)

#: Architecture of every registered variant (model kwargs before user overrides).
ARCHITECTURES: Dict[str, Dict[str, Any]] = {
    "scratch_vit_ti16": dict(patch_size=16, **_TI),
    "scratch_vit_s16": dict(patch_size=16, **_S),
    "scratch_vit_b16": dict(patch_size=16, **_B),
    "scratch_vit_b32": dict(patch_size=32, **_B),
    "scratch_vit_l16": dict(patch_size=16, **_L),
    "scratch_vit_l32": dict(patch_size=32, **_L),
    "scratch_vit_h14": dict(patch_size=14, **_H),
    # ImageNet-21k "has_logits": a Linear+Tanh representation layer of width embed_dim
    "scratch_vit_b16_in21k": dict(patch_size=16, representation_size=768, **_B),
    "scratch_vit_b32_in21k": dict(patch_size=32, representation_size=768, **_B),
    "scratch_vit_l16_in21k": dict(patch_size=16, representation_size=1024, **_L),
    "scratch_vit_l32_in21k": dict(patch_size=32, representation_size=1024, **_L),
    "scratch_vit_h14_in21k": dict(patch_size=14, representation_size=1280, **_H),
    "scratch_deit_ti16_distilled": dict(patch_size=16, distilled=True, **_TI),
    "scratch_deit_s16_distilled": dict(patch_size=16, distilled=True, **_S),
    "scratch_deit_b16_distilled": dict(patch_size=16, distilled=True, **_B),
}


def unknown_model_message(name: str) -> str:
    """Error text for a name that is not registered, with the closest registered names."""
    close = difflib.get_close_matches(name, list(ARCHITECTURES), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(ARCHITECTURES)}"
    return f"unknown model {name!r}{hint}"


def _vit_cfg(**kwargs: Any) -> Dict[str, Any]:
    """Pretrained cfg as timm's original ViT weights use (Inception mean/std, bicubic, crop .9)."""
    return {
        "url": "", "num_classes": 1000, "input_size": (3, 224, 224), "pool_size": None,
        "crop_pct": 0.9, "interpolation": "bicubic", "fixed_input_size": True,
        "mean": IMAGENET_INCEPTION_MEAN, "std": IMAGENET_INCEPTION_STD,
        "first_conv": "patch_embed.proj", "classifier": "head", "license": "apache-2.0",
        **kwargs,
    }


def _deit_cfg(**kwargs: Any) -> Dict[str, Any]:
    """DeiT weights were trained with ImageNet mean/std and crop .875; two classifiers."""
    return _vit_cfg(mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.875,
                    classifier=("head", "head_dist"), **kwargs)


def _pretrained_cfg(name: str) -> Dict[str, Any]:
    if name.startswith("scratch_deit_"):
        return _deit_cfg()
    if name.endswith("_in21k"):
        return _vit_cfg(num_classes=21843)
    return _vit_cfg()


default_cfgs = generate_default_cfgs({name: _pretrained_cfg(name) for name in ARCHITECTURES})


def _create(variant: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    model_args = {**ARCHITECTURES[variant], **kwargs}
    return build_model_with_cfg(
        VisionTransformer, variant, pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=3, feature_cls="getter"),
        **model_args,
    )


@register_model
def scratch_vit_ti16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_ti16", pretrained, **kwargs)


@register_model
def scratch_vit_s16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_s16", pretrained, **kwargs)


@register_model
def scratch_vit_b16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b16", pretrained, **kwargs)


@register_model
def scratch_vit_b32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b32", pretrained, **kwargs)


@register_model
def scratch_vit_l16(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l16", pretrained, **kwargs)


@register_model
def scratch_vit_l32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l32", pretrained, **kwargs)


@register_model
def scratch_vit_h14(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_h14", pretrained, **kwargs)


@register_model
def scratch_vit_b16_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b16_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_b32_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_b32_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_l16_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l16_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_l32_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_l32_in21k", pretrained, **kwargs)


@register_model
def scratch_vit_h14_in21k(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_vit_h14_in21k", pretrained, **kwargs)


@register_model
def scratch_deit_ti16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_ti16_distilled", pretrained, **kwargs)


@register_model
def scratch_deit_s16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_s16_distilled", pretrained, **kwargs)


@register_model
def scratch_deit_b16_distilled(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return _create("scratch_deit_b16_distilled", pretrained, **kwargs)
