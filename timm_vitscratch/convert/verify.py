"""Verification: the source model (built by its own library) and ours on one fixed random batch.

Both the pre-logit features (what the classifier reads) and the logits are compared. A match proves the
weights only where the outputs depend on them, so three degenerate cases are never called verified:
features that are the same for every input (a zero patch embedding, say: a backbone has no logits to
show it), logits that are the same for every input (a zero-initialised head), and features equal to those
of a freshly initialised model of the same architecture (weights that were never loaded, or a source that
is an untrained initialisation). Nor is a fact nothing recorded (head count, activation, eps): the
reference is built under the same assumption, so a match confirms the weights only under it, and
:meth:`Verification.summary` says so instead of "ok".
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
#: the seed of the fresh model the converted one is compared with (a generator of its own: the caller's
#: global random state is left as it was)
FRESH_SEED = 20_240_607


@dataclass
class Verification:
    max_abs_diff: float  # the larger of the two below
    features_diff: float
    logits_diff: float | None  # None when the model has no classifier
    tolerance: float
    reference: str  # which library built the source model
    uninformative_logits: bool = False  # the logits are the same for every input
    #: the largest difference of the features between two inputs (None: not measured)
    features_spread: float | None = None
    #: max-abs-diff of the features from those of a freshly initialised model of the architecture (None: not measured)
    fresh_diff: float | None = None
    nonfinite: tuple[str, ...] = ()  # which outputs hold NaN or Inf ("our logits", "the source's features" ...)
    #: facts both models were built under because nothing recorded them (``{"num_heads": 6}``)
    assumed: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """The two models agree (within the tolerance, on finite logits that depend on the input)."""
        return (
            not self.nonfinite
            and self.max_abs_diff <= self.tolerance
            and not self.uninformative_logits
            and not self.uninformative_features
            and not self.weights_unused
        )

    @property
    def uninformative_features(self) -> bool:
        """The features are the same for every input (to within the tolerance): they show nothing of the weights."""
        return self.features_spread is not None and self.features_spread <= self.tolerance

    @property
    def weights_unused(self) -> bool:
        """The features equal (to within the tolerance) those of a fresh model: the weights make no difference."""
        return self.fresh_diff is not None and self.fresh_diff <= self.tolerance

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
        if self.uninformative_features:
            return (
                f"the features match {self.reference} (max-abs-diff {self.features_diff:.3g}), but they are the "
                f"same for every input (they differ by at most {self.features_spread:.3g} between two random "
                f"images, tolerance {self.tolerance:g}), so they cannot tell the weights apart: the source is "
                f"degenerate (a zero patch embedding, say); nothing shows these weights compute a model"
            )
        if self.weights_unused:
            return (
                f"the features match {self.reference} (max-abs-diff {self.features_diff:.3g}), but they are also "
                f"those of a freshly initialised model of the same architecture (max-abs-diff "
                f"{self.fresh_diff:.3g}, tolerance {self.tolerance:g}), so the weights make no difference: the "
                f"source is an untrained initialisation, or its weights were not loaded"
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


def spread_over_batch(outputs: torch.Tensor) -> float:
    """The largest difference of an output between the first input and any other."""
    return (outputs.float() - outputs[:1].float()).abs().max().item()


def fresh_features(model_dir: Path, x: torch.Tensor) -> torch.Tensor:
    """The pre-logit features of a freshly initialised model of the directory's architecture (its config, none
    of its weights), drawn from :data:`FRESH_SEED`."""
    torch.manual_seed(FRESH_SEED)
    fresh = timm.create_model(f"local-dir:{model_dir}", pretrained=False).float().eval()
    assert isinstance(fresh, VisionTransformer)  # the directory was written for one of our architectures
    with torch.no_grad():
        return fresh.forward_head(fresh.forward_features(x), pre_logits=True)


def verify_conversion(
    checkpoint: Checkpoint,
    plan: ConversionPlan,
    model_dir: Path,
    round_to: torch.dtype | None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Verification:
    """Max-abs-diff of features and logits between the source library's model and ours loaded from
    ``model_dir`` (fp32, eval); also how much the features vary over the batch and how far they are from a
    fresh model's. The models built here (the fresh one, the source library's) draw their initial weights from
    torch's global generator: the caller's random state is restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        return _verify(checkpoint, plan, model_dir, round_to, tolerance)


def _verify(
    checkpoint: Checkpoint, plan: ConversionPlan, model_dir: Path, round_to: torch.dtype | None, tolerance: float
) -> Verification:
    x = fixed_batch(plan.arch.in_chans, plan.img_size)
    fresh = fresh_features(model_dir, x)  # first, and freed before the two loaded models are built
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
    spread = fresh_diff = None
    if not nonfinite:
        spread = spread_over_batch(outputs["our features"])
        fresh_diff = _diff(outputs["our features"], fresh)
    return Verification(
        worst,
        features,
        logits_diff,
        tolerance,
        reference.description,
        uninformative,
        spread,
        fresh_diff,
        tuple(nonfinite),
        dict(plan.arch.assumed),
    )
