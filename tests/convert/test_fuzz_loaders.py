"""Property-based fuzzing of every loader: damaged valid files load correctly or raise our one error type.

The checkpoint reader (safetensors, torch.save zip and legacy, .npz stored and compressed), ``config.json``
reading and checking, ``convert`` end to end, and ``pull``'s verification get truncated and byte-edited
copies of valid files. Tensor containers are also built from drawn claims (any storage size, offset,
shape, stride and tensor count, in torch.save zips, single-stream files and safetensors headers) and read
under a memory cap: each loads exactly the logical bytes of its tensors, or is refused. Each must either load (and then what it read is consistent) or raise our
exception type — ``ConversionError`` for checkpoints, ``ModelDirectoryError`` for model directories —
with a message naming the file and the problem. The parsing runs in a child process
(``loader_worker.py``), so an interpreter crash or a hang is caught and reported, not suffered.
Deterministic (``derandomize=True``) and bounded; conftest.py prints the number of cases run.
"""

import argparse
import hashlib
import json
import math
import shutil

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.containers import (
    Storage,
    Tensor,
    expected_tensor,
    safetensors_bytes,
    write_torch_legacy,
    write_torch_zip,
)
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
from timm_vitscratch.gate.checkpoints import MAX_TENSORS

pytestmark = pytest.mark.slow  # property-based fuzzing, in worker processes

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


# --- tensor containers with arbitrary strides, offsets, storage sizes and counts ----------------------------
#: cases per container format (crafted files: what a pickle or a header can claim, not what torch.save writes)
CONTAINER_SURFACES = {
    "torch-zip": "tensor containers, torch-zip (shapes, strides, offsets, storage sizes, counts)",
    "torch-legacy": "tensor containers, torch-legacy (shapes, strides, offsets, storage sizes, counts)",
    "safetensors": "tensor containers, safetensors (shapes, offsets, counts)",
}
CONTAINER_CASES = {c: PLAN[surface] for c, surface in CONTAINER_SURFACES.items()}
CONTAINER_HEADROOM = 384 << 20
CONTAINER_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.uint8]
#: sizes: mostly small, sometimes past every bound (2**48 is the largest a reader takes)
EXTENTS = st.integers(0, 5) | st.sampled_from([-1, 2**31, 2**48, 2**48 + 1, 2**63])
STRIDES = st.integers(0, 7) | st.sampled_from([-1, 2**31, 2**48, 2**62])
OFFSETS = st.integers(0, 6) | st.sampled_from([-1, 2**40, 2**63])


@pytest.fixture(scope="module")
def capped_loader():
    """A loader process whose address space is capped: a reader that believed a claim would fail there."""
    process = LoaderProcess(timeout=120.0)
    assert process.run("limit_memory", "-", headroom=CONTAINER_HEADROOM)["outcome"] == "ok"
    yield process
    process.close()


