"""Each variant's pretrained cfgs as timm's registry holds them: the cfg its family gives it, one per tag (the zoo's
tags, then Hub weights registered at run time), and which tag its bare name loads."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from timm.data import IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD
from timm.models import DefaultCfg, PretrainedCfg, get_pretrained_cfg, split_model_name_tag

from .pretrained import pretrained_tags
from .variants import ARCHITECTURES, FAMILY_OF, TIMM_NAMES

#: what a cfg says where its family says nothing: timm's original ViT weights (Inception mean/std, bicubic, crop
#: .9). No licence: a cfg without weights has none; each tag records its source's own (pretrained.py).
VIT_CFG: dict[str, Any] = {
    "url": "",
    "num_classes": 1000,
    "input_size": (3, 224, 224),
    "pool_size": None,
    "crop_pct": 0.9,
    "interpolation": "bicubic",
    "fixed_input_size": True,
    "mean": IMAGENET_INCEPTION_MEAN,
    "std": IMAGENET_INCEPTION_STD,
    "first_conv": "patch_embed.proj",
    "classifier": "head",
}
#: the fields of timm's own cfg a family with ``cfg_from_timm`` takes: classifier, input size, preprocessing
_FROM_TIMM = ("num_classes", "input_size", "crop_pct", "interpolation", "mean", "std", "fixed_input_size")


def variant_cfg(name: str) -> dict[str, Any]:
    """The pretrained cfg of variant ``name`` without weights: its family's fields (or timm's cfg of its timm model),
    its row's, and its input size (its ``img_size`` unless the cfg sets one)."""
    family = FAMILY_OF[name]
    if family.cfg_from_timm:
        cfg = get_pretrained_cfg(TIMM_NAMES[name])
        assert cfg is not None, name
        return {**VIT_CFG, **{field: getattr(cfg, field) for field in _FROM_TIMM}}
    size = ARCHITECTURES[name].get("img_size", 224)
    return {**VIT_CFG, "input_size": (3, size, size), **family.cfg, **family.row(name).cfg}


#: Weights published on the Hugging Face Hub under a pretrained tag, as timm's own weights are:
#: ``"variant.tag" -> pretrained-cfg overrides`` with at least ``hf_hub_id`` (``"ORG/NAME"``, or
#: ``"ORG/NAME@commit"`` to pin a revision). ``timm.create_model("variant.tag", pretrained=True)`` then
#: downloads ``model.safetensors`` from that repo. The project has published no weights yet, so the
#: table is empty; :func:`~.registry.register_hub_weights` adds entries at run time.
HUB_WEIGHTS: dict[str, dict[str, Any]] = {}
DEFAULT_TAGS: dict[str, str] = {}  # variant -> the tag `pretrained=True` without a tag loads
PRETRAINED_CFG_FIELDS = {f.name for f in dataclasses.fields(PretrainedCfg)}


def _fits(variant: str, cfg: dict[str, Any]) -> bool:
    """True when weights of ``cfg`` keep the variant's registered architecture (classifier, input size)."""
    own = variant_cfg(variant)
    return all(cfg.get(k, own[k]) == own[k] for k in ("num_classes", "input_size"))


def default_cfg(variant: str) -> DefaultCfg:
    """Every pretrained cfg of ``variant``: the zoo's tags in table order, then Hub tags.

    As in timm, the first tag is the default and the untagged name's cfg is that tag's, so
    ``create_model(variant, pretrained=True)`` loads its weights. The default is the first tag (timm's
    order) whose weights keep the variant's architecture: a headless tag (timm's ``orig_in21k``,
    Google's repos) never silently changes what the bare name builds. A variant without such a tag
    keeps an untagged cfg without weights first (and ``pretrained=True`` without a tag is refused).
    """
    cfg = DefaultCfg()
    for name_tag, overrides in {**pretrained_tags(), **HUB_WEIGHTS}.items():
        arch, tag = split_model_name_tag(name_tag)
        if arch == variant:
            cfg.cfgs[tag] = PretrainedCfg(**{**variant_cfg(variant), **overrides})
            cfg.tags.append(tag)
            cfg.is_pretrained = True
    chosen = DEFAULT_TAGS.get(variant) or next((t for t in cfg.tags if _fits(variant, cfg.cfgs[t].to_dict())), "")
    if chosen:
        cfg.tags.remove(chosen)
    else:
        cfg.cfgs[""] = PretrainedCfg(**variant_cfg(variant))
    cfg.tags.appendleft(chosen)
    return cfg


#: each variant's cfgs, as timm's ``register_model`` reads them from the module its entry point names
default_cfgs = {name: default_cfg(name) for name in ARCHITECTURES}


def default_tag(variant: str) -> str:
    """The tag ``create_model(variant)`` resolves to (timm's rule: the first registered)."""
    return default_cfgs[variant].tags[0]


def unknown_model_message(name: str) -> str:
    """Error text for a name that is not registered, with the closest registered names."""
    mirrors = [ours for ours, theirs in TIMM_NAMES.items() if theirs == name]
    if mirrors:  # timm's own name: ours mirrors it under another
        return f"unknown model {name!r}: that is timm's name; its mirror here is {', '.join(mirrors)}"
    close = difflib.get_close_matches(name, list(ARCHITECTURES), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; vitscratch list shows every registered name"
    return f"unknown model {name!r}{hint}"
