"""Property-based fuzzing of every loader: damaged valid files load correctly or raise our one error type.

The checkpoint reader (safetensors, torch.save zip and legacy, .npz stored and compressed), ``config.json``
reading and checking, ``convert`` end to end, and ``pull``'s verification get truncated and byte-edited
copies of valid files. Each must either load (and then what it read is consistent) or raise our
exception type — ``ConversionError`` for checkpoints, ``ModelDirectoryError`` for model directories —
with a message naming the file and the problem. The parsing runs in a child process
(``loader_worker.py``), so an interpreter crash or a hang is caught and reported, not suffered.
Deterministic (``derandomize=True``) and bounded; conftest.py prints the number of cases run.
"""

import argparse
import json
import shutil

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import (
    CASES,
    LoaderProcess,
    check_outcome,
    damaged,
    fuzz_settings,
    safetensors_structure,
    whole,
    zip_structure,
)
from tests.support.hub_fixtures import model_dir, repo_for, upload_raw
from tests.support.sources import google_npz, timm_vit
from timm_vitscratch import hub
from timm_vitscratch.errors import ModelDirectoryError
from timm_vitscratch.files import sha256_file

#: cases per test, from the one table (kept small enough for CI: about a minute for the whole file)
READER_CASES = {
    c: PLAN[f"checkpoint reader, {c}"] for c in ("safetensors", "torch-zip", "torch-legacy", "npz", "npz-compressed")
}
CONFIG_CASES = PLAN["config.json bytes (read_config + check_model_directory)"]
CONFIG_FIELD_CASES = PLAN["config.json fields of any type (check_model_directory)"]
WEIGHTS_CASES = PLAN["model.safetensors bytes (check_model_directory)"]
CONVERT_CASES = {k: PLAN[f"convert, {k}"] for k in ("safetensors", "torch-zip", "jax-npz")}
PULL_CASES = PLAN["pull, damaged config.json"] + PLAN["pull, damaged model.safetensors"]


@pytest.fixture(scope="module")
def loader():
    process = LoaderProcess(timeout=120.0)
    yield process
    process.close()


def fuzz(name: str, data: bytes, structure, cases: int, check) -> None:
    """Run ``check(damaged_bytes, description)`` on ``cases`` damaged copies of ``data``."""

    @fuzz_settings(cases)
    @given(damaged(data, structure))
    def case(damage):
        CASES[name][check(damage.content, damage.description)] += 1

    CASES[name].clear()
    case()
    assert sum(CASES[name].values()) == cases


def small_state_dict():
    g = torch.Generator().manual_seed(0)
    return {
        "module.blocks.0.attn.qkv.weight": torch.randn(6, 4, generator=g),
        "module.blocks.0.attn.qkv.bias": torch.randn(6, generator=g).half(),
        "module.cls_token": torch.randn(1, 1, 4, generator=g),
        "module.head.bias": torch.arange(3, dtype=torch.int64),
    }


def reader_source(container: str, tmp_path):
    """A small valid file of ``container`` and where its structure lies."""
    sd = small_state_dict()
    path = tmp_path / f"source-{container}"
    if container == "safetensors":
        save_file(sd, str(path))
        return path, safetensors_structure(path.read_bytes())
    if container.startswith("npz"):
        arrays = {k: v.numpy() for k, v in sd.items()}
        with open(path, "wb") as handle:
            (np.savez_compressed if container == "npz-compressed" else np.savez)(handle, **arrays)
        return path, zip_structure(path)
    # a train.py-style checkpoint: the state dict under "state_dict", an epoch and train.py's Namespace
    checkpoint = {"state_dict": sd, "epoch": 3, "args": argparse.Namespace(model="scratch_vit_ti16")}
    torch.save(checkpoint, path, _use_new_zipfile_serialization=container == "torch-zip")
    data = path.read_bytes()
    return path, zip_structure(path) if container == "torch-zip" else whole(data)


@pytest.mark.parametrize("container", list(READER_CASES))
def test_damaged_checkpoints_load_or_raise_conversion_error(container, loader, tmp_path):
    source, structure = reader_source(container, tmp_path)
    assert loader.run("checkpoint", source) == {"outcome": "ok", "tensors": 4}
    target = tmp_path / f"damaged-{container}"

    def check(content, description):
        target.write_bytes(content)
        return check_outcome(loader.run("checkpoint", target), str(target), description)

    fuzz(f"checkpoint reader, {container}", source.read_bytes(), structure, READER_CASES[container], check)
    assert CASES[f"checkpoint reader, {container}"]["error"] > 0


def test_damaged_config_json_reads_and_checks_or_raise_model_directory_error(loader, tmp_path):
    directory = model_dir(tmp_path / "model", tiny())
    config = directory / "config.json"
    original = config.read_bytes()
    assert loader.run("check_model_directory", directory)["outcome"] == "ok"

    def check(content, description):
        config.write_bytes(content)
        read = check_outcome(loader.run("read_config", directory), str(config), description)
        checked = check_outcome(loader.run("check_model_directory", directory), str(directory), description)
        if read == "error":
            assert checked == "error", description
        return checked

    name = "config.json bytes (read_config + check_model_directory)"
    fuzz(name, original, whole(original), CONFIG_CASES, check)
    assert set(CASES[name]) == {"ok", "error"}


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(-3, 2**31)
    | st.floats()
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def json_paths(value, prefix=()):
    """Every key path into the nested objects of a JSON value."""
    for key, child in value.items():
        yield prefix + (key,)
        if isinstance(child, dict):
            yield from json_paths(child, prefix + (key,))