def contiguous(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


@st.composite
def honest_view(draw, storage):
    """A view that stays inside ``storage`` and stores each element once (contiguous or transposed)."""
    available = len(storage.data) // storage.dtype.itemsize
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    while math.prod(shape) > available:  # drop dimensions until it fits (a size 0 fits any storage)
        shape = shape[1:] if len(shape) > 1 else [0]
    stride = contiguous(shape)
    if len(shape) >= 2 and draw(st.booleans()):  # the last two dimensions swapped: a transposed view
        shape[-2:], stride[-2:] = shape[-2:][::-1], stride[-2:][::-1]
    offset = draw(st.integers(0, available - math.prod(shape)))
    return Tensor(storage, offset, tuple(shape), tuple(stride))


@st.composite
def repeating_view(draw, storage):
    """An honest view with one stride made 0 or smaller than its inner extent (expanded or overlapping),
    inside its storage: what torch.save writes for ``tensor.expand`` and ``as_strided``."""
    view = draw(honest_view(storage))
    stride = list(view.stride)
    if stride:
        at = draw(st.integers(0, len(stride) - 1))
        stride[at] = draw(st.integers(0, max(stride[at] - 1, 0)))
    return Tensor(storage, view.offset, view.shape, tuple(stride))


@st.composite
def hostile_view(draw, storage):
    """Any sizes, strides and offset, from small to past every bound."""
    shape = draw(st.lists(EXTENTS, max_size=3))
    if draw(st.booleans()):
        stride, offset = contiguous([max(s, 0) for s in shape]), draw(st.integers(0, 3))
    else:
        stride, offset = draw(st.lists(STRIDES, min_size=len(shape), max_size=len(shape))), draw(OFFSETS)
    if draw(st.integers(0, 9)) == 0:  # a sizes/strides mismatch
        stride = stride + [1]
    return Tensor(storage, offset, tuple(shape), tuple(stride))


@st.composite
def torch_containers(draw):
    """(object to save, description): tensors viewing a few storages, each view honest or drawn freely."""
    storages = []
    for key in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from(CONTAINER_DTYPES))
        numel = draw(st.integers(0, 24))
        values = torch.arange(numel, dtype=torch.float64).mul_(0.5).sub_(3).to(dtype)
        storage = Storage.honest(str(key), values)
        lie = draw(st.integers(0, 15))
        if lie == 0:  # the pickle claims another element count than the file stores
            storage.numel = draw(st.integers(0, 30) | st.sampled_from([2**31, 2**40, 2**60]))
        elif lie == 1:  # the single-stream format's count before the data says another
            storage.count = draw(st.integers(0, 30) | st.sampled_from([-1, 2**40]))
        storages.append(storage)
    if draw(st.integers(0, 24)) == 0:  # one past the tensor count
        return [Tensor(storages[0], 0, (0,), (1,))] * (MAX_TENSORS + 1), f"{MAX_TENSORS + 1} empty tensors"
    tensors = {}
    for i in range(draw(st.integers(1, 5))):
        storage = draw(st.sampled_from(storages))
        kind = draw(st.integers(0, 9))
        view = hostile_view if kind < 3 else repeating_view if kind < 5 else honest_view
        tensors[f"t{i}"] = draw(view(storage))
    if len(tensors) > 1 and draw(st.integers(0, 4)) == 0:
        tensors["tied"] = tensors["t0"]  # one tensor under two names
    obj = {"state_dict": tensors, "epoch": 1} if draw(st.booleans()) else tensors
    description = "; ".join(
        f"{n}: {t.storage.key}({t.storage.dtype}, numel {t.storage.numel}, stored {len(t.storage.data)} B, "
        f"count {t.storage.count}) offset {t.offset} shape {t.shape} stride {t.stride}"
        for n, t in tensors.items()
    )
    return obj, description


