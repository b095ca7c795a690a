"""Verification: the source model (built by its own library) and ours on one fixed random batch."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import timm
import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .formats import ReferenceSpec
from .plan import ConversionPlan

DEFAULT_TOLERANCE = 1e-4
BATCH_SEED = 0


@dataclass
class Verification:
    max_abs_diff: float
    tolerance: float
    reference: str  # which library built the source model

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance


def fixed_batch(in_chans: int, img_size, batch: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(BATCH_SEED)
    return torch.randn(batch, in_chans, img_size[0], img_size[1], generator=generator)


def verify_conversion(checkpoint: Checkpoint, plan: ConversionPlan, model_dir: Path,
                      round_to: Optional[torch.dtype], tolerance: float = DEFAULT_TOLERANCE) -> Verification:
    """Max-abs-diff between the source library's model and ours loaded from ``model_dir`` (fp32, eval)."""
    ours = timm.create_model(f"local-dir:{model_dir}", pretrained=True).float().eval()
    spec = ReferenceSpec(plan.arch, plan.img_size, round_to)
    try:
        reference = plan.fmt.reference(checkpoint, spec)
    except ImportError as err:
        raise ConversionError(f"--verify builds the source model with {plan.fmt.library}, which is not installed "
                              f"({err}); install it or convert without --verify") from None
    x = fixed_batch(plan.arch.in_chans, plan.img_size)
    with torch.no_grad():
        diff = (ours(x).float() - reference(x).float()).abs().max().item()
    return Verification(diff, tolerance, getattr(reference, "description", plan.fmt.reference_name))
