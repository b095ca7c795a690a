"""A ``config.json`` (a model directory's, a Hub repo's, what timm hands our entry function from one) checked as
data before anything is built or fetched: the architecture must be ours, the ``pretrained_cfg`` may set only data
fields, and the model arguments pass the allow-list and bounds of :mod:`.model_args`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import ModelArgsError
from ..gate.config_fields import check_label_names, check_pretrained_cfg, checked_pretrained_cfg
from .model_args import check_saved_config, safetensors_shapes
from .variants import ARCHITECTURES


def check_file_config(variant: str, kwargs: dict[str, Any]) -> None:
    """What a ``local-dir:`` / ``hf-hub:`` config asks for, checked before anything is built.

    timm hands the file's ``model_args`` over as ``pretrained_model_args`` (and merges them into the
    keyword arguments) and its ``pretrained_cfg`` (with the top-level fields) as ``pretrained_cfg``; all of it
    is data from the directory's or repo's author. The cfg may set only data fields
    (:mod:`timm_vitscratch.gate.config_fields`: no ``hf_hub_filename``, ``file``, ``url`` ... that would
    choose other weights than the repo's or directory's ``model.safetensors``), and the model arguments pass
    the allow-list and bounds of :mod:`.model_args`; both are checked here, before timm fetches any weights.
    For a local directory the architecture must also match the weights' shapes, read from the safetensors
    header.
    """
    cfg = kwargs.get("pretrained_cfg")
    if not isinstance(cfg, dict) or cfg.get("source") not in ("local-dir", "hf-hub"):
        return
    where = f"{cfg.get('file') or cfg.get('hf_hub_id')}/config.json"
    check_pretrained_cfg(cfg, where, ModelArgsError, set_by_timm=_SET_BY_TIMM[cfg["source"]])
    shapes = None
    if cfg["source"] == "local-dir" and cfg.get("file"):
        shapes = safetensors_shapes(os.path.join(cfg["file"], "model.safetensors"))
    check_saved_config(ARCHITECTURES[variant], kwargs.get("pretrained_model_args") or {}, cfg, where, shapes)


def check_config_file(
    config: Mapping[str, Any], where: str, shapes: Mapping[str, tuple[int, ...]] | None = None
) -> tuple[str, dict[str, Any]]:
    """The architecture and ``create_model`` arguments a ``config.json`` (a model directory's, a Hub repo's)
    asks for, checked as data before anything is built or fetched; ``where`` starts every message.

    The architecture must be one of ours (timm's own ``vit_*`` would skip every check below); the
    ``pretrained_cfg`` may set only data fields (:mod:`timm_vitscratch.gate.config_fields`); ``model_args``
    and the top-level ``num_classes`` / ``label_names`` pass the allow-list and bounds of :mod:`.model_args`
    and, with ``shapes`` (the weights' names -> shapes), must describe the weights. Raises
    :class:`~timm_vitscratch.errors.ModelArgsError`.
    """
    architecture = config.get("architecture")
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        shown = repr(architecture) if len(repr(architecture)) <= 80 else repr(architecture)[:77] + "..."
        raise ModelArgsError(
            f"{where} names architecture {shown}, which timm_vitscratch does not register (it registers "
            f"{', '.join(ARCHITECTURES)}). Stock timm models load with timm's own "
            f"timm.create_model('hf-hub:...') / 'local-dir:...'."
        )
    pretrained_cfg = checked_pretrained_cfg(config, where, ModelArgsError)
    cfg: dict[str, Any] = {
        "num_classes": config.get("num_classes", pretrained_cfg.get("num_classes", 1000)),
        "input_size": pretrained_cfg.get("input_size"),
        "label_names": config.get("label_names"),
    }
    kwargs = check_saved_config(ARCHITECTURES[architecture], config.get("model_args") or {}, cfg, where, shapes)
    if pretrained_cfg.get("label_names") is not None:
        check_label_names(pretrained_cfg["label_names"], cfg["num_classes"], f"{where} pretrained_cfg", ModelArgsError)
    kwargs.setdefault("num_classes", cfg["num_classes"])
    return architecture, kwargs


#: the pretrained-cfg fields timm itself sets on each route, over whatever the file says (``_parse_model_cfg``)
_SET_BY_TIMM = {"hf-hub": ("source", "hf_hub_id"), "local-dir": ("source", "file")}