def expected_values(tensors):
    """What a reader must return for each accepted tensor: its logical bytes, each element stored once."""
    values = {}
    for name, tensor in tensors.items():
        expected = expected_tensor(tensor)  # raises if the view leaves the stored bytes
        index = torch.arange(len(tensor.storage.data) // tensor.storage.dtype.itemsize)
        touched = torch.as_strided(index, tuple(tensor.shape), tuple(tensor.stride), tensor.offset)
        assert touched.unique().numel() == touched.numel(), f"{name}: accepted a view that repeats stored elements"
        data = expected.reshape(-1).view(torch.uint8).numpy().tobytes() if expected.numel() else b""
        values[name] = [list(expected.shape), str(expected.dtype), hashlib.sha256(data).hexdigest()]
    return values


@pytest.mark.parametrize("container", ["torch-zip", "torch-legacy"])
def test_torch_files_with_any_views_load_exactly_their_logical_bytes_or_are_refused(container, capped_loader, tmp_path):
    name = CONTAINER_SURFACES[container]
    write = write_torch_zip if container == "torch-zip" else write_torch_legacy
    target = tmp_path / "crafted.pth"
    CASES[name].clear()

    @fuzz_settings(CONTAINER_CASES[container])
    @given(torch_containers())
    def case(drawn):
        obj, description = drawn
        write(target, obj)
        result = capped_loader.run("checkpoint_values", target)
        outcome = check_outcome(result, str(target), description)
        if outcome == "ok":
            tensors = obj["state_dict"] if "state_dict" in obj else obj
            assert result["values"] == expected_values(tensors), description
        CASES[name][outcome] += 1

    case()
    assert sum(CASES[name].values()) == CONTAINER_CASES[container] and set(CASES[name]) == {"ok", "error"}


SAFETENSORS_DTYPE_NAMES = ["F32", "F16", "BF16", "F64", "I64", "U8", "C64", "F8_E4M3", "Q8"]


@st.composite
def safetensors_files(draw):
    """(file bytes, {name: (shape, dtype name, data bytes)} as laid out, description)."""
    if draw(st.integers(0, 24)) == 0:  # one past the tensor count
        entry = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
        header = {f"t{i}": entry for i in range(MAX_TENSORS + 1)}
        return safetensors_bytes(header), {}, f"{MAX_TENSORS + 1} empty tensors"
    header, layout, data = {}, {}, b""
    for i in range(draw(st.integers(0, 5))):
        honest = draw(st.integers(0, 3)) > 0
        dtype = draw(st.sampled_from(SAFETENSORS_DTYPE_NAMES[:6] if honest else SAFETENSORS_DTYPE_NAMES))
        shape = draw(st.lists(st.integers(0, 4) if honest else EXTENTS, max_size=3))
        size = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8, "I64": 8, "C64": 8}.get(dtype, 1)
        nbytes = math.prod(max(s, 0) for s in shape) * size
        if nbytes > 4096:  # honest data stays small; the claim is kept, the bytes are not there
            nbytes = 0
        chunk = bytes((len(data) + j) % 251 for j in range(nbytes))
        offsets = [len(data), len(data) + nbytes]
        lie = 9 if honest else draw(st.integers(0, 2))
        if lie == 0:
            offsets = [draw(OFFSETS), draw(OFFSETS)]
        elif lie == 1:
            offsets = [offsets[0] + draw(st.sampled_from([-2, -1, 1, 3])), offsets[1]]
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": offsets}
        layout[f"t{i}"] = (shape, dtype, chunk)
        data += chunk
    cut = draw(st.integers(0, 15))
    if cut == 0 and data:  # trailing or missing bytes
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif cut == 1:
        data += b"\x00" * draw(st.integers(1, 9))
    header_length = draw(st.sampled_from([2**62, 100_000_000])) if draw(st.integers(0, 19)) == 0 else None
    content = safetensors_bytes(header, data, header_length)
    return content, layout, f"header {json.dumps(header)[:400]}; {len(data)} data bytes; length {header_length}"


def test_safetensors_with_any_header_load_exactly_their_bytes_or_are_refused(capped_loader, tmp_path):
    name = CONTAINER_SURFACES["safetensors"]
    target = tmp_path / "crafted.safetensors"
    CASES[name].clear()
    dtypes = {"F32": "torch.float32", "F16": "torch.float16", "BF16": "torch.bfloat16", "F64": "torch.float64"}
    dtypes.update({"I64": "torch.int64", "U8": "torch.uint8"})

    @fuzz_settings(CONTAINER_CASES["safetensors"])
    @given(safetensors_files())
    def case(drawn):
        content, layout, description = drawn
        target.write_bytes(content)
        result = capped_loader.run("checkpoint_values", target)
        outcome = check_outcome(result, str(target), description)
        if outcome == "ok":
            expected = {
                n: [shape, dtypes[dtype], hashlib.sha256(chunk).hexdigest()]
                for n, (shape, dtype, chunk) in layout.items()
            }
            assert result["values"] == expected, description
        CASES[name][outcome] += 1

    case()
    assert sum(CASES[name].values()) == CONTAINER_CASES["safetensors"] and set(CASES[name]) == {"ok", "error"}


# --- the authors' own state dicts (Meta DINOv3, Meta PE, BAAI EVA02): wrong ranks, mismatched widths -----------
def original_state_dict(source: str) -> dict[str, torch.Tensor]:
    """A tiny valid file of each original layout, as its authors' code saves it."""
    from tests.convert.test_dinov3_sources import meta_state_dict, timm_dinov3
    from tests.support.eva_originals import EVA02_SIZE, PE_SIZE, baai_eva_state_dict, meta_pe_state_dict, timm_model

    if source == "meta_dinov3":
        return meta_state_dict(timm_dinov3("vit_small_patch16_dinov3_qkvb", embed_dim=64, num_heads=4))
    if source == "meta_pe":
        return meta_pe_state_dict(timm_model("vit_pe_core_tiny_patch16_384", **PE_SIZE))
    return baai_eva_state_dict(timm_model("eva02_tiny_patch14_224", **EVA02_SIZE, num_classes=10))


