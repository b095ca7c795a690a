"""``export()``: a scratch model directory -> a stock timm / torchvision state dict or Google's JAX ``.npz``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..atomic_replace import ConcurrentWriteError
from ..choices import EXPORT_TARGETS
from ..errors import ConversionError, ModelDirectoryError, listed
from ..files import PathLike
from ..layouts.keymap import available
from ..layouts.reader import open_checkpoint
from ..licenses import license_files, write_license_files
from ..model_dir import CONFIG_NAME, WEIGHTS_NAME, check_model_directory, weights_license
from ..models.architecture import describe_model
from ..tensor_writer import TensorSpec, write_npz, write_safetensors, write_torch
from .formats import FORMATS
from .plan import meta_output, parse_dtype


@dataclass
class ExportResult:
    out: Path
    target: str
    model_name: str
    tensors: int
    notes: list[str]
    #: the license text written beside ``out`` (``<out name>.LICENSE.md``) for weights whose license requires it
    license_file: Path | None = None


def _load_model_dir(model_dir: Path) -> tuple[dict[str, Any], torch.nn.Module, Path]:
    """The one model-directory check (``model_dir.check_model_directory``), as a ConversionError."""
    try:
        config, model = check_model_directory(model_dir, require_sha256=False)
    except ModelDirectoryError as err:
        raise ConversionError(str(err)) from None
    return config, model, model_dir / WEIGHTS_NAME


def _refuse_what_the_layout_cannot_hold(
    model: torch.nn.Module, keys: set[str], rules: dict[str, Any], to: str, library: str
) -> None:
    """Never drop part of a model silently: every tensor and every option must have a place in ``to``."""
    unused = sorted(keys - {source for rule in rules.values() for source in rule.sources})
    if unused:
        raise ConversionError(
            f"{library}'s ViT layout has no place for {listed(unused)}; "
            "export to timm, whose VisionTransformer takes these options"
        )
    if to == "timm":
        return
    act = model.get_submodule("blocks.0.mlp.act")
    if not (type(act) is torch.nn.GELU and act.approximate == "none"):
        raise ConversionError(f"{library}'s ViT uses exact GELU; this model's MLP activation is {act!r}")
    if getattr(model, "no_embed_class", False):
        raise ConversionError(f"{library}'s position table covers the class token; this model has no_embed_class=True")


def refuse_writing_over(model_dir: Path, out: Path) -> None:
    """``out`` may not be one of the files the export reads, nor a directory."""
    if out.is_dir():
        raise ConversionError("is a directory; the export writes one file (give its path)", out)
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        source = model_dir / name
        if out.resolve() == source.resolve() or (out.exists() and source.exists() and os.path.samefile(out, source)):
            raise ConversionError(
                f"is this export's own input ({source}); export to another file (nothing was written)", out
            )


def _failed_write(err: BaseException) -> OSError | None:
    """The OSError behind a failed write: itself, or the one torch.save's writer was handling when it gave up
    with a RuntimeError ("unexpected pos ...", which says nothing of the cause)."""
    current: BaseException | None = err
    while current is not None:
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
    return None


def export(model_dir: PathLike, to: str, out: PathLike, dtype: str | torch.dtype | None = None) -> ExportResult:
    """Write a scratch model directory's weights as a ``to`` state dict (timm, torchvision) or ``.npz`` (jax).

    The output format follows ``out``'s suffix: ``.safetensors`` and ``.npz`` are written one tensor at
    a time; ``.pth`` / ``.pt`` / ``.bin`` (``torch.save``) need the whole state dict in memory. ``out`` is
    written under a staging name and renamed into place; it may not be the directory's own files. Weights
    whose license requires its text to travel with them (the DINOv3 License) get it beside ``out``, as
    ``<out name>.LICENSE.md``, written before ``out`` (and removed again if ``out`` cannot be written).
    """
    model_dir, out = Path(model_dir), Path(out)
    refuse_writing_over(model_dir, out)
    if to not in EXPORT_TARGETS:
        raise ConversionError(f"unknown export target {to!r}; expected one of {', '.join(EXPORT_TARGETS)}")
    fmt = FORMATS[to]
    suffix = out.suffix.lower()
    if suffix not in fmt.export_suffixes:
        raise ConversionError(f"{to} export writes {' or '.join(fmt.export_suffixes)} files; got {out.name!r}", out)
    out_dtype = parse_dtype(dtype)
    config, model, weights = _load_model_dir(model_dir)
    name = config["architecture"]
    arch = describe_model(model)
    notes = []
    if to != "timm" and model.global_pool != "token":
        raise ConversionError(
            f"{fmt.library} classifies from the class token; this model pools with global_pool={model.global_pool!r}"
        )
    if to == "torchvision" and arch.num_classes == 0:
        raise ConversionError("torchvision's VisionTransformer always has a classifier; this model has none")
    if arch.norm_eps != 1e-6:
        notes.append(f"this model's LayerNorm eps is {arch.norm_eps:g}; {fmt.library} models use 1e-6")
    expected = model.state_dict()
    with open_checkpoint(weights) as checkpoint:
        keys = set(checkpoint.keys())
        if keys != set(expected):
            raise ConversionError(
                f"{WEIGHTS_NAME} does not hold {name}'s tensors (missing "
                f"{listed(sorted(set(expected) - keys))}, unexpected {listed(sorted(keys - set(expected)))})",
                weights,
            )
        rules = fmt.export_map(arch, keys)
        _refuse_what_the_layout_cannot_hold(model, keys, rules, to, fmt.library)
        specs = []
        for target, rule in rules.items():
            if not available(rule, keys):
                raise ConversionError(f"cannot export {target!r}: {WEIGHTS_NAME} lacks {rule.sources}", weights)
            shaped = meta_output(rule, checkpoint, target)
            specs.append(TensorSpec(target, tuple(shaped.shape), out_dtype or shaped.dtype))

        def produce(spec: TensorSpec) -> torch.Tensor:
            rule = rules[spec.name]
            return rule.op(*[checkpoint.tensor(s) for s in rule.sources]).to(spec.dtype).contiguous()

        recorded, prefix = weights_license(config), f"{out.name}."
        # the license texts this export adds beside ``out``: removed again if ``out`` cannot be written
        added = [out.parent / n for n in license_files(recorded, prefix) if not os.path.lexists(out.parent / n)]
        try:
            written = write_license_files(out.parent, recorded, prefix)
            if suffix == ".safetensors":
                write_safetensors(out, specs, produce)
            elif suffix == ".npz":
                write_npz(out, specs, produce)
            else:
                write_torch(out, specs, produce)
        except BaseException as err:
            for path in added:  # no license text left behind for weights that were not written
                path.unlink(missing_ok=True)
            if isinstance(err, ConcurrentWriteError):
                raise ConversionError(str(err)) from None
            cause = _failed_write(err) if isinstance(err, (OSError, RuntimeError)) else None
            if cause is None:
                raise
            raise ConversionError(f"cannot write the export: {cause.strerror or cause}", out) from None
    return ExportResult(out, to, name, len(specs), notes, written[0] if written else None)
