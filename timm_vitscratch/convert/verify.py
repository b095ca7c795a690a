"""Verification: the source model (built by its own library) and ours on one fixed random batch.

Both the pre-logit features (what the classifier reads) and the logits are compared. Logits that
do not depend on the input (a zero-initialised head, say) cannot tell right weights from wrong ones,
so a model whose logits are constant over the batch is never called verified. Nor is a fact nothing
recorded (head count, activation, eps): the reference is built under the same assumption, so a match
confirms the weights only under it, and :meth:`Verification.summary` says so instead of "ok".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import timm
import torch

from ..errors import ConversionError
from ..layouts.checkpoint import Checkpoint
from ..models import VisionTransformer
from .plan import ConversionPlan
from .shape_inference import assumed_text, how_to_state
from .source_format import ReferenceSpec

DEFAULT_TOLERANCE = 1e-4
BATCH_SEED = 0


@dataclass
class Verification:
    max_abs_diff: float  # the larger of the two below
    features_diff: float
    logits_diff: float | None  # None when the model has no classifier
    tolerance: float
    reference: str  # which library built the source model
    uninformative_logits: bool = False  # the logits are the same for every input
    nonfinite: tuple[str, ...] = ()  # which outputs hold NaN or Inf ("our logits", "the source's features" ...)
    #: facts both models were built under because nothing recorded them (``{"num_heads": 6}``)
    assumed: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """The two models agree (within the tolerance, on finite logits that depend on the input)."""
        return not self.nonfinite and self.max_abs_diff <= self.tolerance and not self.uninformative_logits

    @property
    def confirmed(self) -> bool:
        """Passed, and nothing was assumed: the converted model is the source model."""
        return self.passed and not self.assumed

    def summary(self) -> str:
        """One line: what was compared, and what it shows (``ok`` only when nothing was assumed)."""
        logits = "" if self.logits_diff is None else f", logits {self.logits_diff:.3g}"
        compared = (
            f"max-abs-diff features {self.features_diff:.3g}{logits} against {self.reference} on a fixed "
            f"random batch (tolerance {self.tolerance:g})"
        )
        if not self.passed:
            return f"{compared}: failed, {self.failure()}"
        if self.assumed:
            plural = "s" if len(self.assumed) > 1 else ""
            return (
                f"{compared}: verified under the assumption{plural} {assumed_text(self.assumed)}, which the "
                f"reference shares; {how_to_state(self.assumed)} to verify {'them' if plural else 'it'}"
            )
        return f"{compared}: ok"

    def failure(self) -> str:
        """Why verification failed, in one sentence."""
        if self.nonfinite:
            return (
                f"{' and '.join(self.nonfinite)} hold NaN or Inf on the fixed random batch, so nothing can be "
                f"compared: the weights hold NaN or Inf, or overflow in this dtype"
            )
        if self.max_abs_diff > self.tolerance:
            return (
                f"max-abs-diff {self.max_abs_diff:.3g} (features {self.features_diff:.3g}, logits "
                f"{self.logits_diff if self.logits_diff is None else format(self.logits_diff, '.3g')}) between "
                f"our model and {self.reference} exceeds the tolerance {self.tolerance:g}"
            )
        return (
            f"the features match {self.reference} (max-abs-diff {self.features_diff:.3g}), but the logits are "
            f"the same for every input (a zero or constant classifier?), so they cannot tell the weights apart; "
            f"convert without --verify, or give a checkpoint whose classifier is trained"
        )


def fixed_batch(in_chans: int, img_size: Sequence[int], batch: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(BATCH_SEED)
    return torch.randn(batch, in_chans, img_size[0], img_size[1], generator=generator)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return (a.float() - b.float()).abs().max().item()


def constant_over_batch(logits: torch.Tensor) -> bool:
    """True when every input gets the same logits (to within float rounding)."""
    spread = (logits - logits[:1]).abs().max().item()
    return spread <= 1e-6 * max(1.0, logits.abs().max().item())


def verify_conversion(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    model_dir: Path,
    round_to: torch.dtype | None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Verification:
    """Max-abs-diff of features and logits between the source library's model and ours loaded from
    ``model_dir`` (fp32, eval)."""
    ours = timm.create_model(f"local-dir:{model_dir}", pretrained=True).float().eval()
    assert isinstance(ours, VisionTransformer)  # the directory was written for one of our architectures
    spec = ReferenceSpec(plan.arch, plan.img_size, round_to)
    try:
        reference = plan.fmt.reference(checkpoint, spec)
    except ImportError as err:
        raise ConversionError(
            f"--verify builds the source model with {plan.fmt.library}, which is not installed "
            f"({err}); install it or convert without --verify"
        ) from None
    x = fixed_batch(plan.arch.in_chans, plan.img_size)
    with torch.no_grad():
        outputs = {
            "our features": ours.forward_head(ours.forward_features(x), pre_logits=True),
            "the source's features": reference.features(x),
        }
        if reference.logits is not None:
            outputs.update({"our logits": ours(x), "the source's logits": reference.logits(x)})
    # checked first: max() and comparisons with NaN would otherwise pass for a number
    nonfinite = [name for name, value in outputs.items() if not bool(value.isfinite().all())]
    features = _diff(outputs["our features"], outputs["the source's features"])
    logits_diff, uninformative = None, False
    if reference.logits is not None:
        logits_diff = _diff(outputs["our logits"], outputs["the source's logits"])
        uninformative = not nonfinite and constant_over_batch(outputs["our logits"].float())
    worst = max(features, logits_diff if logits_diff is not None else 0.0)
    return Verification(
        worst,
        features,
        logits_diff,
        tolerance,
        reference.description,
        uninformative,
        tuple(nonfinite),
        dict(plan.arch.assumed),
    )
