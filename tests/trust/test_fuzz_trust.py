"""Fuzzing the trust surfaces: hostile config values and keys, train.py args, weight dtypes and special
floats, and symlinks / special files in model directories.

Every case runs in the crash-isolated loader process (``tests/support/loader_worker.py``), capped in
memory (its address space may grow by at most ``HEADROOM``) and in time (``TIMEOUT`` per case), with
``HF_HUB_OFFLINE=1``: a case that crashes, hangs, allocates past the cap or reaches for the network is
reported, not suffered. Each must load consistently or end in our error type naming the file; nothing
is written but the output asked for. Counts come from ``tests/support/fuzz_plan.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from tests.support import TINY, tiny
from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, check_outcome, fuzz_settings, offline_loader
from tests.support.hub_fixtures import model_dir
from timm_vitscratch.files import sha256_file
from timm_vitscratch.models.model_args import OPTIONS

pytestmark = pytest.mark.slow  # fuzz cases in crash-isolated child processes

HEADROOM = 1 << 30
TIMEOUT = 120.0
#: timm parses a few config fields itself, before any plugin code runs (its _parse_model_cfg); its own
#: TypeError there is the one error of another type a hostile config can get on timm's local-dir: route
TIMM_PARSE = ("timm/models/_hub.py", "timm/models/_factory.py")
CREATE_MODEL_KEYS = (
    "pretrained",
    "pretrained_cfg",
    "pretrained_cfg_overlay",
    "checkpoint_path",
    "cache_dir",
    "features_only",
    "device",
    "dtype",
    "scriptable",
    "exportable",
    "out_indices",
)
NUMBERS = st.sampled_from(
    [
        0,
        1,
        -1,
        2,
        3,
        4,
        8,
        16,
        32,
        64,
        65,
        10**9,
        2**63,
        0.5,
        1e-6,
        -0.0,
        float("nan"),
        float("inf"),
        -float("inf"),
        1e308,
        4096,
        4097,
        16384,
    ]
)
LEAVES = (
    st.none()
    | st.booleans()
    | NUMBERS
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=10)
    | st.sampled_from(["token", "avg", "map", "learn", "sincos", "gelu", "quick_gelu", "layernorm", "sdpa"])
)
VALUES = st.recursive(
    LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6
)
KEYS = st.sampled_from(list(OPTIONS) + list(CREATE_MODEL_KEYS)) | st.text(max_size=12)


@pytest.fixture(scope="module")
def loader():
    with offline_loader(TIMEOUT, HEADROOM) as process:
        yield process


def outcome_of(result, names, description, timm_route=False):
    """ok, error (ours, naming ``names``), or timm's own parse error on its local-dir: route."""
    if timm_route and result["outcome"] == "error" and not result["ours"]:
        last = [line for line in result["traceback"].splitlines() if line.strip().startswith("File ")][-1]
        assert any(part in last for part in TIMM_PARSE), (
            f"{description}: escaped {result['type']}\n{result['traceback']}"
        )
        return "timm's parse error"
    return check_outcome(result, names, description)


def run_cases(name, cases, strategy, check):
    CASES[name].clear()

    @fuzz_settings(cases)
    @given(strategy)
    def case(value):
        for outcome in check(value):
            CASES[name][outcome] += 1

    case()
    assert sum(CASES[name].values()) >= cases  # each case counts once per route it runs through


def test_model_args_values_and_keys(loader, tmp_path):
    directory = model_dir(tmp_path / "model", tiny())
    config_path = directory / "config.json"
    original = json.loads(config_path.read_text())
    out = tmp_path / "out"
    name = "model_args values and keys (check, local-dir:, convert)"

    def check(edits):
        config = json.loads(json.dumps(original))
        for key, value in edits:
            if key == "num_classes" and value is not None and len(edits) == 1:
                config["num_classes"] = value  # the top-level field timm reads
            config["model_args"][key] = value
        try:
            config_path.write_text(json.dumps(config, allow_nan=True))
        except ValueError:  # a value JSON cannot hold: nothing to write
            return ["unwritable"]
        results = [
            outcome_of(loader.run("check_model_directory", directory), str(directory), repr(edits)),
            outcome_of(loader.run("timm_local_dir", directory), "config.json", repr(edits), timm_route=True),
            outcome_of(loader.run("convert", directory, out=str(out)), str(directory), repr(edits)),
        ]
        hostile = {k for k, _ in edits} & set(CREATE_MODEL_KEYS)
        if hostile:
            assert results[0] == "error" and results[1] != "ok", f"{edits}: {hostile} accepted"
        assert set(os.listdir(tmp_path)) <= {"model", "out"}, f"{edits}: wrote {os.listdir(tmp_path)}"
        return results

    # hostile edits, mixed with edits a valid config may make (so both outcomes are always exercised)
    benign = st.sampled_from(
        [
            ("qkv_bias", True),
            ("drop_rate", 0.1),
            ("global_pool", "token"),
            ("depth", 2),
            ("act_layer", "gelu"),
            ("norm_eps", 1e-6),
            ("drop_path_rate", 0.0),
        ]
    )
    run_cases(name, PLAN[name], st.lists(benign | st.tuples(KEYS, VALUES), min_size=1, max_size=3), check)
    assert CASES[name]["ok"] > 0 and CASES[name]["error"] > 0


