"""pytest plugin for the run of timm's ``test_models.py``: registers our models, keeps only the chosen ones.

Loaded with ``-p tests.timm_suite.selection_plugin`` in the child pytest that runs timm's file.
``TIMM_SUITE_MODELS`` (comma-separated model names) and ``TIMM_SUITE_TESTS`` (comma-separated
test-function names) choose the items; every other item timm's file parametrizes is deselected,
so its per-model tests run exactly as timm runs them, on these models only (and each pair that
``timm_tests.selected`` accepts).
"""

from __future__ import annotations

import os

import tests.support.option_models  # noqa: F401  (registers the scratch_test_* option models)
import timm_vitscratch  # noqa: F401  (registers the scratch_* zoo)
from tests.timm_suite.timm_tests import selected

# the markers timm's own pyproject.toml declares (and pytest-timeout's), so that none warns
MARKERS = (
    "base",
    "forward",
    "backward",
    "cfg",
    "cfg_nonstd",
    "torchscript",
    "features",
    "fxforward",
    "fxbackward",
    "timeout(seconds): time limit, honoured when pytest-timeout is installed",
)


def _chosen(variable: str) -> set:
    value = os.environ.get(variable, "")
    if not value:
        raise RuntimeError(f"{variable} is not set: give comma-separated names")
    return set(value.split(","))


def pytest_configure(config):
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


def pytest_collection_modifyitems(config, items):
    models, tests = _chosen("TIMM_SUITE_MODELS"), _chosen("TIMM_SUITE_TESTS")
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        model = str(params.get("model_name", "")).split(".")[0]  # cfg tests name models with their tags
        chosen = item.originalname in tests and model in models and selected(item.originalname, model)
        (kept if chosen else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept
