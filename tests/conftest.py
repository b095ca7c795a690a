import sys

import pytest
import timm
import torch

import timm_vitscratch  # noqa: F401  (registers the scratch_* models)

#: A 2-block model on 32x32 images: fast enough to run everywhere in the suite.
TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny(name: str = "scratch_vit_ti16", **kwargs):
    return timm.create_model(name, **{**TINY, **kwargs})


def pytest_terminal_summary(terminalreporter):
    """How many fuzz cases ran (tests/fuzzing.py counts them), by loader and outcome."""
    fuzzing = sys.modules.get("fuzzing")
    if fuzzing is None or not fuzzing.CASES:
        return
    terminalreporter.section("fuzz cases run")
    total = 0
    for name, outcomes in fuzzing.CASES.items():
        total += sum(outcomes.values())
        shown = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        terminalreporter.write_line(f"{name}: {sum(outcomes.values())} ({shown})")
    terminalreporter.write_line(f"total: {total}")