#: how one tensor is reshaped: a rank lost or gained, one width changed, transposed, emptied, another dtype
RESHAPES = ("flatten", "unsqueeze", "grow", "shrink", "double", "transpose", "empty", "scalar", "int", "drop")


def reshaped(tensor: torch.Tensor, how: str, dim: int) -> torch.Tensor | None:
    dim = dim % max(tensor.dim(), 1)
    if how == "flatten":
        return tensor.flatten()
    if how == "unsqueeze":
        return tensor.unsqueeze(0)
    if how in ("grow", "shrink", "double") and tensor.dim():
        size = {"grow": tensor.shape[dim] + 1, "shrink": max(tensor.shape[dim] - 1, 0), "double": 2 * tensor.shape[dim]}
        shape = list(tensor.shape)
        shape[dim] = size[how]
        return torch.zeros(shape, dtype=tensor.dtype) + 0.01
    if how == "transpose" and tensor.dim() >= 2:
        return tensor.transpose(0, -1).contiguous()
    if how == "empty":
        return torch.zeros(0, dtype=tensor.dtype)
    if how == "scalar":
        return torch.tensor(1.0)
    if how == "int":
        return tensor.to(torch.int64)
    return None  # drop (or a reshape the tensor's rank does not allow: dropped too)


@pytest.mark.parametrize("source", ["meta_dinov3", "meta_pe", "baai_eva"])
def test_original_state_dict_shapes_convert_or_raise_conversion_error(source, loader, tmp_path):
    """Each case reshapes one or two tensors of a valid original file: converted and verified (the directory then
    checks out), or refused in one ConversionError naming the file, never a traceback."""
    name = f"state-dict shapes, {source} (convert --verify)"
    state = original_state_dict(source)
    keys = sorted(state)
    path, out = tmp_path / f"{source}.pth", tmp_path / "out"
    torch.save(state, path)
    assert loader.run("convert", path, out=str(out), verify=True)["outcome"] == "ok"
    edit = st.tuples(st.sampled_from(keys), st.sampled_from(RESHAPES), st.integers(0, 3))

    @fuzz_settings(PLAN[name])
    @given(st.lists(edit, min_size=1, max_size=2))
    def case(edits):
        edited = dict(state)
        for key, how, dim in edits:
            if key in edited:
                tensor = reshaped(edited[key], how, dim)
                if tensor is None:
                    del edited[key]
                else:
                    edited[key] = tensor
        torch.save(edited, path)
        result = loader.run("convert", path, out=str(out), verify=True)
        CASES[name][check_outcome(result, str(path), repr(edits))] += 1

    CASES[name].clear()
    case()
    assert sum(CASES[name].values()) == PLAN[name]
    assert CASES[name]["error"] > 0


@pytest.mark.parametrize("source", ["meta_dinov3", "meta_pe", "baai_eva"])
@pytest.mark.parametrize("how", ["scalar", "flatten", "unsqueeze"])
def test_a_stem_or_token_of_another_rank_is_our_error(source, how, loader, tmp_path):
    """Found by the fuzz above: EVA02's options read the stem's width from a scalar (IndexError)."""
    state = original_state_dict(source)
    path = tmp_path / f"{source}.pth"
    ends = ("patch_embed.proj.weight", "conv1.weight", "pos_embed", "cls_token", "storage_tokens", "class_embedding")
    for key in [k for k in state if k.endswith(ends) and reshaped(state[k], how, 0).shape != state[k].shape]:
        torch.save({**state, key: reshaped(state[key], how, 0)}, path)
        result = loader.run("convert", path, out=str(tmp_path / "out"), verify=True)
        assert check_outcome(result, str(path), f"{key} {how}") == "error", key
