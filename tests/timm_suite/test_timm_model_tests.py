"""timm's own tests/test_models.py (from the sdist of the installed timm) over our models.

Each of timm's per-model tests must pass for each of our models, and timm's name filters must select
it for ours as they select it for timm's own ViTs (the reference must not pass a test ours skip).
"""

from __future__ import annotations

import pytest

from tests.timm_suite import timm_tests
from tests.timm_suite.conftest import CONTROLS, OUR_MODELS, SuiteRun

pytestmark = pytest.mark.slow  # timm's own model tests, in a child pytest


@pytest.mark.parametrize(
    ("test", "model"),
    [(test, model) for test in timm_tests.PER_MODEL_TESTS for model in OUR_MODELS if timm_tests.selected(test, model)],
)
def test_timm_model_test_passes(
    timm_suite_run: SuiteRun, request: pytest.FixtureRequest, test: str, model: str
) -> None:
    outcomes = timm_suite_run.outcomes(request.node.nodeid)
    reference = OUR_MODELS[model]
    results = outcomes.get((test, model), [])
    reference_outcome = timm_tests.summary(outcomes, test, reference)
    assert results, (
        f"timm's {test} did not select {model} (for {reference} it {reference_outcome}): "
        "its name filters no longer treat ours as its ViTs"
    )
    problems = [f"{outcome}: {message}" for outcome, message in results if outcome != "passed"]
    assert not problems, f"timm's {test}[{model}] (for {reference}: {reference_outcome}):\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("test", "model"),
    [(test, model) for model in CONTROLS for test in timm_tests.PER_MODEL_TESTS if timm_tests.selected(test, model)],
)
def test_timm_own_vit_passes(timm_suite_run: SuiteRun, request: pytest.FixtureRequest, test: str, model: str) -> None:
    """The controls: run this way, timm's tests select and pass timm's own ViT-Ti/16 and DINOv3 ViT-S/16."""
    outcomes = timm_suite_run.outcomes(request.node.nodeid)
    assert timm_tests.summary(outcomes, test, model) == "passed", outcomes.get((test, model))


def test_patch_fails_loudly_when_timm_changes_its_file():
    source = timm_tests.read_test_file(timm_tests.sdist())
    patched = timm_tests.patch(source)
    assert "NON_STD_FILTERS += ['scratch_*']" in patched and "'variants'" in patched
    with pytest.raises(RuntimeError, match="filter lists changed"):
        timm_tests.patch(source.replace("NUM_NON_STD = len(NON_STD_FILTERS)", "NUM_NON_STD = 0"))
