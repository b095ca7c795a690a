"""The model directory format shared by conversion, the Hub and ``hub_configs/``.

A model directory is timm's Hub layout: ``model.safetensors`` plus a ``config.json`` written by
timm's own ``save_config_for_hf`` (``architecture``, ``num_classes``, ``num_features``,
``global_pool``, ``model_args``, ``pretrained_cfg``), so ``timm.create_model("hf-hub:…")`` and
``timm.create_model("local-dir:…")`` load it. We add one key of our own, ``"vitscratch"``, with the
sha256 of the weights file and where the weights came from. Weights whose license requires its text to
travel with them (the DINOv3 License) get that text too, as ``LICENSE.md`` (:mod:`.licenses`).

:func:`write_model_directory` is the one writer of these files: conversion streams a checkpoint
through it, :func:`save_model_directory` (training, the Hub, the examples) a model in memory.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.utils import unwrap_model
from torch import nn

from .errors import ModelArgsError, ModelDirectoryError, listed
from .files import PathLike, atomic_write, sha256_file
from .gate.config_fields import label_lines
from .gate.containers import file_head_container
from .gate.files import regular_file
from .gate.json_data import read_json_object
from .gate.safetensors_data import SafetensorsData, safetensors_entries
from .gate.weight_dtypes import check_weight_dtypes
from .layouts.page_release import release_mapped_range
from .licenses import UNKNOWN, check_license_id, write_license_files
from .models.build import build_on_meta
from .models.config_file import check_config_file
from .private_api import save_config_for_hf
from .tensor_writer import TensorSpec, write_safetensors

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
METADATA_KEY = "vitscratch"


def model_config(
    model: nn.Module,
    weights_sha256: str | None = None,
    source: dict[str, Any] | None = None,
    label_names: list[str] | None = None,
) -> dict[str, Any]:
    """timm's Hub config for ``model`` (built by timm's ``save_config_for_hf``) plus our metadata.

    ``label_names`` go to the top level, where timm's ``push_to_hf_hub`` puts them. ``model_args``
    leaves out ``num_classes``, which the top level already gives: timm reads it from there, and
    transformers' ``TimmWrapper`` passes it to ``create_model`` itself (twice, if model_args held it too).
    """
    extra: dict[str, Any] = {}
    if label_names:
        extra["label_names"] = list(label_names)
    metadata: dict[str, Any] = {}
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
        config = read_json_object(tmp, ModelDirectoryError)  # what timm wrote, read back through the gate
    finally:
        os.unlink(tmp)
    if config.get("model_args", {}).get("num_classes") == config["num_classes"]:
        del config["model_args"]["num_classes"]
    return config


def recorded_facts(config: dict[str, Any]) -> dict[str, Any]:
    """The pretrained cfg facts (license, paper, origin ...) that belong to these weights: none for a random init,
    which timm gives its default tag's cfg, whose facts are not its own."""
    metadata = config.get(METADATA_KEY)
    source = (metadata.get("source") if isinstance(metadata, dict) else None) or {}
    if isinstance(source, dict) and source.get("weights") == "random init":
        return {}
    cfg = config.get("pretrained_cfg")
    return cfg if isinstance(cfg, dict) else {}


def weights_license(config: dict[str, Any]) -> Any:
    """The license a model directory's config records for its weights (None: none recorded), as data."""
    return recorded_facts(config).get("license")


def with_license(config: dict[str, Any], license_id: str | None = None) -> dict[str, Any]:
    """``config`` with its weights' license recorded: ``license_id`` when given (a known id), else what its
    ``pretrained_cfg`` records, else ``unknown``; never a default. A random init's config is left as it is
    (its cfg's facts are not its weights')."""
    cfg = config.get("pretrained_cfg")
    if not isinstance(cfg, dict) or (license_id is None and recorded_facts(config) is not cfg):
        return config
    if license_id is not None:
        try:
            cfg["license"] = check_license_id(license_id, "license")
        except ValueError as err:
            raise ModelDirectoryError(str(err)) from None
    elif cfg.get("license") is None:
        cfg["license"] = UNKNOWN
    return config


