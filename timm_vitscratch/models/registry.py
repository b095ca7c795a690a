"""The zoo in timm's registry: one entry point per row of the table, made from the table, not written per name.

timm's ``register_model`` files an entry point under the module its ``__module__`` names, by its ``__name__``, and
reads that module's ``default_cfgs`` for its pretrained cfgs. The entry points are filed under ``variants``, the
table they come from: ``timm.list_models(module='variants')``, ``timm.models.model_entrypoint``, pickling by
reference and ``variants.scratch_vit_b16`` find them there, as they found the hand-written functions before.
Hub weights registered at run time (:func:`register_hub_weights`) re-register the variant's cfgs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from timm.models import register_model, split_model_name_tag

from . import variants
from .entry import create
from .pretrained_cfgs import (
    DEFAULT_TAGS,
    HUB_WEIGHTS,
    PRETRAINED_CFG_FIELDS,
    default_cfg,
    default_cfgs,
    unknown_model_message,
)
from .variants import ARCHITECTURES, FAMILY_OF
from .vision_transformer import VisionTransformer

EntryPoint = Callable[..., VisionTransformer]


def entry_point(variant: str) -> EntryPoint:
    """timm's entry point of ``variant``: ``(pretrained=False, **kwargs) -> model``, named as timm's registry and
    pickle look it up (``variants.<variant>``)."""

    def entry(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
        return create(variant, pretrained, **kwargs)

    family, timm_name = FAMILY_OF[variant], FAMILY_OF[variant].row(variant).timm
    mirrors = f", the architecture of timm's {timm_name}" if timm_name else ""
    entry.__name__ = entry.__qualname__ = variant
    entry.__module__ = variants.__name__
    entry.__doc__ = (
        f"{family.title}: ``{variant}``{mirrors}. ``pretrained``: load the default tag's weights; ``kwargs``: "
        "constructor arguments over the variant's (timm.create_model's)."
    )
    return entry


def _register(variant: str) -> None:
    register_model(getattr(variants, variant))


def register_variants() -> None:
    """Put every variant's entry point and cfgs where timm's registry reads them, and register them."""
    setattr(variants, "default_cfgs", default_cfgs)  # noqa: B010  (timm reads the attribute of that module)
    for name in ARCHITECTURES:
        setattr(variants, name, entry_point(name))
        _register(name)


def _reregister(variant: str) -> None:
    default_cfgs[variant] = default_cfg(variant)
    with warnings.catch_warnings():  # re-registering is how timm takes in a changed default_cfgs entry
        warnings.filterwarnings("ignore", message=f"Overwriting {variant} in registry")
        _register(variant)


def register_hub_weights(model_tag: str, hf_hub_id: str, default: bool = False, **cfg: Any) -> None:
    """Publish Hub weights under ``"variant.tag"`` in timm's registry (like timm's own pretrained tags).

    ``hf_hub_id``: ``"ORG/NAME"`` or ``"ORG/NAME@revision"``; a trailing ``/`` (``"ORG/"``) completes it
    to ``"ORG/variant.tag"``, as timm does for ``"timm/"``. ``cfg``: pretrained-cfg fields that differ
    from the variant's (``num_classes``, ``input_size``, ``mean``, ``std``, ``license`` ...).
    ``default=True`` makes ``create_model("variant", pretrained=True)`` load these weights.
    """
    variant, tag = split_model_name_tag(model_tag)
    if variant not in ARCHITECTURES:
        raise ValueError(f"{unknown_model_message(variant)} (in {model_tag!r})")
    if not tag:
        raise ValueError(f"{model_tag!r} has no tag: give 'variant.tag', e.g. '{variant}.my_weights_in1k'")
    unknown = sorted(set(cfg) - PRETRAINED_CFG_FIELDS - {"hf_hub_id"})
    if unknown:
        raise ValueError(
            f"unknown pretrained-cfg fields {unknown}; timm's PretrainedCfg has {sorted(PRETRAINED_CFG_FIELDS)}"
        )
    if "/" not in hf_hub_id:
        raise ValueError(f"hf_hub_id must be 'ORG/NAME' (or 'ORG/' to complete with the tag), got {hf_hub_id!r}")
    if hf_hub_id.endswith("/"):
        hf_hub_id += model_tag
    HUB_WEIGHTS[model_tag] = {**cfg, "hf_hub_id": hf_hub_id}
    if default:
        DEFAULT_TAGS[variant] = tag
    _reregister(variant)


def unregister_hub_weights(model_tag: str) -> None:
    """Remove a tag added by :func:`register_hub_weights`."""
    variant, tag = split_model_name_tag(model_tag)
    if HUB_WEIGHTS.pop(model_tag, None) is None:
        raise KeyError(f"{model_tag!r} is not a registered Hub tag; registered: {sorted(HUB_WEIGHTS)}")
    if DEFAULT_TAGS.get(variant) == tag:
        del DEFAULT_TAGS[variant]
    _reregister(variant)


register_variants()