def test_train_args_model_kwargs(loader, tmp_path):
    state = tiny().state_dict()
    path, out = tmp_path / "c.pth", tmp_path / "out"
    name = "train.py model_kwargs (convert)"

    def check(kwargs):
        torch.save(
            {
                "state_dict": state,
                "args": argparse.Namespace(
                    model="scratch_vit_ti16",
                    model_kwargs={**{k: v for k, v in TINY.items() if k != "img_size"}, **kwargs},
                ),
            },
            path,
        )
        result = outcome_of(loader.run("convert", path, out=str(out)), str(path), repr(kwargs))
        if set(kwargs) & set(CREATE_MODEL_KEYS):
            assert result == "error", f"{kwargs} accepted"
        return [result]

    run_cases(name, PLAN[name], st.dictionaries(KEYS, VALUES, max_size=3), check)
    assert CASES[name]["error"] > 0


FLOAT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
OTHER = (torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64)
SPECIAL = (float("nan"), float("inf"), -float("inf"), 1e-45, 6e4, 1e38)


def test_weight_dtypes_and_special_floats(loader, tmp_path):
    base = model_dir(tmp_path / "model", tiny())
    config = json.loads((base / "config.json").read_text())
    keys = list(tiny().state_dict())
    name = "safetensors dtypes and special floats (check, local-dir:, convert)"
    strategy = st.tuples(
        st.lists(st.tuples(st.sampled_from(keys), st.sampled_from(FLOAT + OTHER)), max_size=3),
        st.lists(st.tuples(st.sampled_from(keys), st.sampled_from(SPECIAL)), max_size=2),
    )

    def check(edit):
        dtypes, specials = edit
        state = tiny().state_dict()
        for key, value in specials:
            state[key].view(-1)[0] = value
        for key, dtype in dtypes:
            state[key] = state[key].to(dtype)
        save_file({k: v.contiguous() for k, v in state.items()}, str(base / "model.safetensors"))
        config["vitscratch"]["sha256"] = sha256_file(base / "model.safetensors")
        (base / "config.json").write_text(json.dumps(config))
        floats = all(v.is_floating_point() for v in state.values())
        finite = floats and all(bool(v.float().isfinite().all()) for v in state.values())
        strict = outcome_of(loader.run("check_model_directory", base, strict=True), str(base), repr(edit))
        assert strict == ("ok" if finite else "error"), f"{edit}: strict check said {strict}"
        by_timm = loader.run("timm_local_dir", base)
        timm_outcome = outcome_of(by_timm, "", repr(edit), timm_route=True)
        assert (timm_outcome == "ok") == floats, f"{edit}: local-dir: {by_timm}"
        if timm_outcome == "ok":
            assert by_timm["dtypes"] == ["torch.float32"], f"{edit}: the model's parameters are {by_timm['dtypes']}"
        converted = outcome_of(
            loader.run("convert", base / "model.safetensors", out=str(tmp_path / "out")),
            "model.safetensors",
            repr(edit),
        )
        assert converted == "error" or floats, f"{edit}: non-float weights converted"
        return [strict, timm_outcome, converted]

    run_cases(name, PLAN[name], strategy, check)
    assert CASES[name]["ok"] > 0 and CASES[name]["error"] > 0


def special_entries(tmp_path):
    """(file name, how to make it) for every kind of entry a hostile directory can hold."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)

    def move_out(d, f):  # the real file, reached through a symlink that leaves the directory
        os.replace(d / f, outside / f)
        os.symlink(outside / f, d / f)

    def link_inside(d, f):
        os.replace(d / f, d / f"real-{f}")
        os.symlink(d / f"real-{f}", d / f)

    def dangling(d, f):
        os.unlink(d / f)
        os.symlink(d / "nowhere", d / f)

    def fifo(d, f):
        os.unlink(d / f)
        os.mkfifo(d / f)

    def directory(d, f):
        os.unlink(d / f)
        (d / f).mkdir()

    def device(d, f):
        os.unlink(d / f)
        os.symlink("/dev/zero", d / f)

    def hardlink(d, f):
        shutil.copyfile(d / f, outside / f"hard-{f}")
        os.unlink(d / f)
        os.link(outside / f"hard-{f}", d / f)

    def loop(d, f):
        os.unlink(d / f)
        os.symlink(d / f, d / f)

    kinds = {
        "symlink out": move_out,
        "symlink inside": link_inside,
        "dangling symlink": dangling,
        "FIFO": fifo,
        "directory": directory,
        "/dev/zero": device,
        "hard link": hardlink,
        "symlink loop": loop,
    }
    return [
        (f, kind, make)
        for f in ("config.json", "model.safetensors", "preprocessor_config.json")
        for kind, make in kinds.items()
    ][: PLAN["symlinks and special files in a model directory"]]


def test_symlinks_and_special_files_in_a_model_directory(loader, tmp_path):
    name = "symlinks and special files in a model directory"
    CASES[name].clear()
    for index, (file, kind, make) in enumerate(special_entries(tmp_path)):
        d = model_dir(tmp_path / f"m{index}", tiny())
        if file == "preprocessor_config.json":
            (d / file).write_text("{}")
        make(d, file)
        label = f"{file} as {kind}"
        checked = outcome_of(loader.run("check_model_directory", d), str(d), label)
        converted = outcome_of(loader.run("convert", d, out=str(tmp_path / f"out{index}")), file, label)
        safe = kind in ("symlink inside", "hard link") or (file == "preprocessor_config.json" and checked == "ok")
        if not safe:
            assert checked == "error" and converted == "error", f"{label}: check {checked}, convert {converted}"
        CASES[name][checked] += 1
    assert sum(CASES[name].values()) == PLAN[name]
