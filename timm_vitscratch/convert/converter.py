"""``convert()``: any supported checkpoint -> a scratch model directory (model.safetensors + config.json).

Everything is checked before a byte is written; the directory's files are written into a staging
directory inside it, verified there when asked, and only then renamed over the old ones. A failed,
refused or killed conversion leaves the previous files as they were.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from ..errors import ConversionError, VerificationError
from ..files import PathLike, fsync_directory
from ..hub.model_dir import CONFIG_NAME, WEIGHTS_NAME, read_label_names, write_model_directory
from .checkpoint import Checkpoint, open_checkpoint
from .formats import detect_format
from .plan import ConversionPlan, Target, parse_dtype, plan_conversion
from .shape_inference import assumed_text, assumption_notes, how_to_state
from .verify import DEFAULT_TOLERANCE, Verification, verify_conversion
from ..tensor_writer import TensorSpec

STAGING_PREFIX = ".convert-"


@dataclass
class ConversionResult:
    out_dir: Path
    source_format: str
    detected: bool  # True when the format was recognised from the keys (``source="auto"``)
    model_name: str
    model_args: Dict[str, Any]
    description: str  # the architecture read from the shapes
    sha256: str
    wrapper: Optional[str] = None  # e.g. "state_dict_ema" when unwrapped from a training checkpoint
    resampled_from: Optional[Tuple[int, int]] = None
    verification: Optional[Verification] = None
    heads_note: Optional[str] = None  # one line when the head count was assumed
    #: architecture facts nothing recorded (heads, activation, eps) and the values built: ``{"num_heads": 6}``
    assumed: Dict[str, Any] = field(default_factory=dict)

    @property
    def assumption_notes(self) -> List[str]:
        """What ``convert`` assumed, one line per kind (what the CLI prints)."""
        return assumption_notes(self.heads_note, self.assumed)


def _with_path(err: ConversionError, path: Path) -> ConversionError:
    return err if err.path is not None else ConversionError(err.problem, path)


def _producer(checkpoint: Checkpoint, targets: Dict[str, Target]) -> Callable[[TensorSpec], torch.Tensor]:
    def produce(spec: TensorSpec) -> torch.Tensor:
        rule = targets[spec.name].rule
        return rule.op(*[checkpoint.tensor(s) for s in rule.sources]).to(spec.dtype)

    return produce


def prepare_out_dir(out_dir: Path) -> bool:
    """Make sure ``out_dir`` is a writable directory; returns True when it was created here."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ConversionError("output path exists and is not a directory", out_dir)
    created = False
    if not out_dir.exists():
        try:
            out_dir.mkdir(parents=True)
            created = True
        except OSError as err:
            raise ConversionError(f"cannot create the output directory: {err.strerror}", out_dir) from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConversionError("output directory is not writable", out_dir)
    for stale in out_dir.glob(STAGING_PREFIX + "*"):  # left by a killed conversion
        shutil.rmtree(stale, ignore_errors=True)
    return created


@contextlib.contextmanager
def staging_directory(out_dir: Path, created: bool) -> Iterator[Path]:
    """A temporary directory inside ``out_dir``, removed afterwards (and ``out_dir`` too if it was new and empty)."""
    try:
        stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir))
    except OSError as err:
        raise ConversionError(f"output directory is not writable: {err.strerror}", out_dir) from None
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only succeeds when nothing was committed into it


def commit(stage: Path, out_dir: Path) -> None:
    """Move the finished files over the old ones (weights first; the config names their sha256)."""
    for name in (WEIGHTS_NAME, CONFIG_NAME):
        os.replace(stage / name, out_dir / name)
    fsync_directory(out_dir)


def _write(checkpoint: Checkpoint, plan: ConversionPlan, stage: Path, out_dtype: Optional[torch.dtype]) -> str:
    """Write model.safetensors (streaming) and config.json into ``stage``; returns the weights' sha256."""
    targets = {t.spec.name: t for t in plan.targets}

    def release_sources(spec: TensorSpec) -> None:  # written and hashed: give its source pages back
        for source in targets[spec.name].rule.sources:
            checkpoint.release(source)

    source_info = {
        "format": plan.fmt.name, "file": checkpoint.path.name, "wrapper": checkpoint.wrapper,
        "dtype": str(out_dtype).replace("torch.", "") if out_dtype else "as stored",
    }
    if plan.resampled:
        source_info["resampled_from"] = list(plan.arch.img_size)
    return write_model_directory(stage, plan.meta_model, plan.specs, _producer(checkpoint, targets),
                                 source=source_info, written=release_sources, label_names=plan.label_names)


def convert(
    src: PathLike,
    out_dir: PathLike,
    source: str = "auto",
    model: Optional[str] = None,
    img_size: Union[int, Tuple[int, int], None] = None,
    dtype: Union[str, torch.dtype, None] = None,
    ema: bool = False,
    verify: bool = False,
    tolerance: float = DEFAULT_TOLERANCE,
    num_heads: Optional[int] = None,
    labels: Union[PathLike, Sequence[str], None] = None,
    strict: bool = False,
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
        strict: refuse (``ConversionError``, nothing written) when a fact shapes cannot tell (head count,
            MLP activation, LayerNorm eps) would be assumed: neither the source nor ``num_heads`` gives it.
            Without it the assumption is reported in ``ConversionResult.assumed``, and ``--verify``, whose
            reference shares it, says it verified only under it.

    Raises:
        ConversionError: for any bad input, naming the file and the problem; nothing is written.
    """
    src, out_dir = Path(src), Path(out_dir)
    out_dtype = parse_dtype(dtype)
    if labels is not None and not isinstance(labels, (list, tuple)):
        try:
            labels = read_label_names(labels)
        except ValueError as err:
            raise ConversionError(f"--labels: {err}") from None
    with open_checkpoint(src, ema=ema) as checkpoint:
        try:
            fmt, detected = detect_format(checkpoint, source)
            plan = plan_conversion(checkpoint, fmt, model, img_size, out_dtype, num_heads,
                                   list(labels) if labels is not None else None)
        except ConversionError as err:
            raise _with_path(err, checkpoint.path) from None
        if strict and plan.arch.assumed:
            raise ConversionError(f"--strict: nothing records {assumed_text(plan.arch.assumed)}, which would be "
                                  f"assumed; {how_to_state(plan.arch.assumed)}; nothing was written", checkpoint.path)
        created = prepare_out_dir(out_dir)
        with staging_directory(out_dir, created) as stage:
            try:
                sha256 = _write(checkpoint, plan, stage, out_dtype)
                verification = None
                if verify:
                    verification = verify_conversion(checkpoint, plan, stage, out_dtype, tolerance)
                    if not verification.passed:
                        raise VerificationError(f"verification failed: {verification.failure()}; nothing was "
                                                f"written", checkpoint.path)
                commit(stage, out_dir)
            except OSError as err:  # disk full, directory removed under us, ...
                raise ConversionError(f"writing failed: {err}", out_dir) from None
    return ConversionResult(
        out_dir=out_dir, source_format=fmt.name, detected=detected, model_name=plan.model_name,
        model_args=plan.model_args, description=plan.arch.describe(), sha256=sha256, wrapper=checkpoint.wrapper,
        resampled_from=plan.arch.img_size if plan.resampled else None, verification=verification,
        heads_note=plan.arch.heads_note, assumed=dict(plan.arch.assumed),
    )
