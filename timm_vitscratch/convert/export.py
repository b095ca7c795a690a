"""``export()``: a scratch model directory -> a stock timm / torchvision state dict, Google's JAX ``.npz``, or a
transformers ``DINOv3ViTModel`` or ``Dinov2Model`` directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..atomic_replace import ConcurrentWriteError, install, staged, starting_point
from ..choices import EXPORT_TARGETS
from ..errors import ConversionError, ModelDirectoryError, listed
from ..files import PathLike
from ..layouts.keymap import available
from ..layouts.reader import open_checkpoint
from ..licenses import export_license_files, license_files, write_license_files
from ..model_dir import CONFIG_NAME, WEIGHTS_NAME, check_model_directory, weights_license
from ..models.architecture import Arch, describe_model
from ..tensor_writer import TensorSpec, write_npz, write_safetensors, write_torch
from .formats import FORMATS
from .image_processors import export_image_processor
from .plan import meta_output, parse_dtype
from .shape_inference import variant_args


@dataclass
class ExportResult:
    out: Path
    target: str
    model_name: str
    tensors: int
    notes: list[str]
    #: the license file written with the weights (its text, or an SPDX line for a standard license): beside a
    #: file ``out`` (``<out name>.LICENSE.md``), inside a directory ``out`` (``LICENSE.md``)
    license_file: Path | None = None
    #: whether ``license_file`` holds the license's text (a license whose text travels), not its SPDX id
    license_text: bool = False


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
    if to in ("timm", "transformers"):  # timm takes every option; transformers' checks are its config's
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
    """Write a scratch model directory's weights as a ``to`` state dict (timm, torchvision), ``.npz`` (jax), or
    model directory (transformers: ``config.json`` + ``model.safetensors``, a DINOv3ViTModel or Dinov2Model).

    A file's format follows ``out``'s suffix: ``.safetensors`` and ``.npz`` are written one tensor at
    a time; ``.pth`` / ``.pt`` / ``.bin`` (``torch.save``) need the whole state dict in memory. ``out`` is
    written under a staging name and renamed into place; it may not be the directory's own files. A directory
    ``out`` must be new or empty; it is staged beside and swapped in whole. Weights whose license requires its
    text to travel with them (the DINOv3 License) get it: inside a directory ``out``, and beside a file ``out``
    as ``<out name>.LICENSE.md``, written before ``out`` (and removed again if ``out`` cannot be written). Weights
    under a standard license get the same file holding one ``SPDX-License-Identifier: ID`` line, so that
    converting the export back records the same license; weights whose license is unknown get none.
    """
    model_dir, out = Path(model_dir), Path(out)
    if to not in EXPORT_TARGETS:
        raise ConversionError(f"unknown export target {to!r}; expected one of {', '.join(EXPORT_TARGETS)}")
    fmt = FORMATS[to]
    suffix = out.suffix.lower()
    if fmt.export_directory:
        _refuse_occupied(out)
    else:
        refuse_writing_over(model_dir, out)
        if suffix not in fmt.export_suffixes:
            raise ConversionError(f"{to} export writes {' or '.join(fmt.export_suffixes)} files; got {out.name!r}", out)
    out_dtype = parse_dtype(dtype)
    config, model, weights = _load_model_dir(model_dir)
    name = config["architecture"]
    args = {**variant_args(name), **(config.get("model_args") or {})}
    arch = replace(describe_model(model), options=args)  # its options: what the target's key map may ask
    if fmt.export_directory:
        target_config, notes = fmt.export_config(arch, args)
        processor = export_image_processor(arch, args, config.get("pretrained_cfg") or {})
    else:
        notes = _classic_checks(model, arch, args, to, fmt.library)
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

        recorded = weights_license(config)
        prefix = "" if fmt.export_directory else f"{out.name}."
        where = out if fmt.export_directory else out.parent
        # the license texts this export adds beside a file ``out``: removed again if ``out`` cannot be written
        added = [] if fmt.export_directory else [where / n for n in export_license_files(recorded, prefix)]
        added = [path for path in added if not os.path.lexists(path)]
        installed: dict[Path, tuple[int, int]] = {}  # the license files this export put in place: (device, inode)
        try:
            if fmt.export_directory:
                _write_directory(out, target_config, processor, specs, produce, recorded)
                written = [where / n for n in export_license_files(recorded)]
            else:
                written = write_license_files(where, recorded, prefix, export=True)
                installed = {path: _file_identity(path) for path in written}
                if suffix == ".safetensors":
                    write_safetensors(out, specs, produce)
                elif suffix == ".npz":
                    write_npz(out, specs, produce)
                else:
                    write_torch(out, specs, produce)
        except BaseException as err:
            # no license text left behind for weights that were not written; but one that another writer put
            # in place, or that stands beside weights another writer installed meanwhile, stays with them
            for path in added:
                if not os.path.lexists(out) and path in installed and _file_identity(path) == installed[path]:
                    path.unlink(missing_ok=True)
            if isinstance(err, ConcurrentWriteError):
                raise ConversionError(str(err)) from None
            cause = _failed_write(err) if isinstance(err, (OSError, RuntimeError)) else None
            if cause is None:
                raise
            raise ConversionError(f"cannot write the export: {cause.strerror or cause}", out) from None
    text = bool(license_files(recorded))
    return ExportResult(out, to, name, len(specs), notes, written[0] if written else None, text)


def _file_identity(path: Path) -> tuple[int, int]:
    """(device, inode) of a file, or (-1, -1) where there is none: which file stands at ``path`` now."""
    try:
        found = os.stat(path, follow_symlinks=False)
    except OSError:
        return (-1, -1)
    return (found.st_dev, found.st_ino)


def _classic_checks(model: torch.nn.Module, arch: Arch, args: dict[str, Any], to: str, library: str) -> list[str]:
    """What a timm / torchvision / JAX ViT file cannot hold (refused), and what its library will not rebuild on
    its own (notes)."""
    if to != "timm" and args.get("rope_type"):
        raise ConversionError(f"{library}'s ViT has no rotary position; export this model to timm or transformers")
    if to != "timm" and model.global_pool != "token":
        raise ConversionError(
            f"{library} classifies from the class token; this model pools with global_pool={model.global_pool!r}"
        )
    if to == "torchvision" and arch.num_classes == 0:
        raise ConversionError("torchvision's VisionTransformer always has a classifier; this model has none")
    usual = 1e-5 if to == "timm" and args.get("rope_type") == "dinov3" else 1e-6  # timm's Eva DINOv3 uses 1e-5
    if arch.norm_eps != usual:
        return [f"this model's LayerNorm eps is {arch.norm_eps:g}; {library} models use {usual:g}"]
    return []


def _refuse_occupied(out: Path) -> None:
    if os.path.lexists(out) and not out.is_dir():
        raise ConversionError("exists and is not a directory; the export writes a model directory", out)
    if out.is_dir() and any(out.iterdir()):
        raise ConversionError("is not empty; the export writes a new model directory (give a new or empty one)", out)


def _write_directory(
    out: Path,
    config: Any,
    processor: Any,
    specs: list[TensorSpec],
    produce: Callable[[TensorSpec], torch.Tensor],
    recorded: Any,
) -> None:
    """``config.json`` and ``preprocessor_config.json`` (the target library's, saved by it), ``model.safetensors``
    (streamed) and the license text the weights' license requires, into a directory staged beside ``out`` and
    swapped in whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    started = starting_point(out)
    with staged(out, directory=True) as stage:
        config.save_pretrained(stage)
        processor.save_pretrained(stage)
        write_license_files(stage, recorded, export=True)
        write_safetensors(stage / WEIGHTS_NAME, specs, produce, metadata={"format": "pt"})
        install(stage, out, started, only_into_empty=True)
