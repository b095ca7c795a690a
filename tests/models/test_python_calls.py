"""No more Python per forward than timm's model: the calls of one forward of ViT-B/16 and DINOv3-B, ours against
timm's (benchmarks/python_calls.py counts them with ``sys.setprofile``; a count, not a time, so load does not move
it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import timm
import torch

import timm_vitscratch  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def _python_calls():
    spec = importlib.util.spec_from_file_location("python_calls", ROOT / "benchmarks" / "python_calls.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


python_calls = _python_calls()


@pytest.mark.parametrize(("ours", "theirs"), python_calls.PAIRS)
def test_a_forward_makes_no_more_calls_than_timm(ours, theirs):
    image = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    mine = python_calls.count_forward_calls(timm.create_model(ours), image)
    reference = python_calls.count_forward_calls(timm.create_model(theirs), image)
    top = "\n".join(f"{n:5d} {name}" for name, n in (mine.by_name - reference.by_name).most_common(12))
    assert mine.python <= reference.python, f"{ours}: {mine.python} Python calls, {theirs}: {reference.python}\n{top}"
    assert mine.total <= reference.total, f"{ours}: {mine.total} calls in all, {theirs}: {reference.total}\n{top}"


def test_the_counter_sees_a_module_call():
    """The count is not vacuous: one more Identity in the path is four more calls (three frames and a builtin)."""
    image = torch.randn(1, 3, 32, 32)
    plain = torch.nn.Sequential(torch.nn.Flatten())
    longer = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Identity())
    assert python_calls.count_forward_calls(longer, image).total > python_calls.count_forward_calls(plain, image).total
