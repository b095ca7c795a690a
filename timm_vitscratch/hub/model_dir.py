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
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from timm.models._hub import save_config_for_hf
from safetensors import safe_open
from timm.utils import unwrap_model
from torch import nn

from ..errors import ModelDirectoryError
from ..files import PathLike, atomic_write, sha256_file
from ..models.build import build_on_meta
from ..models.variants import ARCHITECTURES
from ..tensor_writer import TensorSpec, write_safetensors

if TYPE_CHECKING:
    import torch

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
METADATA_KEY = "vitscratch"
#: model_args that say where to build, not what: never taken from a file (a model is checked on meta)
PLACEMENT_ARGS = ("device", "dtype")
_BLOCK_KEY = re.compile(r"^blocks\.(\d+)\.")


def model_config(
    model: nn.Module, weights_sha256: Optional[str] = None, source: Optional[Dict[str, Any]] = None,
    label_names: Optional[List[str]] = None,
) -> Dict[str, Any]:
    """timm's Hub config for ``model`` (built by timm's ``save_config_for_hf``) plus our metadata.

    ``label_names`` go to the top level, where timm's ``push_to_hf_hub`` puts them. ``model_args``
    leaves out ``num_classes``, which the top level already gives: timm reads it from there, and
    transformers' ``TimmWrapper`` passes it to ``create_model`` itself (twice, if model_args held it too).
    """
    extra: Dict[str, Any] = {}
    if label_names:
        extra["label_names"] = list(label_names)
    metadata: Dict[str, Any] = {}
    if weights_sha256 is not None:
        metadata["sha256"] = weights_sha256
    if source is not None:
        metadata["source"] = source
    if metadata:
        extra[METADATA_KEY] = metadata
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        save_config_for_hf(model, tmp, model_config=extra or None)
        config = json.loads(Path(tmp).read_text())
    finally:
        os.unlink(tmp)
    if config.get("model_args", {}).get("num_classes") == config["num_classes"]:
        del config["model_args"]["num_classes"]
    return config


def read_label_names(path: PathLike) -> List[str]:
    """Label names, one per class index: a text file with one name per line, or an image folder whose
    class sub-directories (sorted, as ``torchvision.datasets.ImageFolder`` and timm's readers order
    them) are the classes."""
    path = Path(path)
    if path.is_dir():
        names = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        what = f"{path} has no class sub-directories (expected an image folder: one directory per class)"
    elif path.is_file():
        try:
            names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as err:
            raise ModelDirectoryError(f"{path} is not UTF-8 text: {err}") from None
        what = f"{path} holds no label names (expected one name per line)"
    else:
        raise ModelDirectoryError(f"{path} does not exist: expected a file of label names (one per line) or an "
                                  f"image folder")
    if not names:
        raise ModelDirectoryError(what)
    return names


def check_label_count(names: Sequence[str], num_classes: int) -> List[str]:
    """``names`` as a list, when there is one per class of a ``num_classes``-way classifier."""
    if len(names) != num_classes:
        raise ModelDirectoryError(f"{len(names)} label names for a classifier of {num_classes} classes "
                                  "(expected one name per class, in class-index order)")
    return list(names)


def with_label_names(config: Dict[str, Any], names: List[str]) -> Dict[str, Any]:
    """``config`` with top-level ``label_names`` replaced by ``names``, where and as timm's
    ``save_config_for_hf`` writes them (after ``global_pool``, before ``model_args`` and ``pretrained_cfg``).

    Descriptions keyed by the old names are dropped with them.
    """
    rest = {k: v for k, v in config.items() if k not in ("label_names", "label_descriptions")}
    out: Dict[str, Any] = {}
    for key, value in rest.items():
        if key in ("model_args", "pretrained_cfg") and "label_names" not in out:
            out["label_names"] = list(names)
        out[key] = value
    out.setdefault("label_names", list(names))
    return out


def write_config(directory: PathLike, config: Dict[str, Any]) -> Path:
    """Write ``config.json`` into ``directory`` atomically."""
    path = Path(directory) / CONFIG_NAME
    with atomic_write(path, "w") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    return path


