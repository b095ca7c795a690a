"""Pretrained tags: the public weights of every variant, each tag's cfg read from its source's own registry.

A tag is ``variant.tag`` as timm names weights. Its ``pretrained_cfg`` points timm's own
``load_pretrained`` at the file where the weights live today (``hf_hub_id`` or ``url``, cached where
timm caches them); ``checkpoint_filter_fn`` remaps the source's key names on load. Facts are taken
from the source library's own registry where it has one, so they cannot drift:

- ``timm`` tags copy ``timm.models.get_pretrained_cfg(timm_name)`` (repo, preprocessing, license); which tags a
  variant offers is its row's, in the family records (``variants.py``);
- ``torchvision`` tags read ``torchvision.models.ViT_*_Weights`` (URL, ``transforms()``, ``meta``);
- ``transformers`` repos (Google's ``vit-*-in21k``, a ``ViTModel`` whose pooler is our representation
  layer) are listed by hand in :data:`TRANSFORMERS_REPOS`; the repos were checked on the Hub.

The scheme: ``<source>_<data>``. timm's tags keep timm's own names (``augreg_in21k_ft_in1k``,
``orig_in21k``, ``fb_in1k``); torchvision's are ``tv_in1k``, ``tv_swag_e2e_in1k``, ``tv_swag_lin_in1k``;
Google's transformers repos are ``google_in21k``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from timm.models import get_pretrained_cfg

from .variants import FAMILIES

#: Each variant's tags in the order timm lists its own (its first is the default), then torchvision's, then
#: Google's: ``create_model(variant, pretrained=True)`` loads the first, as timm does for an untagged name.
#: timm's: our "variant.tag" -> timm's "model.tag" (weights in the repo timm/<that>), from each family's rows.
TIMM_TAGS: dict[str, str] = {ours: theirs for family in FAMILIES for ours, theirs in family.timm_tags.items()}

TORCHVISION_TAGS: dict[str, tuple[str, str]] = {  # "variant.tag" -> (torchvision Weights enum, member)
    "scratch_vit_b16.tv_in1k": ("ViT_B_16_Weights", "IMAGENET1K_V1"),
    "scratch_vit_b16.tv_swag_e2e_in1k": ("ViT_B_16_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_b16.tv_swag_lin_in1k": ("ViT_B_16_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
    "scratch_vit_b32.tv_in1k": ("ViT_B_32_Weights", "IMAGENET1K_V1"),
    "scratch_vit_l16.tv_in1k": ("ViT_L_16_Weights", "IMAGENET1K_V1"),
    "scratch_vit_l16.tv_swag_e2e_in1k": ("ViT_L_16_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_l16.tv_swag_lin_in1k": ("ViT_L_16_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
    "scratch_vit_l32.tv_in1k": ("ViT_L_32_Weights", "IMAGENET1K_V1"),
    "scratch_vit_h14.tv_swag_e2e_in1k": ("ViT_H_14_Weights", "IMAGENET1K_SWAG_E2E_V1"),
    "scratch_vit_h14.tv_swag_lin_in1k": ("ViT_H_14_Weights", "IMAGENET1K_SWAG_LINEAR_V1"),
}

#: Google's transformers-format ImageNet-21k repos (``ViTModel``: no classifier, the pooler kept), and the
#: weight file each holds on ``main`` (timm's loader takes ``model.safetensors`` first, else
#: ``pytorch_model.bin``). Preprocessing is their ``preprocessor_config.json``: resize straight to 224
#: (transformers' default bilinear), mean = std = 0.5. Checked on the Hub: repo trees of ``main``.
TRANSFORMERS_REPOS: dict[str, tuple[str, str]] = {  # "variant.tag" -> (repo id, weight file on main)
    "scratch_vit_b16_in21k.google_in21k": ("google/vit-base-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_b32_in21k.google_in21k": ("google/vit-base-patch32-224-in21k", "model.safetensors"),
    "scratch_vit_l16_in21k.google_in21k": ("google/vit-large-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_l32_in21k.google_in21k": ("google/vit-large-patch32-224-in21k", "pytorch_model.bin"),
    "scratch_vit_h14_in21k.google_in21k": ("google/vit-huge-patch14-224-in21k", "pytorch_model.bin"),
}

#: the weight file each of those repos holds, by repo id (what a load of it fetches)
REPO_FILES: dict[str, str] = dict(TRANSFORMERS_REPOS.values())

#: Model arguments a tag's weights need beyond the variant's (what ``_create`` applies for the tag):
#: transformers' ViT normalises with eps 1e-12 where timm and torchvision use 1e-6.
TAG_MODEL_ARGS: dict[str, dict[str, Any]] = {tag: {"norm_eps": 1e-12} for tag in TRANSFORMERS_REPOS}

_VIT_PAPER = ("arXiv:2010.11929", "An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale")
_AUGREG_PAPER = (
    "arXiv:2106.10270",
    "How to train your ViT? Data, Augmentation, and Regularization in Vision Transformers",
)
_DEIT_PAPER = ("arXiv:2012.12877", "Training data-efficient image transformers & distillation through attention")
_DINOV3_PAPER = ("arXiv:2508.10104", "DINOv3")
_DINOV2_PAPER = ("arXiv:2304.07193", "DINOv2: Learning Robust Visual Features without Supervision")
_SIGLIP_PAPER = ("arXiv:2303.15343", "Sigmoid Loss for Language Image Pre-Training")
_SIGLIP2_PAPER = (
    "arXiv:2502.14786",
    "SigLIP 2: Multilingual Vision-Language Encoders with Improved Semantic Understanding, Localization, and "
    "Dense Features",
)
_EVA02_PAPER = ("arXiv:2303.11331", "EVA-02: A Visual Representation for Neon Genesis")
_EVA_CLIP_PAPER = ("arXiv:2303.15389", "EVA-CLIP: Improved Training Techniques for CLIP at Scale")
_PE_PAPER = (
    "arXiv:2504.13181",
    "Perception Encoder: The best visual embeddings are not at the output of the network",
)
_PALIGEMMA_PAPER = ("arXiv:2407.07726", "PaliGemma: A versatile 3B VLM for transfer")
_AIMV2_PAPER = ("arXiv:2411.14402", "Multimodal Autoregressive Pre-training of Large Vision Encoders")
_SWAG_PAPER = ("arXiv:2201.08371", "Revisiting Weakly Supervised Pre-Training of Visual Perception Models")
_TIMM_ORIGINS = {  # timm's tag prefix -> (paper, where the weights were first published)
    "augreg": (_AUGREG_PAPER, "https://github.com/google-research/vision_transformer"),
    "orig": (_VIT_PAPER, "https://github.com/google-research/vision_transformer"),
    "fb": (_DEIT_PAPER, "https://github.com/facebookresearch/deit"),
    "lvd1689m": (_DINOV3_PAPER, "https://github.com/facebookresearch/dinov3"),
    "sat493m": (_DINOV3_PAPER, "https://github.com/facebookresearch/dinov3"),
    "eupe": (_DINOV3_PAPER, "https://huggingface.co/timm"),
    "lvd142m": (_DINOV2_PAPER, "https://github.com/facebookresearch/dinov2"),
    "webli": (_SIGLIP_PAPER, "https://github.com/google-research/big_vision"),
    "v": (_SIGLIP2_PAPER, "https://github.com/google-research/big_vision"),  # "v2_webli": the prefix less its digits
    "pali": (_PALIGEMMA_PAPER, "https://github.com/google-research/big_vision"),  # PaliGemma's and PaliGemma 2's towers
}
#: timm's model-name pattern -> (paper, where the weights were first published), before the tag's prefix decides
#: (timm's ``fb`` tags are DeiT's and also the Perception Encoder's)
_FAMILY_ORIGINS = {
    "eva02_*_clip_*": (_EVA_CLIP_PAPER, "https://github.com/baaivision/EVA"),
    "eva02_*": (_EVA02_PAPER, "https://github.com/baaivision/EVA"),
    "vit_pe_*": (_PE_PAPER, "https://github.com/facebookresearch/perception_models"),
    "aimv2_*": (_AIMV2_PAPER, "https://github.com/apple/ml-aim"),
}
_PREPROCESSING = ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes", "license")


def _paper(paper: tuple[str, str]) -> dict[str, str]:
    return {"paper_ids": paper[0], "paper_name": paper[1]}


def timm_cfg(timm_name: str) -> dict[str, Any]:
    """A timm-repo tag: timm's own cfg for the weights (its Hub repo and preprocessing)."""
    source = get_pretrained_cfg(timm_name)
    if source is None or not source.hf_hub_id or source.tag is None:
        raise KeyError(f"timm has no Hub weights {timm_name!r}")
    family = next((o for pattern, o in _FAMILY_ORIGINS.items() if fnmatch.fnmatchcase(timm_name, pattern)), None)
    paper, origin = family or _TIMM_ORIGINS[source.tag.split("_")[0].rstrip("0123456789")]
    return {
        "hf_hub_id": source.hf_hub_id,
        **{k: getattr(source, k) for k in _PREPROCESSING},
        "origin_url": f"https://huggingface.co/{source.hf_hub_id}",
        **_paper(paper),
        "description": f"timm's {timm_name} (weights first published at {origin})",
    }


