"""Runs timm's own model tests once per session (a child pytest); their table is printed at the end
(tests/support/session_report.py).

If that run does not finish (stopped at its time limit, or the child failed), the first test that needs it
fails with one line saying why, and the others are reported as not run, in one line together: the cause is
said once, not once per test.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
import timm

from tests.support import sweep
from tests.support.option_models import OPTION_REFERENCES
from tests.timm_suite import timm_tests

#: Ours, each with the timm model it must match: whatever timm's tests pass for the reference passes for ours.
ALL_OUR_MODELS = {
    "scratch_vit_ti16": "vit_tiny_patch16_224",
    "scratch_vit_s16": "vit_tiny_patch16_224",
    "scratch_deit_ti16_distilled": "deit_tiny_distilled_patch16_224",
    **OPTION_REFERENCES,
    **timm_tests.DINOV3_MODELS,
    **timm_tests.EVA02_MODELS,
}
#: what the full sweep alone runs (VITSCRATCH_FULL_SWEEP=1, as CI runs): ViT-S/16 is ViT-Ti/16's code at another
#: width, and DINOv3's GELU form is the SwiGLU + qkv-bias form's code with the other MLP class, which the small
#: option models run too
FULL_SWEEP_ONLY = ("scratch_vit_s16", "scratch_dinov3_s16")
OUR_MODELS = {
    name: reference
    for name, reference in ALL_OUR_MODELS.items()
    if name in sweep.cases(ALL_OUR_MODELS, [n for n in ALL_OUR_MODELS if n not in FULL_SWEEP_ONLY])
}
#: timm's own ViTs that ours are compared with (timm's DINOv2 ViT-S/14 used to be here too: at 518x518 it is past
#: the input size timm's tests take, so every test skipped it); one DINOv3 and one EVA02 (timm's Eva), the controls
#: for those layouts
REFERENCE_MODELS = [
    "vit_tiny_patch16_224",
    "deit_tiny_distilled_patch16_224",
    "vit_small_patch16_dinov3",
    "eva02_tiny_patch14_224",
]
#: the references each of timm's tests must select and pass, run this way (the controls of the run itself)
CONTROLS = ["vit_tiny_patch16_224", "vit_small_patch16_dinov3"]


@dataclass
class SuiteRun:
    """The session's run of timm's tests: its outcomes, or why there are none (and which test said so)."""

    found: timm_tests.Outcomes
    failure: str = ""
    told_by: str = ""

    def outcomes(self, asking: str) -> timm_tests.Outcomes:
        """``{(timm test, model): [(outcome, message)]}``; if the run did not finish, the first test to ask
        (``asking``: its node id) fails with the one line saying why, and every later one is not run."""
        if self.failure and not self.told_by:
            self.told_by = asking
            pytest.fail(self.failure, pytrace=False)
        if self.failure:  # raised here, so pytest reports all of them on one line
            pytest.skip(f"not run: timm's model suite did not complete ({self.told_by} failed saying why)")
        return self.found


@pytest.fixture(scope="session")
def timm_suite_run(tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    """timm's tests run over our models and timm's reference ViTs, or why they did not finish."""
    models = [*OUR_MODELS, *REFERENCE_MODELS]
    started = time.perf_counter()
    try:
        limit, origin = timm_tests.time_limit(len(models))
        outcomes = timm_tests.run(tmp_path_factory.mktemp("timm_suite"), models, limit, timeout_origin=origin)
    except timm_tests.SuiteIncomplete as incomplete:
        return SuiteRun({}, failure=str(incomplete))
    title = f"timm {timm.__version__} tests/test_models.py ({time.perf_counter() - started:.0f} s)"
    timm_tests.LAST_RUN.update(section=(title, timm_tests.table(outcomes, REFERENCE_MODELS + list(OUR_MODELS))))
    return SuiteRun(outcomes)
