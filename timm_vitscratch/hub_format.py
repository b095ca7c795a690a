"""The model directory format shared by conversion, the Hub and ``hub_configs/``.

A model directory is timm's Hub layout: ``model.safetensors`` plus a ``config.json`` written by
timm's own ``save_config_for_hf`` (``architecture``, ``num_classes``, ``num_features``,
``global_pool``, ``model_args``, ``pretrained_cfg``), so ``timm.create_model("hf-hub:…")`` and
``timm.create_model("local-dir:…")`` load it. We add one key of our own, ``"vitscratch"``, with the
sha256 of the weights file and where the weights came from.

:func:`write_model_directory` is the one writer of these files: conversion streams a checkpoint
through it, :func:`save_model_directory` (training, the Hub, the examples) a model in memory.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from timm.models._hub import save_config_for_hf
from timm.utils import unwrap_model
from torch import nn

from .files import PathLike, atomic_write

if TYPE_CHECKING:
    import torch

    from .convert.writer import TensorSpec

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
METADATA_KEY = "vitscratch"


def model_config(
    model: nn.Module, weights_sha256: Optional[str] = None, source: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """timm's Hub config for ``model`` (built by timm's ``save_config_for_hf``) plus our metadata."""
    metadata: Dict[str, Any] = {}
    if weights_sha256 is not None:
        metadata["sha256"] = weights_sha256
    if source is not None:
        metadata["source"] = source
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        save_config_for_hf(model, tmp, model_config={METADATA_KEY: metadata} if metadata else None)
        return json.loads(Path(tmp).read_text())
    finally:
        os.unlink(tmp)


def write_config(directory: PathLike, config: Dict[str, Any]) -> Path:
    """Write ``config.json`` into ``directory`` atomically."""
    path = Path(directory) / CONFIG_NAME
    with atomic_write(path, "w") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    return path


def read_config(directory: PathLike) -> Dict[str, Any]:
    """Read a model directory's ``config.json`` with a clear error when it is missing or not JSON."""
    path = Path(directory) / CONFIG_NAME
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None


def write_model_directory(
    directory: PathLike,
    model: nn.Module,
    specs: "List[TensorSpec]",
    produce: "Callable[[TensorSpec], torch.Tensor]",
    source: Optional[Dict[str, Any]] = None,
    written: "Optional[Callable[[TensorSpec], None]]" = None,
) -> str:
    """Write ``model.safetensors`` (tensor by tensor: ``produce(spec)`` for each of ``specs``), then
    ``config.json`` describing ``model`` (which may live on ``meta``) with the weights' sha256.

    Both files are written atomically; weights first, so a config never names weights that are not
    there. ``written(spec)`` is called once a tensor is on its way to disk (see ``write_safetensors``).
    Returns the sha256 of ``model.safetensors``.
    """
    from .convert.writer import write_safetensors  # the convert package imports this module

    sha256 = write_safetensors(Path(directory) / WEIGHTS_NAME, specs, produce, written=written)
    write_config(directory, model_config(model, weights_sha256=sha256, source=source))
    return sha256


def save_model_directory(model: nn.Module, directory: PathLike, source: Optional[Dict[str, Any]] = None) -> Path:
    """Write a model held in memory (DDP / ``torch.compile`` wrappers unwrapped) as a model directory.

    ``timm.create_model("local-dir:DIR", pretrained=True)`` rebuilds it from the config and loads the
    weights; ``vitscratch push DIR ORG/NAME`` sends it to the Hub.
    """
    from .convert.writer import TensorSpec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = unwrap_model(model)  # a wrapper would prefix every key
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    specs = [TensorSpec(name, tuple(tensor.shape), tensor.dtype) for name, tensor in state.items()]
    write_model_directory(directory, model, specs, lambda spec: state[spec.name], source)
    return directory
