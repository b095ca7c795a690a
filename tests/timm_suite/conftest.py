"""Runs timm's own model tests once per session (a child pytest); their table is printed at the end
(tests/support/session_report.py)."""

from __future__ import annotations

import time

import pytest
import timm

from tests.support.option_models import OPTION_MODELS
from tests.timm_suite import timm_tests

#: Ours, each with the timm model it must match: whatever timm's tests pass for the reference passes for ours.
OUR_MODELS = {
    "scratch_vit_ti16": "vit_tiny_patch16_224",
    "scratch_vit_s16": "vit_tiny_patch16_224",
    "scratch_deit_ti16_distilled": "deit_tiny_distilled_patch16_224",
    **{name: "vit_tiny_patch16_224" for name in OPTION_MODELS},
}
REFERENCE_MODELS = ["vit_tiny_patch16_224", "deit_tiny_distilled_patch16_224", "vit_small_patch14_reg4_dinov2"]


@pytest.fixture(scope="session")
def timm_suite_outcomes(tmp_path_factory):
    """``{(timm test, model): [(outcome, message)]}`` for our models and timm's reference ViTs."""
    started = time.perf_counter()
    outcomes, _ = timm_tests.run(tmp_path_factory.mktemp("timm_suite"), [*OUR_MODELS, *REFERENCE_MODELS])
    title = f"timm {timm.__version__} tests/test_models.py ({time.perf_counter() - started:.0f} s)"
    timm_tests.LAST_RUN.update(section=(title, timm_tests.table(outcomes, REFERENCE_MODELS + list(OUR_MODELS))))
    return outcomes