def test_config_fields_of_any_type_or_size_are_checked_before_building(loader, tmp_path):
    """Valid JSON, hostile values: any field replaced (a string depth, a billion blocks, NaN ...) or removed."""
    directory = model_dir(tmp_path / "model", tiny())
    config_path = directory / "config.json"
    original = json.loads(config_path.read_text())
    paths = list(json_paths(original))
    name = "config.json fields of any type (check_model_directory)"
    CASES[name].clear()

    @fuzz_settings(CONFIG_FIELD_CASES)
    @given(st.lists(st.tuples(st.sampled_from(paths), st.none() | JSON_VALUES), min_size=1, max_size=3))
    def case(edits):
        config = json.loads(json.dumps(original))
        for path, value in edits:
            parent = config
            for key in path[:-1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                if value is None:
                    parent.pop(path[-1], None)
                else:
                    parent[path[-1]] = value
        config_path.write_text(json.dumps(config))
        CASES[name][check_outcome(loader.run("check_model_directory", directory), str(directory), repr(edits))] += 1

    case()
    assert sum(CASES[name].values()) == CONFIG_FIELD_CASES and set(CASES[name]) == {"ok", "error"}


def test_damaged_weights_never_pass_check_model_directory(loader, tmp_path):
    directory = model_dir(tmp_path / "model", tiny())
    weights = directory / "model.safetensors"
    original = weights.read_bytes()

    def check(content, description):
        weights.write_bytes(content)
        outcome = check_outcome(loader.run("check_model_directory", directory), str(directory), description)
        assert outcome == "error", f"{description}: damaged weights passed the check"
        return outcome

    fuzz(
        "model.safetensors bytes (check_model_directory)",
        original,
        safetensors_structure(original),
        WEIGHTS_CASES,
        check,
    )


def convert_source(kind: str, tmp_path):
    """A ViT-Ti/16 source checkpoint in half precision (every supported variant is at least this big)."""
    model = timm_vit()
    state = {k: v.half() for k, v in model.state_dict().items()}
    if kind == "safetensors":
        path = tmp_path / "vit.safetensors"
        save_file(state, str(path))
        return path, safetensors_structure(path.read_bytes())
    if kind == "torch-zip":
        path = tmp_path / "vit.pth"
        torch.save({"model": state}, path)
        return path, zip_structure(path)
    path = google_npz(model.half(), tmp_path / "vit.npz")
    return path, zip_structure(path, member_prefix=200)


@pytest.mark.parametrize("kind", list(CONVERT_CASES))
def test_damaged_sources_convert_or_raise_conversion_error(kind, loader, tmp_path):
    source, structure = convert_source(kind, tmp_path)
    out = tmp_path / "out"
    assert loader.run("convert", source, out=str(out))["outcome"] == "ok"
    target = tmp_path / f"damaged{source.suffix}"

    def check(content, description):
        target.write_bytes(content)
        return check_outcome(loader.run("convert", target, out=str(out)), str(target), description)

    fuzz(f"convert, {kind}", source.read_bytes(), structure, CONVERT_CASES[kind], check)
    assert CASES[f"convert, {kind}"]["error"] > 0


def test_pull_installs_only_verified_files_from_a_repo_of_damaged_files(hub_env, tmp_path, request):
    """End to end through the local Hub: a repo whose config.json or model.safetensors is damaged."""
    repo = repo_for(request)
    source = model_dir(tmp_path / "src", tiny())
    sha256 = sha256_file(source / "model.safetensors")
    staging = tmp_path / "upload"
    count = [0]

    def check(content, description, name):
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(source, staging)
        (staging / name).write_bytes(content)
        upload_raw(staging, repo)
        count[0] += 1
        out = tmp_path / f"out{count[0]}"
        try:
            hub.pull(repo, out)
        except ModelDirectoryError as err:
            assert str(err).startswith(f"{repo}@main: "), f"{description}: {err}"
            assert not out.exists(), description
            return "error"
        assert sha256_file(out / "model.safetensors") == sha256, f"{description}: installed other weights"
        hub.check_model_directory(out)
        return "ok"

    weights = (source / "model.safetensors").read_bytes()
    config = (source / "config.json").read_bytes()
    half = PULL_CASES // 2
    fuzz("pull, damaged config.json", config, whole(config), half, lambda c, d: check(c, d, "config.json"))
    fuzz(
        "pull, damaged model.safetensors",
        weights,
        safetensors_structure(weights),
        PULL_CASES - half,
        lambda c, d: check(c, d, "model.safetensors"),
    )
    assert set(CASES["pull, damaged model.safetensors"]) == {"error"}
