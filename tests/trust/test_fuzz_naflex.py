"""Fuzzing NaFlex dicts handed to ``model(batch)``: arbitrary coordinates (up to int64's extremes), valid masks,
dtypes, shapes, patch sizes, attention masks, missing and non-tensor entries.

Every case runs in a crash-isolated child (``tests/support/naflex_worker.py``), its address space capped at
``HEADROOM`` over what the models take, ``TIMEOUT`` seconds per case: a case that crashes, hangs or
allocates past the cap is reported, not suffered. Each ends in logits whose every image equals that image
alone (its valid patches, a batch of one; finite where its patches are), or in a ``NaFlexBatchError``
naming the field. A batch known to be unusable must be refused, and a batch as timm's collator makes it
must run. The count comes from ``tests/support/fuzz_plan.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, LoaderProcess, fuzz_settings

pytestmark = pytest.mark.slow  # NaFlex fuzz cases in a crash-isolated worker

WORKER = Path(__file__).parents[1] / "support" / "naflex_worker.py"
HEADROOM = 512 << 20
TIMEOUT = 60.0
NAME = "NaFlex dicts (model forward)"
#: coordinates a hostile batch may hold: small ones, the edges of the bound, and int64's extremes
VALUES = [0, 1, 2, 3, 4, 5, 9, 10, 11, 15, 16, 127, 128, 129, 3000, 10**5, 2**31 - 1, 2**32, 2**62, 2**63 - 1]
VALUES += [-1, -(2**31), -(2**63)]
#: patch sides of (B, N, Ph, Pw, C) batches: the model's 8 needs no resampling; 64 is the bound for it
SIDES = [0, 1, 3, 8, 8, 12, 16, 64, 65]
#: dtypes, the one that works listed more often
PATCH_DTYPES = ["float32"] * 24 + ["float64", "float16", "bfloat16", "uint8", "int64", "bool"]
COORD_DTYPES = ["int64"] * 16 + ["int32", "int16", "int8", "uint8", "float32", "bool", "uint64"]
VALID_DTYPES = ["bool"] * 16 + ["int64", "uint8", "float32"]
MASKS = [None] * 16 + ["bool", "bool", "float32", "float32", "float64", "wrong-shape"]
GOOD = {
    "patches": ("float32",),
    "coord": ("int64", "int32", "int16", "int8", "uint8"),
    "valid": ("bool", "int64", "uint8"),
}


@st.composite
def naflex_dicts(draw: Any) -> dict[str, Any]:
    """A description of a NaFlex batch (built in the worker): a collated batch, then hostile edits."""
    model = draw(st.sampled_from(["learned", "learned", "sincos", "registers-avg"]))
    batch, seq = draw(st.sampled_from([1, 2, 3] * 6 + [0])), draw(st.sampled_from(list(range(1, 11)) * 3 + [0]))
    coord = [[[0, 0] for _ in range(seq)] for _ in range(batch)]
    valid = [[False] * seq for _ in range(batch)]
    for b in range(batch):  # as timm's collator: the first n patches of a w-wide image, row-major
        width, count = draw(st.integers(1, 5)), draw(st.integers(min(1, seq), seq))
        for n in range(count):
            coord[b][n] = [n // width, n % width]
            valid[b][n] = True
    edits = []
    if batch and seq:
        for _ in range(draw(st.integers(0, 3))):
            b, n = draw(st.integers(0, batch - 1)), draw(st.integers(0, seq - 1))
            if draw(st.booleans()):
                axis, value = draw(st.integers(0, 1)), draw(st.sampled_from(VALUES))
                coord[b][n][axis] = value
                edits.append(f"coord[{b},{n},{axis}]={value}")
            else:
                valid[b][n] = not valid[b][n]
                edits.append(f"valid[{b},{n}] flipped")
    layout = draw(st.sampled_from(["flat"] * 16 + ["flat-wrong", "4d"] + ["5d"] * 6))
    if layout == "flat":
        shape = [batch, seq, 192]
    elif layout == "flat-wrong":
        shape = [batch, seq, draw(st.sampled_from([0, 191, 768]))]
    elif layout == "5d":
        shape = [
            batch,
            seq,
            draw(st.sampled_from(SIDES)),
            draw(st.sampled_from(SIDES)),
            draw(st.sampled_from([3, 3, 1])),
        ]
    else:
        shape = [batch, seq, 8, 24]
    return dict(
        model=model,
        batch=batch,
        seq=seq,
        seed=draw(st.integers(0, 1000)),
        patches_shape=shape,
        patches_dtype=draw(st.sampled_from(PATCH_DTYPES)),
        nan_at=draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=2)),
        coord=coord,
        coord_dtype=draw(st.sampled_from(COORD_DTYPES)),
        coord_shape=draw(st.sampled_from([None] * 30 + [[batch, seq, 1], [batch, seq + 1, 2], [seq, 2]])),
        valid=valid,
        valid_dtype=draw(st.sampled_from(VALID_DTYPES)),
        valid_shape=draw(st.sampled_from([None] * 30 + [[batch, seq + 1], [batch]])),
        mask=draw(st.sampled_from(MASKS)),
        drop=draw(st.sampled_from([[]] * 40 + [["patches"], ["patch_coord"], ["patch_valid"]])),
        as_list=draw(st.sampled_from([None] * 40 + ["patches", "patch_coord", "attn_mask"])),
        edits=edits,
    )


def known_bad(case: dict[str, Any]) -> list[str]:
    """What makes a described batch unusable whatever its coordinates (each must end in a refusal)."""
    shape = case["patches_shape"]
    bad = [
        f"patches {case['patches_dtype']}" * (case["patches_dtype"] not in GOOD["patches"]),
        f"coord {case['coord_dtype']}" * (case["coord_dtype"] not in GOOD["coord"]),
        f"valid {case['valid_dtype']}" * (case["valid_dtype"] not in GOOD["valid"]),
        "0 images" * (case["batch"] == 0),
        "no valid patch" * (case["seq"] == 0),
        f"patches {shape}" * (len(shape) == 4 or (len(shape) == 3 and shape[2] != 192)),
        f"patches {shape}" * (len(shape) == 5 and (shape[4] != 3 or not all(1 <= s <= 64 for s in shape[2:4]))),
        f"coord shape {case['coord_shape']}" * bool(case["coord_shape"]),
        f"valid shape {case['valid_shape']}" * bool(case["valid_shape"]),
        f"mask {case['mask']}" * (case["mask"] in ("float64", "wrong-shape")),
        f"drop {case['drop']}" * bool(case["drop"]),
        f"{case['as_list']} as a list" * (case["as_list"] == "patches" or case["as_list"] == "patch_coord"),
        f"{case['as_list']} as a list" * (case["as_list"] == "attn_mask" and case["mask"] is not None),
    ]
    return [reason for reason in bad if reason]


@pytest.fixture(scope="module")
def worker():
    process = LoaderProcess(timeout=TIMEOUT, script=WORKER)
    try:
        assert process.run("limit_memory", "-", headroom=HEADROOM)["outcome"] == "ok"
        yield process
    finally:
        process.close()


def test_naflex_dicts_end_in_logits_of_each_image_alone_or_a_naflex_batch_error(worker):
    CASES[NAME].clear()

    @fuzz_settings(PLAN[NAME])
    @given(naflex_dicts())
    def case(description):
        result = worker.run("naflex", "-", batch=description)
        label = f"{description}: {result}"
        outcome = result["outcome"]
        assert outcome in ("ok", "error"), label  # not a crash, hang, or logits that differ from the image alone
        if outcome == "error":
            assert result["ours"], f"{label}\n{result.get('traceback', '')}"
            assert result["message"].startswith("NaFlex batch '"), label
        bad = known_bad(description)
        if bad:
            assert outcome == "error", f"{bad} accepted: {label}"
        elif not description["edits"]:
            assert outcome == "ok", f"a collated batch refused: {label}"
        CASES[NAME][outcome] += 1

    case()
    assert sum(CASES[NAME].values()) == PLAN[NAME]
    assert CASES[NAME]["ok"] > 0 and CASES[NAME]["error"] > 0