def read_label_names(path: PathLike) -> list[str]:
    """Label names, one per class index: a text file with one name per line, or an image folder whose
    class sub-directories (sorted, as ``torchvision.datasets.ImageFolder`` and timm's readers order
    them) are the classes."""
    path = Path(path)
    if path.is_dir():
        names = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        what = f"{path} has no class sub-directories (expected an image folder: one directory per class)"
    elif path.exists():
        names = label_lines(path, ModelDirectoryError)
        what = f"{path} holds no label names (expected one name per line)"
    else:
        raise ModelDirectoryError(
            f"{path} does not exist: expected a file of label names (one per line) or an image folder"
        )
    if not names:
        raise ModelDirectoryError(what)
    return names


def check_label_count(names: Sequence[str], num_classes: int) -> list[str]:
    """``names`` as a list, when there is one per class of a ``num_classes``-way classifier."""
    if len(names) != num_classes:
        raise ModelDirectoryError(
            f"{len(names)} label names for a classifier of {num_classes} classes "
            "(expected one name per class, in class-index order)"
        )
    return list(names)


def with_label_names(config: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``config`` with top-level ``label_names`` replaced by ``names``, where and as timm's
    ``save_config_for_hf`` writes them (after ``global_pool``, before ``model_args`` and ``pretrained_cfg``).

    Descriptions keyed by the old names are dropped with them.
    """
    rest = {k: v for k, v in config.items() if k not in ("label_names", "label_descriptions")}
    out: dict[str, Any] = {}
    for key, value in rest.items():
        if key in ("model_args", "pretrained_cfg") and "label_names" not in out:
            out["label_names"] = list(names)
        out[key] = value
    out.setdefault("label_names", list(names))
    return out


def write_config(directory: PathLike, config: dict[str, Any]) -> Path:
    """Write ``config.json`` into ``directory`` atomically."""
    path = Path(directory) / CONFIG_NAME
    with atomic_write(path, "w") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    return path


def read_config(directory: PathLike, contained: bool = True) -> dict[str, Any]:
    """Read a model directory's ``config.json``: a JSON object, or a clear error naming the file.

    Raises ``FileNotFoundError`` when it is missing and :class:`ModelDirectoryError` (a ``ValueError``)
    when it is not a regular file (inside the directory, unless ``contained=False``: a Hugging Face
    cache snapshot, whose files are symlinks into the cache's blobs), is too large or too deeply nested,
    or is not UTF-8 JSON holding an object (see :mod:`timm_vitscratch.gate`).
    """
    path = Path(directory) / CONFIG_NAME
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{path} not found: a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}")
    return read_json_object(path, ModelDirectoryError, inside=directory if contained else None)


def write_model_directory(
    directory: PathLike,
    model: nn.Module,
    specs: list[TensorSpec],
    produce: Callable[[TensorSpec], torch.Tensor],
    source: dict[str, Any] | None = None,
    written: Callable[[TensorSpec], None] | None = None,
    label_names: list[str] | None = None,
    license: str | None = None,
) -> str:
    """Write ``model.safetensors`` (tensor by tensor: ``produce(spec)`` for each of ``specs``), then
    ``config.json`` describing ``model`` (which may live on ``meta``) with the weights' sha256.

    The config records the weights' license: ``license`` (a known id) when given, else the one ``model``'s
    pretrained cfg records, else ``unknown`` (:func:`with_license`).

    Each file is written atomically; weights first, then the license text the config's license requires
    (:mod:`.licenses`), then the config, so a config never names weights, or a license, whose files are not
    there. ``written(spec)`` is called once a tensor is on its way to disk (see ``write_safetensors``).
    Returns the sha256 of ``model.safetensors``.
    """

    sha256 = write_safetensors(Path(directory) / WEIGHTS_NAME, specs, produce, written=written)
    config = model_config(model, weights_sha256=sha256, source=source, label_names=label_names)
    config = with_license(config, license)
    write_license_files(directory, weights_license(config))
    write_config(directory, config)
    return sha256


def save_model_directory(
    model: nn.Module,
    directory: PathLike,
    source: dict[str, Any] | None = None,
    label_names: list[str] | None = None,
    license: str | None = None,
) -> Path:
    """Write a model held in memory (DDP / ``torch.compile`` wrappers unwrapped) as a model directory.

    ``license`` (a license id: ``apache-2.0``, ``mit``, ``dinov3-license`` ...) is the weights' license, which
    the config records; without it, the one ``model``'s pretrained cfg records, else ``unknown`` (which
    ``vitscratch push`` refuses to publish without ``--license``). Weights trained from scratch are yours to
    license: name it.

    ``timm.create_model("local-dir:DIR", pretrained=True)`` rebuilds it from the config and loads the
    weights; ``vitscratch push DIR ORG/NAME`` sends it to the Hub.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model = unwrap_model(model)  # a wrapper would prefix every key
    state = {name: tensor.detach().cpu() for name, tensor in model.state_dict().items()}
    specs = [TensorSpec(name, tuple(tensor.shape), tensor.dtype) for name, tensor in state.items()]
    write_model_directory(
        directory, model, specs, lambda spec: state[spec.name], source, label_names=label_names, license=license
    )
    return directory


def config_model_args(
    config: dict[str, Any], shapes: Mapping[str, tuple[int, ...]] | None, label: str
) -> tuple[str, dict[str, Any]]:
    """The architecture and ``create_model`` keyword arguments a model directory's config asks for.

    The config is data, checked by :func:`timm_vitscratch.models.config_file.check_config_file` before
    anything is built: an architecture of ours, a ``pretrained_cfg`` that sets only data fields (nothing that
    chooses what is loaded), ``model_args`` inside the allow-list and its bounds, and, with ``shapes`` (the
    weights' names -> shapes), an architecture that fits the weights. Raises :class:`ModelDirectoryError`
    starting with ``label``.
    """
    try:
        architecture, kwargs = check_config_file(config, f"{label}: {CONFIG_NAME}", shapes)
    except ModelArgsError as err:
        raise ModelDirectoryError(str(err)) from None
    metadata = config.get(METADATA_KEY, {})
    if not isinstance(metadata, dict) or not isinstance(metadata.get("sha256", ""), str):
        raise ModelDirectoryError(
            f"{label}: {CONFIG_NAME}'s {METADATA_KEY!r} entry is damaged: expected "
            '{"sha256": "<hex>", "source": {...}}'
        )
    return architecture, kwargs


def check_model_directory(
    directory: PathLike, require_sha256: bool = True, label: str | None = None, strict: bool = False
) -> tuple[dict[str, Any], nn.Module]:
    """Check that ``directory`` holds weights for a registered architecture, as its config says.

    Returns the config and the model built from it on ``meta`` (no memory). Raises
    :class:`ModelDirectoryError` naming what is wrong: a missing, damaged or irregular file (a FIFO, a
    symlink out of the directory), an architecture the plugin does not register, options outside the
    allow-list, tensors that do not fit the architecture or are not floating point, or a sha256 that does
    not match. Weights holding NaN or Inf are reported with a :class:`NonFiniteWeightsWarning`, or
    refused with ``strict=True``. Only the safetensors header is parsed (by the gate, which bounds its bytes
    and tensor count first) before the architecture is checked; nothing in either file is executed.
    """
    directory = Path(directory)
    label = label or str(directory)
    try:
        config = read_config(directory)
    except (FileNotFoundError, ModelDirectoryError) as err:
        raise ModelDirectoryError(f"{label}: {err}") from None
    weights = directory / WEIGHTS_NAME
    if not os.path.lexists(weights):
        raise ModelDirectoryError(
            f"{label}: no {WEIGHTS_NAME}; a model directory holds {CONFIG_NAME} and {WEIGHTS_NAME}"
        )
    try:
        regular_file(weights, ModelDirectoryError, inside=directory)
    except ModelDirectoryError as err:
        raise ModelDirectoryError(f"{label}: {err}") from None
    found = _tensor_shapes(weights, label)
    architecture, kwargs = config_model_args(config, {k: shape for k, (shape, _) in found.items()}, label)
    model = _meta_model(architecture, kwargs, label)
    _check_tensors(found, model, label)
    expected = config.get(METADATA_KEY, {}).get("sha256")
    if expected is None:
        if require_sha256:
            raise ModelDirectoryError(
                f"{label}: {CONFIG_NAME} has no '{METADATA_KEY}.sha256', so {WEIGHTS_NAME} "
                "cannot be verified; push it with `vitscratch push`, which records it"
            )
    else:
        actual = sha256_file(weights)
        if actual != expected:
            raise ModelDirectoryError(
                f"{label}: {WEIGHTS_NAME} has sha256 {actual}, but {CONFIG_NAME} says {expected}: "
                "these are not the weights the config describes"
            )
    _check_finite(weights, label, strict)
    return config, model


class NonFiniteWeightsWarning(UserWarning):
    """A model directory's weights hold NaN or Inf (refused instead with ``strict=True`` / ``--strict``)."""


def _check_finite(weights: Path, label: str, strict: bool) -> None:
    """Warn (or, ``strict``, refuse) when any tensor holds NaN or Inf; read one tensor at a time."""
    with SafetensorsData(weights, _weights_error(weights, label)) as data:
        bad = []
        for key in data.entries:
            if not _all_finite(data.tensor(key)):
                bad.append(key)
            if data.map is not None:  # its pages are read once: give them back
                release_mapped_range(data.map, *data.span(key))
    if not bad:
        return
    message = f"{label}: {WEIGHTS_NAME} holds NaN or Inf in {len(bad)} tensor(s) ({listed(bad, 3, quote=False)}); such a model computes NaN"
    if strict:
        raise ModelDirectoryError(message)
    warnings.warn(message, NonFiniteWeightsWarning, stacklevel=3)


def _all_finite(tensor: torch.Tensor) -> bool:
    """No NaN or Inf in ``tensor``, computed in numpy: a pull may run in a forked process, where torch's
    thread pool (started in the parent) is not safe to use."""
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: all exponent bits set is Inf or NaN
        bits = tensor.view(torch.int16).numpy()
        return not bool(((bits & 0x7F80) == 0x7F80).any())
    return bool(np.isfinite(tensor.numpy()).all())


def _meta_model(architecture: str, kwargs: dict[str, Any], label: str) -> nn.Module:
    try:
        return build_on_meta(architecture, **kwargs)
    except Exception as err:  # any argument the model rejects, however it rejects it
        raise ModelDirectoryError(
            f"{label}: {CONFIG_NAME} model_args {kwargs} do not build {architecture}: {type(err).__name__}: {err}"
        ) from None


#: the dtypes a model directory's weights may have (the model's dtype, or a cast timm's load does)


def _weights_error(weights: Path, label: str) -> Callable[[str], ModelDirectoryError]:
    """The gate's refusals of the weights, as ``<label>: model.safetensors: <problem>``."""
    return lambda problem: ModelDirectoryError(f"{label}: {WEIGHTS_NAME}: {problem.removeprefix(f'{weights}: ')}")


def _tensor_shapes(weights: Path, label: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Names, shapes and dtypes from the safetensors header (bounded and checked by the gate; no tensor is read)."""
    # torch.save writes a zip or a pickle (the gate names the container from the first bytes)
    if file_head_container(weights, _weights_error(weights, label)) in ("zip", "torch-legacy"):
        raise ModelDirectoryError(
            f"{label}: {WEIGHTS_NAME} is a torch.save file, not safetensors; convert it with "
            f"`vitscratch convert {weights} OUT_DIR`"
        )
    entries = safetensors_entries(weights, _weights_error(weights, label))
    found = {name: (entry.shape, entry.dtype) for name, entry in entries.items()}
    check_weight_dtypes(
        ((k, dtype) for k, (_, dtype) in found.items()), f"{label}: {WEIGHTS_NAME}", ModelDirectoryError
    )
    return found


def _check_tensors(found: dict[str, tuple[tuple[int, ...], str]], model: nn.Module, label: str) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [f"missing {k}" for k in expected if k not in found]
    problems += [f"unexpected {k}" for k in found if k not in expected]
    problems += [
        f"{k}: {found[k][0]} where the architecture needs {v}"
        for k, v in expected.items()
        if k in found and found[k][0] != v
    ]
    if problems:
        shown = listed(problems, 5, "; ", quote=False)
        raise ModelDirectoryError(f"{label}: {WEIGHTS_NAME} does not fit the architecture in {CONFIG_NAME}: {shown}")
