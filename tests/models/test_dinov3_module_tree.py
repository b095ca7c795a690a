"""Inside as well as outside, for DINOv3: every module of timm's ``Eva`` exists in ours and its hooks see timm's tensors.

As tests/models/test_module_tree_timm.py does for the classic family: timm's model and ours hold the same
(perturbed) weights; a forward hook and a full backward hook go on every named module of timm's model and
on the module of that name in ours; after one forward and backward pass each module fired as often in
both, with equal outputs and output gradients, and every parameter's gradient is equal. Run with ``-s``
for the counts.
"""

from __future__ import annotations

import pytest
import torch

from tests.models.test_module_tree_timm import hooked_pass, max_diffs
from tests.support import sweep
from tests.support.dinov3_pairs import TINY_DINOV3, dinov3_pair
from tests.support.timm_pairs import set_fused_attn
from timm_vitscratch.models.variants import DINOV3_TIMM_NAMES

TOL = 1e-5
NUM_CLASSES = 5


def compare(name: str, mode: str, fused: bool, size: tuple[int, int], **overrides: object) -> dict[str, object]:
    """Counts and differences of one pass of timm's model and ours (see the module docstring)."""
    reference, ours = dinov3_pair(name, num_classes=NUM_CLASSES, **overrides)
    for model in (reference, ours):
        model.train(mode == "train")
        set_fused_attn(model, fused)
    names = [n for n, _ in reference.named_modules()]
    our_names = {n for n, _ in ours.named_modules()}
    torch.manual_seed(1)
    x = torch.randn(2, 3, *size)
    weights = torch.randn(2, NUM_CLASSES)
    theirs = hooked_pass(reference, names, x, weights)
    mine = hooked_pass(ours, [n for n in names if n in our_names], x, weights)
    outputs, grads = max_diffs(theirs[0], mine[0]), max_diffs(theirs[1], mine[1])
    params = max_diffs({k: [v] for k, v in theirs[2].items()}, {k: [v] for k, v in mine[2].items()})
    return dict(
        names=names,
        modules=len(names),
        missing=sorted(set(names) - our_names),
        fired=len(theirs[0]),
        silent=sorted(set(names) - set(theirs[0])),
        extra_calls=sorted(n for n in mine[0] if n not in theirs[0]),
        bad_outputs={n: d for n, d in outputs.items() if d is None or d > TOL},
        backward=len(theirs[1]),
        bad_grads={n: d for n, d in grads.items() if d is None or d > TOL},
        params=len(theirs[2]),
        bad_params={n: d for n, d in params.items() if d is None or d > TOL},
    )


def expected_silent(names: list[str], name: str, fused: bool) -> list[str]:
    """The modules timm's Eva never calls: ``blocks`` (a ModuleList it iterates), ``rope`` (its terms come from
    a method), ``attn.qkv`` where the q/v biases go through ``F.linear`` with its weight, ``attn_drop`` on the
    fused path (no attention matrix)."""
    silent = ["blocks", "rope"]
    for block in sorted({n.split(".attn")[0] for n in names if n.endswith(".attn")}):
        if name.endswith("_qkvb"):
            silent.append(f"{block}.attn.qkv")
        if fused:
            silent.append(f"{block}.attn.attn_drop")
    return sorted(silent)


def check(report: dict[str, object], name: str, fused: bool, label: str) -> None:
    assert report["missing"] == [], report["missing"]
    assert report["extra_calls"] == [], report["extra_calls"]
    assert report["bad_outputs"] == {}, report["bad_outputs"]
    assert report["bad_grads"] == {}, report["bad_grads"]
    assert report["bad_params"] == {}, report["bad_params"]
    assert report["silent"] == expected_silent(report["names"], name, fused), report["silent"]  # type: ignore[arg-type]
    assert report["backward"] == report["fired"]
    print(
        f"{label}: {report['fired']}/{report['fired']} timm modules fire with equal tensors ({report['modules']} named), "
        f"{report['backward']}/{report['backward']} equal output gradients, "
        f"{report['params']}/{report['params']} equal parameter gradients"
    )


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "eager"])
@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name", ["scratch_dinov3_s16", "scratch_dinov3_s16_plus_qkvb"])
def test_every_timm_module_fires_with_timms_tensors(name: str, mode: str, fused: bool) -> None:
    report = compare(name, mode, fused, (32, 48), **TINY_DINOV3)
    check(report, name, fused, f"{name} (tiny) {mode} {'fused' if fused else 'eager'}")


@pytest.mark.slow  # the true widths, up to the 7B's 4096, one block each
@pytest.mark.parametrize("name", sweep.rows(n for n in DINOV3_TIMM_NAMES if n != "scratch_dinov3_t16_qkvb"))
def test_every_timm_module_fires_with_timms_tensors_at_true_width(name: str) -> None:
    report = compare(name, "eval", True, (64, 48), depth=1)
    check(report, name, True, f"{name} (true width, depth 1) eval fused")
