"""The model directory format shared by conversion, the Hub and ``hub_configs/``.

A model directory is timm's Hub layout: ``model.safetensors`` plus a ``config.json`` written by
timm's own ``save_config_for_hf`` (``architecture``, ``num_classes``, ``num_features``,
``global_pool``, ``model_args``, ``pretrained_cfg``), so ``timm.create_model("hf-hub:…")`` and
``timm.create_model("local-dir:…")`` load it. We add one key of our own, ``"vitscratch"``, with the
sha256 of the weights file and where the weights came from.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional

from timm.models._hub import save_config_for_hf
from torch import nn

from .files import PathLike, atomic_write

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