def read_config(directory: PathLike) -> Dict[str, Any]:
    """Read a model directory's ``config.json``: a JSON object, or a clear error naming the file.

    Raises ``FileNotFoundError`` when it is missing and :class:`ModelDirectoryError` (a ``ValueError``)
    when it is not UTF-8 JSON holding an object.
    """
    path = Path(directory) / CONFIG_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found: a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    try:
        config = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ModelDirectoryError(f"{path} is not UTF-8 text (damaged?): {err}") from None
    except json.JSONDecodeError as err:
        raise ModelDirectoryError(f"{path} is not valid JSON: {err}") from None
    except RecursionError:
        raise ModelDirectoryError(f"{path} nests JSON too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise ModelDirectoryError(f"{path} holds a JSON {type(config).__name__}, not an object of config fields")
    return config


def write_model_directory(
    directory: PathLike,
    model: nn.Module,
    specs: "List[TensorSpec]",
    produce: "Callable[[TensorSpec], torch.Tensor]",
    source: Optional[Dict[str, Any]] = None,
    written: "Optional[Callable[[TensorSpec], None]]" = None,
    label_names: Optional[List[str]] = None,
) -> str:
    """Write ``model.safetensors`` (tensor by tensor: ``produce(spec)`` for each of ``specs``), then
    ``config.json`` describing ``model`` (which may live on ``meta``) with the weights' sha256.

    Both files are written atomically; weights first, so a config never names weights that are not
    there. ``written(spec)`` is called once a tensor is on its way to disk (see ``write_safetensors``).
    Returns the sha256 of ``model.safetensors``.
    """

    sha256 = write_safetensors(Path(directory) / WEIGHTS_NAME, specs, produce, written=written)
    write_config(directory, model_config(model, weights_sha256=sha256, source=source, label_names=label_names))
    return sha256


def save_model_directory(model: nn.Module, directory: PathLike, source: Optional[Dict[str, Any]] = None,
                         label_names: Optional[List[str]] = None) -> Path:
    """Write a model held in memory (DDP / ``torch.compile`` wrappers unwrapped) as a model directory.

    ``timm.create_model("local-dir:DIR", pretrained=True)`` rebuilds it from the config and loads the
    weights; ``vitscratch push DIR ORG/NAME`` sends it to the Hub.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = unwrap_model(model)  # a wrapper would prefix every key
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    specs = [TensorSpec(name, tuple(tensor.shape), tensor.dtype) for name, tensor in state.items()]
    write_model_directory(directory, model, specs, lambda spec: state[spec.name], source, label_names=label_names)
    return directory


def config_model_args(config: Dict[str, Any], weight_names: Iterable[str], label: str) -> Tuple[str, Dict[str, Any]]:
    """The architecture and ``create_model`` keyword arguments a model directory's config asks for.

    Checks the fields' types, and that the depth matches the blocks in the weights before anything is
    built (a config claiming a billion blocks is refused here rather than built). Raises
    :class:`ModelDirectoryError` starting with ``label``.
    """
    architecture = config.get("architecture")
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        raise ModelDirectoryError(
            f"{label}: {CONFIG_NAME} names architecture {architecture!r}, which timm_vitscratch does not "
            f"register (it registers {', '.join(ARCHITECTURES)}). Stock timm models load with timm's own "
            f"timm.create_model('hf-hub:...') / 'local-dir:...'.")
    model_args = config.get("model_args") or {}
    if not isinstance(model_args, dict):
        raise ModelDirectoryError(f"{label}: {CONFIG_NAME} model_args is a {type(model_args).__name__}, "
                                  "expected an object of create_model arguments")
    kwargs = {k: v for k, v in model_args.items() if k not in PLACEMENT_ARGS}
    kwargs.setdefault("num_classes", config.get("num_classes", 1000))
    depth = kwargs.get("depth", ARCHITECTURES[architecture]["depth"])
    blocks = {int(m.group(1)) for m in map(_BLOCK_KEY.match, weight_names) if m}
    if type(depth) is not int or depth != len(blocks):
        raise ModelDirectoryError(f"{label}: {CONFIG_NAME} asks for depth {depth!r}, but {WEIGHTS_NAME} holds "
                                  f"{len(blocks)} blocks")
    metadata = config.get(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not isinstance(metadata.get("sha256", ""), str):
        raise ModelDirectoryError(f"{label}: {CONFIG_NAME}'s {METADATA_KEY!r} entry is damaged: expected "
                                  '{"sha256": "<hex>", "source": {...}}')
    return architecture, kwargs


def check_model_directory(directory: PathLike, require_sha256: bool = True,
                          label: Optional[str] = None) -> Tuple[Dict[str, Any], nn.Module]:
    """Check that ``directory`` holds weights for a registered architecture, as its config says.

    Returns the config and the model built from it on ``meta`` (no memory). Raises
    :class:`ModelDirectoryError` naming what is wrong: a missing or damaged file, an architecture the
    plugin does not register, tensors that do not fit the architecture, or a sha256 that does not match.
    Only the safetensors header is parsed (by the safetensors library, which bounds it) before the
    sha256 is computed; nothing in either file is executed.
    """
    directory = Path(directory)
    label = label or str(directory)
    try:
        config = read_config(directory)
    except (FileNotFoundError, ModelDirectoryError) as err:
        raise ModelDirectoryError(f"{label}: {err}") from None
    weights = directory / WEIGHTS_NAME
    if not weights.is_file():
        raise ModelDirectoryError(f"{label}: no {WEIGHTS_NAME}; a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    found = _tensor_shapes(weights, label)
    architecture, kwargs = config_model_args(config, found, label)
    model = _meta_model(architecture, kwargs, label)
    _check_tensors(found, model, label)
    expected = config.get(METADATA_KEY, {}).get("sha256")
    if expected is None:
        if require_sha256:
            raise ModelDirectoryError(f"{label}: {CONFIG_NAME} has no '{METADATA_KEY}.sha256', so {WEIGHTS_NAME} "
                                      "cannot be verified; push it with `vitscratch push`, which records it")
    else:
        actual = sha256_file(weights)
        if actual != expected:
            raise ModelDirectoryError(
                f"{label}: {WEIGHTS_NAME} has sha256 {actual}, but {CONFIG_NAME} says {expected}: "
                "these are not the weights the config describes")
    return config, model


def _meta_model(architecture: str, kwargs: Dict[str, Any], label: str) -> nn.Module:
    try:
        return build_on_meta(architecture, **kwargs)
    except Exception as err:  # any argument the model rejects, however it rejects it
        raise ModelDirectoryError(f"{label}: {CONFIG_NAME} model_args {kwargs} do not build "
                                  f"{architecture}: {type(err).__name__}: {err}") from None


def _tensor_shapes(weights: Path, label: str) -> Dict[str, Tuple[int, ...]]:
    """Names and shapes from the safetensors header (validated by the library; no tensor is read)."""
    try:
        with safe_open(str(weights), framework="pt") as handle:
            return {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
    except Exception as err:  # safetensors raises its own error types for a damaged header
        raise ModelDirectoryError(f"{label}: {WEIGHTS_NAME} is not a readable safetensors file: {err}") from None


def _check_tensors(found: Dict[str, Tuple[int, ...]], model: nn.Module, label: str) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [f"missing {k}" for k in expected if k not in found]
    problems += [f"unexpected {k}" for k in found if k not in expected]
    problems += [f"{k}: {found[k]} where the architecture needs {v}" for k, v in expected.items()
                 if k in found and found[k] != v]
    if problems:
        shown = "; ".join(problems[:5]) + (f"; ... ({len(problems) - 5} more)" if len(problems) > 5 else "")
        raise ModelDirectoryError(f"{label}: {WEIGHTS_NAME} does not fit the architecture in {CONFIG_NAME}: {shown}")