#: licenses torchvision's weights declare in ``meta["license"]`` (a link), as Hub license identifiers; weights
#: that declare none are torchvision's own, under torchvision's BSD-3-Clause license
TORCHVISION_LICENSES = {"https://github.com/facebookresearch/SWAG/blob/main/LICENSE": "cc-by-nc-4.0"}


def torchvision_license(weights: Any) -> str:
    """The license of torchvision weights, as their ``meta`` records it (a new, unknown link is an error)."""
    link = weights.meta.get("license")
    if link is None:
        return "bsd-3-clause"
    if link not in TORCHVISION_LICENSES:
        raise KeyError(f"{weights} declares the license {link}, which TORCHVISION_LICENSES does not name")
    return TORCHVISION_LICENSES[link]


def torchvision_weights(enum_name: str, member: str) -> Any:
    import torchvision.models  # timm has imported it already; kept local so the table stays data

    return getattr(getattr(torchvision.models, enum_name), member)


def torchvision_cfg(enum_name: str, member: str) -> dict[str, Any]:
    """A torchvision tag: URL, preprocessing from ``weights.transforms()``, top-1 from ``weights.meta``."""
    weights = torchvision_weights(enum_name, member)
    transform = weights.transforms()
    crop, resize = transform.crop_size[0], transform.resize_size[0]
    swag = "SWAG" in member
    top1 = weights.meta["_metrics"]["ImageNet-1K"]["acc@1"]
    return {
        "url": weights.url,
        "num_classes": len(weights.meta["categories"]),
        "input_size": (3, crop, crop),
        "crop_pct": round(crop / resize, 4),
        "crop_mode": "center",
        "interpolation": transform.interpolation.value,
        "mean": tuple(transform.mean),
        "std": tuple(transform.std),
        "license": torchvision_license(weights),
        "origin_url": weights.meta.get("recipe"),
        **_paper(_SWAG_PAPER if swag else _VIT_PAPER),
        "description": f"torchvision.models.{enum_name}.{member}",
        "notes": (f"ImageNet-1k top-1 {top1} (torchvision)",),
    }


