"""How many cases each fuzzed surface runs: one table, read by the fuzz tests (which assert that exactly
this many ran) and printed for docs/guarantees.md by ``python -m tests.support.fuzz_plan``.

``make test`` runs a quarter of each drawn surface's cases (at least 8: the first ones hypothesis draws, the
same every run); the full sweep (``VITSCRATCH_FULL_SWEEP=1``, as CI runs) runs them all. An exhaustive list
always runs whole.
"""

from __future__ import annotations

from tests.support.sweep import FULL_SWEEP

#: surface -> cases per run of the full sweep (deterministic: hypothesis with derandomize=True, or an
#: exhaustive list)
FULL_PLAN = {
    # damaged bytes (tests/convert/test_fuzz_loaders.py)
    "checkpoint reader, safetensors": 150,
    "checkpoint reader, torch-zip": 150,
    "checkpoint reader, torch-legacy": 120,
    "checkpoint reader, npz": 100,
    "checkpoint reader, npz-compressed": 80,
    "config.json bytes (read_config + check_model_directory)": 150,
    "config.json fields of any type (check_model_directory)": 150,
    "model.safetensors bytes (check_model_directory)": 40,
    "convert, safetensors": 20,
    "convert, torch-zip": 20,
    "convert, jax-npz": 16,
    "state-dict shapes, meta_dinov3 (convert --verify)": 16,
    "state-dict shapes, meta_pe (convert --verify)": 16,
    "state-dict shapes, baai_eva (convert --verify)": 16,
    "pull, damaged config.json": 8,
    "pull, damaged model.safetensors": 8,
    # drawn claims, read under a memory cap (tests/convert/test_fuzz_loaders.py)
    "tensor containers, torch-zip (shapes, strides, offsets, storage sizes, counts)": 200,
    "tensor containers, torch-legacy (shapes, strides, offsets, storage sizes, counts)": 120,
    "tensor containers, safetensors (shapes, offsets, counts)": 200,
    # hostile values (tests/trust/test_fuzz_trust.py)
    "model_args values and keys (check, local-dir:, convert)": 120,
    "train.py model_kwargs (convert)": 60,
    "safetensors dtypes and special floats (check, local-dir:, convert)": 60,
    "symlinks and special files in a model directory": 24,
    # hostile NaFlex batches through the model's forward (tests/trust/test_fuzz_naflex.py)
    "NaFlex dicts (model forward)": 150,
    # a local Hub that lies in its answers to a pull (tests/hub/test_fuzz_hostile_hub.py)
    "pull from a hostile Hub (headers, sizes, commit ids, file lists, slow bodies)": 100,
    # model-card fields (tests/trust/test_fuzz_model_card.py)
    "model-card fields (check_model_directory + model_card)": 100,
    # pictures for `vitscratch attention` (tests/inspect/test_fuzz_pictures.py)
    "picture reader, png": 60,
    "picture reader, jpeg": 40,
    "picture reader, gif": 20,
    # transformers config.json fields against the weights and the bounds (tests/convert/test_fuzz_transformers_config.py)
    "transformers config.json fields (convert --verify)": 40,
    "transformers config.json fields, dinov3 (convert --verify)": 16,
    "transformers config.json fields, dinov2 (convert --verify)": 16,
    "transformers config.json fields, siglip (convert --verify)": 16,
    "transformers config.json fields, siglip2 (convert --verify)": 16,
    # every combination of two writers (tests/hub/test_concurrent_writers.py, exhaustive)
    "concurrent writers of one target (convert, pull, export)": 30,
}
#: the surfaces whose cases are an exhaustive list, not draws: run whole every time
EXHAUSTIVE = frozenset(
    {"symlinks and special files in a model directory", "concurrent writers of one target (convert, pull, export)"}
)
#: the share of a drawn surface's cases ``make test`` runs, and the fewest it runs
DEFAULT_SHARE, DEFAULT_MIN = 4, 8


#: surfaces ``make test`` runs whole all the same: cheap (a few seconds), and their first cases do not reach both
#: outcomes (the few that load come late)
WHOLE_BY_DEFAULT = frozenset({"config.json bytes (read_config + check_model_directory)"})


def default_cases(surface: str) -> int:
    """The cases ``make test`` runs of ``surface`` without the full sweep."""
    full = FULL_PLAN[surface]
    if surface in EXHAUSTIVE or surface in WHOLE_BY_DEFAULT:
        return full
    return min(full, max(DEFAULT_MIN, full // DEFAULT_SHARE))


#: surface -> the cases this run runs
PLAN = dict(FULL_PLAN) if FULL_SWEEP else {surface: default_cases(surface) for surface in FULL_PLAN}


def table() -> str:
    rows = ["| surface | cases, make test | cases, full sweep (CI) |", "|---|---|---|"]
    rows += [f"| {surface} | {default_cases(surface)} | {cases} |" for surface, cases in FULL_PLAN.items()]
    total = sum(default_cases(surface) for surface in FULL_PLAN)
    rows.append(f"| **total** | **{total}** | **{sum(FULL_PLAN.values())}** |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
