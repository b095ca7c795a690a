"""``convert()``: any supported checkpoint -> a scratch model directory (model.safetensors + config.json).

Everything is checked before a byte is written; the new directory is written into a staging directory
beside ``out_dir``, verified there when asked, and swapped in whole in one atomic step (``install``).
A failed, refused or killed conversion leaves the previous directory as it was.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..atomic_replace import ConcurrentWriteError, Identity, install, staged, starting_point
from ..errors import ConversionError, VerificationError
from ..files import PathLike
from ..layouts.checkpoint import Checkpoint
from ..layouts.reader import open_checkpoint
from ..model_dir import (
    CONFIG_NAME,
    METADATA_KEY,
    WEIGHTS_NAME,
    read_config,
    read_label_names,
    write_model_directory,
)
from ..models.variants import ARCHITECTURES
from ..tensor_writer import TensorSpec
from .formats import detect_format
from .plan import ConversionPlan, Target, parse_dtype, plan_conversion
from .shape_inference import assumed_text, assumption_notes, how_to_state
from .verify import DEFAULT_TOLERANCE, Verification, verify_conversion


@dataclass
class ConversionResult:
    out_dir: Path
    source_format: str
    detected: bool  # True when the format was recognised from the keys (``source="auto"``)
    model_name: str
    model_args: dict[str, Any]
    description: str  # the architecture written: the one read from the shapes, at the img_size resolved
    sha256: str
    wrapper: str | None = None  # e.g. "state_dict_ema" when unwrapped from a training checkpoint
    resampled_from: tuple[int, int] | None = None
    verification: Verification | None = None
    heads_note: str | None = None  # one line when the head count was assumed
    #: architecture facts nothing recorded (heads, activation, eps) and the values built: ``{"num_heads": 6}``
    assumed: dict[str, Any] = field(default_factory=dict)
    #: the checkpoint's tensors left out (all-zero biases, training-only parts, another tower), and how many it has
    dropped: tuple[str, ...] = ()
    source_tensors: int = 0

    @property
    def assumption_notes(self) -> list[str]:
        """What ``convert`` assumed, one line per kind (what the CLI prints)."""
        return assumption_notes(self.heads_note, self.assumed)


def _with_path(err: ConversionError, path: Path) -> ConversionError:
    return err if err.path is not None else ConversionError(err.problem, path)


def _producer(checkpoint: Checkpoint, targets: dict[str, Target]) -> Callable[[TensorSpec], torch.Tensor]:
    def produce(spec: TensorSpec) -> torch.Tensor:
        rule = targets[spec.name].rule
        return rule.op(*[checkpoint.tensor(s) for s in rule.sources]).to(spec.dtype)

    return produce


def refuse_writing_over(src: Path, out_dir: Path) -> None:
    """``out_dir`` may be neither the source nor hold it: installing replaces the directory as a whole."""
    source, target = src.resolve(), out_dir.resolve()
    same = source == target or (source.is_dir() and target.is_dir() and os.path.samefile(source, target))
    holds = target in source.parents or (
        source.is_file()
        and any(
            (target / name).is_file() and os.path.samefile(target / name, source)
            for name in (WEIGHTS_NAME, CONFIG_NAME)
        )
    )
    if same or holds:
        where = "is also the output directory" if same else f"lies in the output directory {out_dir}"
        raise ConversionError(
            f"{where}, which a conversion replaces; convert into another directory (nothing was written)", src
        )


def _holds_a_model_directory(directory: Path) -> bool:
    """A config.json of a registered architecture with our metadata entry: what convert may replace unasked."""
    try:
        config = read_config(directory)
    except (OSError, ValueError):
        return False
    architecture = config.get("architecture")
    return (
        isinstance(architecture, str) and architecture in ARCHITECTURES and isinstance(config.get(METADATA_KEY), dict)
    )


def prepare_out_dir(out_dir: Path, force: bool = False) -> tuple[Identity, list[Path]]:
    """Check that ``out_dir`` (a resolved path) can take a model directory and create its parents.

    Returns where the install starts from (see ``atomic_replace.starting_point``: a killed conversion's
    leftovers are removed first) and the parent directories created here, deepest first.
    """
    if os.path.lexists(out_dir) and not out_dir.is_dir():
        raise ConversionError("output path exists and is not a directory", out_dir)
    if out_dir.is_dir() and not os.access(out_dir, os.W_OK | os.X_OK):  # a read-only directory stays as it is
        raise ConversionError("output directory is not writable", out_dir)
    created = [d for d in [out_dir.parent, *out_dir.parent.parents] if not d.exists()]
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConversionError(f"cannot create the output directory: {err.strerror}", out_dir) from None
    if not os.access(out_dir.parent, os.W_OK | os.X_OK):
        raise ConversionError(
            f"cannot write beside the output directory: {out_dir.parent} is not writable (the "
            "new model directory is staged there and swapped in)",
            out_dir,
        )
    try:
        started = starting_point(out_dir)
        occupied = out_dir.is_dir() and any(out_dir.iterdir())
    except OSError as err:
        raise ConversionError(f"cannot prepare the output directory: {err}", out_dir) from None
    if occupied and not force and not _holds_a_model_directory(out_dir):
        raise ConversionError(
            f"not empty, and not a model directory ({CONFIG_NAME} of a registered architecture "
            f"with a '{METADATA_KEY}' entry); convert into a new or empty directory, or pass "
            f"force=True to replace its {CONFIG_NAME} and {WEIGHTS_NAME}",
            out_dir,
        )
    return started, created


def _written_architecture(plan: ConversionPlan) -> str:
    """The written model's architecture in words: the source's, at the resolved ``img_size`` (the size is said
    once, the size it was resampled to; ``resampled_from`` keeps the source's)."""
    patch = plan.arch.patch_size
    return replace(plan.arch, grid=(plan.img_size[0] // patch, plan.img_size[1] // patch)).describe()


def remove_empty(directories: list[Path]) -> None:
    """Remove the directories created for an output that was not written (deepest first; only if empty)."""
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def _write(checkpoint: Checkpoint, plan: ConversionPlan, stage: Path, out_dtype: torch.dtype | None) -> str:
    """Write model.safetensors (streaming) and config.json into ``stage``; returns the weights' sha256."""
    targets = {t.spec.name: t for t in plan.targets}

    def release_sources(spec: TensorSpec) -> None:  # written and hashed: give its source pages back
        for source in targets[spec.name].rule.sources:
            checkpoint.release(source)

    source_info: dict[str, Any] = {
        "format": plan.fmt.name,
        "file": checkpoint.path.name,
        "wrapper": checkpoint.wrapper,
        "dtype": str(out_dtype).replace("torch.", "") if out_dtype else "as stored",
    }
    if plan.resampled:
        source_info["resampled_from"] = list(plan.arch.img_size)
    return write_model_directory(
        stage,
        plan.meta_model,
        plan.specs,
        _producer(checkpoint, targets),
        source=source_info,
        written=release_sources,
        label_names=plan.label_names,
    )


def _write_and_install(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    out_dir: Path,
    started: Identity,
    out_dtype: torch.dtype | None,
    verify: bool,
    tolerance: float,
) -> tuple[str, Verification | None]:
    """Write (and verify) the new directory beside ``out_dir`` and swap it in; returns (sha256, verification)."""
    try:
        with staged(out_dir, directory=True) as stage:
            sha256 = _write(checkpoint, plan, stage, out_dtype)
            verification = None
            if verify:
                verification = verify_conversion(checkpoint, plan, stage, out_dtype, tolerance)
                if not verification.passed:
                    raise VerificationError(
                        f"verification failed: {verification.failure()}; nothing was written", checkpoint.path
                    )
            install(stage, out_dir, started, keep_other_files=True)
    except ConcurrentWriteError as err:
        raise ConversionError(str(err)) from None
    except OSError as err:  # disk full, directory removed under us, ...
        raise ConversionError(f"writing failed: {err}", out_dir) from None
    return sha256, verification


def convert(
    src: PathLike,
    out_dir: PathLike,
    source: str = "auto",
    model: str | None = None,
    img_size: int | tuple[int, int] | None = None,
    dtype: str | torch.dtype | None = None,
    ema: bool = False,
    verify: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    num_heads: int | None = None,
    labels: PathLike | list[str] | tuple[str, ...] | None = None,
    force: bool = False,
    strict: bool = False,
    license: str | None = None,
) -> ConversionResult:
    """Convert a timm / torchvision / transformers / JAX ViT checkpoint into a scratch model directory.

    Args:
        src: checkpoint file (safetensors, ``torch.save`` file, ``.npz``) or a model directory.
        out_dir: directory to write ``model.safetensors`` and ``config.json`` into (created if missing).
        source: ``"auto"`` (recognise by key names) or one of timm, torchvision, transformers, jax.
        model: registered variant to convert to; inferred from the shapes when None, checked when given.
        img_size: input size of the converted model; the position table is resampled when it differs.
        dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"`` for the written weights (default: as stored).
        ema: take the EMA weights (``state_dict_ema``) of a timm ``train.py`` checkpoint.
        verify: compare pre-logit features and logits with the source library's model; raises
            ``VerificationError`` (and writes nothing) when the max-abs-diff exceeds ``tolerance`` or the
            logits are the same for every input.
        num_heads: the attention head count, for sources that do not record it.
        labels: label names (a list, a file with one per line, or an image folder's class directories);
            default: the source's own (a model directory's ``label_names``).
        force: write into a non-empty ``out_dir`` that is not a model directory (its ``config.json`` and
            ``model.safetensors`` are replaced; its other files are kept). A model directory is replaced
            without it.
        strict: refuse (``ConversionError``, nothing written) when a fact shapes cannot tell (head count,
            MLP activation, LayerNorm eps) would be assumed: neither the source nor ``num_heads`` gives it.
            Without it the assumption is reported in ``ConversionResult.assumed``, and ``--verify``, whose
            reference shares it, says it verified only under it.
        license: the weights' license id (``apache-2.0``, ``dinov3-license`` ...), for a source that names none;
            one it names must agree. The directory records what the source's files say (a folder's
            ``README.md`` front matter and ``LICENSE`` file, a file's ``<file>.LICENSE.md``, a timm config, the
            family's license for Meta's and BAAI's own layouts), else ``license``, else ``unknown``.

    The new directory is staged beside ``out_dir`` and swapped in whole in one atomic step; files of
    the old ``out_dir`` other than these two are kept. ``out_dir`` may be neither ``src`` nor hold it.

    Raises:
        ConversionError: for any bad input, naming the file and the problem; nothing is written.
    """
    src, requested = Path(src), Path(out_dir)
    out_dir = requested.resolve()
    out_dtype = parse_dtype(dtype)
    if labels is not None and not isinstance(labels, (list, tuple)):
        try:
            labels = read_label_names(labels)
        except ValueError as err:
            raise ConversionError(f"--labels: {err}") from None
    refuse_writing_over(src, requested)
    with open_checkpoint(src, ema=ema) as checkpoint:
        try:
            fmt, detected = detect_format(checkpoint, source)
            plan = plan_conversion(
                checkpoint,
                fmt,
                model,
                img_size,
                out_dtype,
                num_heads,
                list(labels) if labels is not None else None,
                license,
            )
        except ConversionError as err:
            raise _with_path(err, checkpoint.path) from None
        if strict and plan.arch.assumed:
            raise ConversionError(
                f"--strict: nothing records {assumed_text(plan.arch.assumed)}, which would be "
                f"assumed; {how_to_state(plan.arch.assumed)}; nothing was written",
                checkpoint.path,
            )
        started, created = prepare_out_dir(out_dir, force)
        try:
            sha256, verification = _write_and_install(checkpoint, plan, out_dir, started, out_dtype, verify, tolerance)
        except BaseException:
            remove_empty(created)
            raise
    return ConversionResult(
        out_dir=requested,
        source_format=fmt.name,
        detected=detected,
        model_name=plan.model_name,
        model_args=plan.model_args,
        description=_written_architecture(plan),
        sha256=sha256,
        wrapper=checkpoint.wrapper,
        resampled_from=plan.arch.img_size if plan.resampled else None,
        verification=verification,
        heads_note=plan.arch.heads_note,
        assumed=dict(plan.arch.assumed),
        dropped=tuple(sorted(plan.ignored & set(checkpoint.keys()))),
        source_tensors=len(checkpoint.keys()),
    )