def transformers_cfg(repo_id: str) -> dict[str, Any]:
    """A Google transformers repo: no classifier; the pooler (Linear + Tanh) is the representation layer."""
    return {
        "hf_hub_id": repo_id,
        "num_classes": 0,
        "input_size": (3, 224, 224),
        "crop_pct": 1.0,
        "crop_mode": "center",
        "interpolation": "bilinear",
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
        # the license each of these repos' model cards declares on the Hub
        "license": "apache-2.0",
        "origin_url": f"https://huggingface.co/{repo_id}",
        **_paper(_VIT_PAPER),
        "description": f"Google's ImageNet-21k ViT, transformers format ({repo_id}); pooler kept, head zeroed "
        "by Google and not published",
    }


@functools.cache
def pretrained_tags() -> dict[str, dict[str, Any]]:
    """Every tag: ``"variant.tag" -> pretrained-cfg fields`` (in table order)."""
    tags = {tag: timm_cfg(name) for tag, name in TIMM_TAGS.items()}
    tags.update({tag: torchvision_cfg(*ref) for tag, ref in TORCHVISION_TAGS.items()})
    tags.update({tag: transformers_cfg(repo) for tag, (repo, _) in TRANSFORMERS_REPOS.items()})
    return tags


def tag_model_args(model_tag: str) -> dict[str, Any]:
    """Model arguments the weights of ``model_tag`` need beyond the variant's architecture."""
    return dict(TAG_MODEL_ARGS.get(model_tag, {}))


