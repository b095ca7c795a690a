"""What a registered entry point does: build the variant through timm's ``build_model_with_cfg`` with its
pretrained cfg, the weights fetched as :mod:`timm_vitscratch.weight_sources` says (one short request first, the
cache when the Hub cannot be reached, one error when nothing can be had) and loaded by timm's own loader."""

from __future__ import annotations

from typing import Any

from timm.models import PretrainedCfg, build_model_with_cfg, resolve_pretrained_cfg

from ..errors import PretrainedWeightsUnavailable
from ..private_api import record_model_args
from ..weight_sources import (
    FETCH_ERRORS,
    fetch_failure,
    fetched_first,
    offline,
    weights_source,
    weights_without_network,
)
from .build import empty_model, initialised_model
from .checkpoint_filter import checkpoint_filter_fn
from .config_file import check_file_config
from .pretrained import REPO_FILES, fetch_hub_weights, imagenet_label_names, pretrained_tags, tag_model_args
from .pretrained_cfgs import default_cfgs, default_tag
from .variants import ARCHITECTURES
from .vision_transformer import VisionTransformer


def _resolved_cfg(variant: str, kwargs: dict[str, Any]) -> PretrainedCfg:
    """The pretrained cfg timm's builder will use (read its fields directly: ``to_dict()`` deep-copies
    an in-memory state dict)."""
    return resolve_pretrained_cfg(
        variant,
        pretrained_cfg=kwargs.get("pretrained_cfg"),
        pretrained_cfg_overlay=kwargs.get("pretrained_cfg_overlay"),
    )


def _names_weights(cfg: PretrainedCfg) -> bool:
    """True when the cfg says where weights come from (a file, state dict, URL, repo)."""
    return bool(cfg.file or cfg.state_dict is not None or cfg.url or cfg.hf_hub_id)


def _loads_from_storage(cfg: PretrainedCfg) -> bool:
    """True when timm will read the pretrained weights from a file, a local dir or the Hub.

    Those tensors are fresh (memory-mapped by safetensors), so the model can take them by
    assignment. A state dict passed in memory (``pretrained_cfg_overlay=dict(state_dict=...)``)
    belongs to the caller and is copied as usual, never aliased.
    """
    return cfg.source in ("hf-hub", "local-dir") or cfg.state_dict is None


def create(variant: str, pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    """Build ``variant`` as timm's entry point does (``timm.create_model``'s arguments), its weights loaded by
    timm's own ``load_pretrained`` when ``pretrained``: a file's config checked first, the Hub asked once before
    anything is fetched, and a failed fetch put in one error."""
    check_file_config(variant, kwargs)
    requested = kwargs.get("pretrained_cfg")
    # the tag timm resolves: the one named, the default for a bare name, none for a cfg given as a dict
    tag = requested if isinstance(requested, str) else "" if requested else default_tag(variant)
    model_tag = f"{variant}.{tag}"
    # a tag's weights may need arguments beyond the variant's (transformers' LayerNorm eps); its
    # input size (SWAG at 384/512/518) comes from the cfg's input_size through timm's builder
    tag_args = tag_model_args(model_tag)
    model_args = {**ARCHITECTURES[variant], **tag_args, **kwargs}
    cfg = _resolved_cfg(variant, kwargs) if pretrained else None
    if cfg is not None and not tag and not _names_weights(cfg):
        raise ValueError(
            f"{variant} has no default weights (its tags change the architecture): name one, "
            f"e.g. {variant}.{default_cfgs[variant].tags[1]}, or give pretrained_cfg_overlay=dict(file=...)"
        )
    source = weights_source(vars(cfg), REPO_FILES) if cfg is not None else None  # vars: no copy of a state dict
    name = model_tag if tag else f"hf-hub:{cfg.hf_hub_id}" if cfg is not None and cfg.hf_hub_id else variant
    if source is not None and source.kind == "url" and offline() and not source.cache_path.is_file():
        raise fetch_failure(name, source, None)  # torch.hub ignores HF_HUB_OFFLINE: fail at once as the Hub does
    # Fast cold start: weights about to be overwritten by a checkpoint are never initialised; a fresh
    # model is built in place as timm builds its reference, so the same seed draws timm's weights.
    on_meta = cfg is not None and _loads_from_storage(cfg)
    # one short request first: no network fails in seconds (or loads the cached weights), not after retries
    offline_commit = (
        weights_without_network(name, source, PretrainedWeightsUnavailable)
        if source is not None and not offline()
        else None
    )
    pinned = False
    try:  # timm's own download path; only its failure to fetch is put in words
        if cfg is not None and source is not None and offline_commit is not None:
            overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
            model_args["pretrained_cfg_overlay"] = {**overlay, "hf_hub_id": f"{source.repo_id}@{offline_commit}"}
            pinned = True
        elif cfg is not None and source is not None and fetched_first(source):
            # the weights through the Hub client's checks first, then timm is handed the repo at the commit
            # they are at: it finds them in the cache and asks the Hub nothing more
            repo_id, _, revision = source.location.partition("@")
            commit = fetch_hub_weights(repo_id, revision or None, kwargs.get("cache_dir"))
            overlay = dict(kwargs.get("pretrained_cfg_overlay") or {})
            model_args["pretrained_cfg_overlay"] = {**overlay, "hf_hub_id": f"{repo_id}@{commit}"}
            pinned = True
        model = build_model_with_cfg(
            empty_model if on_meta else initialised_model,
            variant,
            pretrained,
            pretrained_filter_fn=checkpoint_filter_fn,
            feature_cfg=dict(out_indices=3, feature_cls="getter"),
            **model_args,
        )
    except FETCH_ERRORS as err:
        if source is None:
            raise
        raise fetch_failure(name, source, err) from None  # the message holds the cause; __context__ keeps it
    built_cfg = getattr(model, "pretrained_cfg", None)
    if pinned and isinstance(built_cfg, dict) and cfg is not None:
        built_cfg["hf_hub_id"] = cfg.hf_hub_id  # what was asked for, as timm records it without the pinning
    if tag_args:  # recorded where timm's factory records model args, so saved configs keep them
        record_model_args(model, **tag_args)
    if (
        pretrained
        and model_tag in pretrained_tags()
        and isinstance(built_cfg, dict)
        and built_cfg.get("num_classes") == model.num_classes
        and not built_cfg.get("label_names")
    ):
        # ImageNet synsets of the loaded classifier, as timm infers them (only while the head is the source's)
        built_cfg["label_names"] = imagenet_label_names(model.num_classes)
    return model
