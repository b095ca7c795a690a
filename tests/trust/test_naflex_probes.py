"""The hostile NaFlex batches of ../shared/probes r05 and r15, each refused with a NaFlexBatchError naming its
field, in a child process capped at 200 MB more than it already uses (tests/support/bounded_child.py):
a coordinate's value never sets what the forward allocates. Each child runs its cases one after another,
so the cap bounds all of them together."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # NaFlex probes in memory-capped child processes

BOUNDED = Path(__file__).parents[1] / "support" / "bounded_child.py"
CAP_MB = 200
#: child setup: tiny (64 wide, 2 blocks) and a 1-block 768-wide model (ViT-B's table width), and batch()
#: making 2 images of 4 x 4 valid patches; a valid batch runs first, so the first forward's allocations
#: are not counted as the refusals'
SETUP = """
import torch, timm, timm_vitscratch
torch.set_num_threads(1)
def build(width, depth, heads):
    return timm.create_model("scratch_vit_ti16", img_size=32, patch_size=8, embed_dim=width, depth=depth,
                             num_heads=heads, num_classes=5).eval()
models = {64: build(64, 2, 4), 768: build(768, 1, 12)}
def batch(images=2):
    idx = torch.arange(16)
    return dict(patches=torch.randn(images, 16, 192), patch_valid=torch.ones(images, 16, dtype=torch.bool),
                patch_coord=torch.stack([idx // 4, idx % 4], -1)[None].expand(images, 16, 2).clone())
with torch.no_grad():
    for m in models.values():
        m(batch())
"""
#: child snippet: run every (name, width, edit) of CASES, print one line per case
RUN = """
import json
for name, width, edit in CASES:
    b = batch()
    exec(edit)
    try:
        with torch.no_grad():
            out = models[width](b)
        line = dict(name=name, type="logits", message=str(tuple(out.shape)))
    except Exception as err:
        line = dict(name=name, type=type(err).__name__, message=str(err))
    print("CASE " + json.dumps(line))
"""


def run_cases(cases: list[tuple[str, int, str]]) -> tuple[dict[str, dict], dict]:
    """Each case's outcome by name, and the child's report (time, peak memory growth)."""
    snippet = f"CASES = {cases!r}\n{RUN}"
    result = subprocess.run(
        [sys.executable, str(BOUNDED), SETUP, snippet, str(CAP_MB)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    assert report["outcome"] == "ok", report  # the child ran every case (none escaped as MemoryError, say)
    outcomes = {case["name"]: case for case in (json.loads(line[5:]) for line in lines if line.startswith("CASE "))}
    assert list(outcomes) == [name for name, _, _ in cases]
    assert report["peak_growth_mb"] < CAP_MB, report
    return outcomes, report


def assert_refused(outcome: dict, field: str, *parts: str) -> None:
    assert outcome["type"] == "NaFlexBatchError", outcome
    assert outcome["message"].startswith(f"NaFlex batch {field!r}: "), outcome
    for part in parts:
        assert part in outcome["message"], outcome


def test_r05_one_huge_coordinate_is_refused_in_bounded_memory():
    # one valid patch of a 16-patch image at (row, col): the grid it would set is past the image's 16 patches
    coords = [(3000, 3000, 64), (100_000, 100_000, 64), (1000, 1000, 768), (2**63 - 1, 0, 64), (5, 2**40, 768)]
    cases = [(f"{r},{c}@{w}", w, f"b['patch_coord'][0, 3] = torch.tensor([{r}, {c}])") for r, c, w in coords]
    # and a legit grid as large as the bound: 128 valid patches on a diagonal (a 128 x 128 grid), accepted
    diagonal = "i = torch.arange(128); b = dict(patches=torch.randn(1, 128, 192), patch_coord=torch.stack([i, i], -1)[None], patch_valid=torch.ones(1, 128, dtype=torch.bool))"
    outcomes, _ = run_cases([*cases, ("diagonal", 64, diagonal)])
    for (row, col, _), (name, _, _) in zip(coords, cases, strict=True):
        axis, value = ("row", row) if row >= 16 else ("column", col)
        assert_refused(
            outcomes[name], "patch_coord", f"image 0: a valid patch at {axis} {value:,} is past the bound 15"
        )
    assert outcomes["diagonal"] == dict(name="diagonal", type="logits", message="(1, 5)")


def test_r15_unusable_batches_name_their_field_in_bounded_memory():
    cases = {
        "0 images": ("b = {k: v[:0] for k, v in b.items()}", "patches", ["holds 0 images (0, 16, 192)"]),
        "float64 patches": (
            "b['patches'] = b['patches'].double()",
            "patches",
            ["torch.float64", "expected torch.float32"],
        ),
        "float16 patches": (
            "b['patches'] = b['patches'].half()",
            "patches",
            ["torch.float16", "expected torch.float32"],
        ),
        "uint8 patches": ("b['patches'] = b['patches'].to(torch.uint8)", "patches", ["torch.uint8", "floating-point"]),
        "zero patch side": (
            "b['patches'] = torch.randn(2, 16, 0, 8, 3)",
            "patches",
            ["patch side of 0 pixels", "1 to 64"],
        ),
        "coord 2**63-1": (
            "b['patch_coord'][0, 3] = torch.tensor([2**63 - 1, 0])",
            "patch_coord",
            ["row 9,223,372,036,854,775,807 is past the bound 15"],
        ),
        "coord -2**63": ("b['patch_coord'][1, 0] = torch.tensor([0, -2**63])", "patch_coord", ["negative", ">= 0"]),
        "uint64 coord": (
            "b['patch_coord'] = b['patch_coord'].to(torch.uint64)",
            "patch_coord",
            ["torch.uint64", "integer"],
        ),
    }
    outcomes, _ = run_cases([(name, 64, edit) for name, (edit, _, _) in cases.items()])
    for name, (_, field, parts) in cases.items():
        assert_refused(outcomes[name], field, *parts)