@functools.cache
def imagenet_label_names(num_classes: int) -> tuple[str, ...] | None:
    """ImageNet synset names for a classifier of ``num_classes`` (as timm infers the subset), else None."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    subset = infer_imagenet_subset({"num_classes": num_classes})
    return tuple(ImageNetInfo(subset).label_names()) if subset else None


def source_of(model_tag: str) -> str:
    """``timm``, ``torchvision`` or ``transformers``: the library whose format the tag's file is in."""
    if model_tag in TIMM_TAGS:
        return "timm"
    if model_tag in TORCHVISION_TAGS:
        return "torchvision"
    if model_tag in TRANSFORMERS_REPOS:
        return "transformers"
    raise KeyError(f"{model_tag!r} is not a pretrained tag of the zoo")


def top1(cfg: Mapping[str, Any]) -> float | None:
    """The source's published ImageNet-1k top-1 recorded in a tag's notes, if any (a config's notes are
    anyone's text: a note that does not hold a number is not a top-1)."""
    notes = cfg.get("notes") or ()
    for note in [notes] if isinstance(notes, str) else notes if isinstance(notes, list | tuple) else ():
        if isinstance(note, str) and note.startswith("ImageNet-1k top-1 "):
            try:
                return float(note.split()[2])
            except (IndexError, ValueError):
                return None
    return None


# --- Hub weights, fetched through the Hub client's checks before timm loads them ---------------------------
#: ``(repo_id, revision or None, cache_dir or None) -> commit id``: puts the repo's weights at the revision into
#: the Hugging Face cache, checked, and says which commit they are at. Set by the package (its ``__init__``) to
#: :func:`timm_vitscratch.hub.timm_weights.fetch_weights`, a layer above this one.
HubWeightsFetcher = Callable[[str, "str | None", "str | os.PathLike[str] | None"], str]
_hub_weights_fetcher: list[HubWeightsFetcher] = []


def set_hub_weights_fetcher(fetch: HubWeightsFetcher) -> None:
    """Set the function that fetches a Hub repo's weights before timm loads them (see :data:`HubWeightsFetcher`)."""
    _hub_weights_fetcher[:] = [fetch]


def fetch_hub_weights(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> str:
    """The commit id at which the repo's weights now lie in the cache, fetched by the function set; its errors
    pass on. Without one set (the package's ``__init__`` always sets it), nothing is fetched unchecked."""
    if not _hub_weights_fetcher:
        raise RuntimeError(
            f"cannot fetch the weights of {repo_id}: no Hub weights fetcher is set (import timm_vitscratch)"
        )
    return _hub_weights_fetcher[0](repo_id, revision, cache_dir)
