"""The gate's checkpoint readers (``timm_vitscratch/gate``): what a container may claim is checked before data
is read or a native parser runs, and each refusal says which bound and what was expected.

Small crafted files (``tests/support/containers.py`` writes what a file can say, not only what torch.save
writes), read in this process: the bounds that need a memory cap to show are in test_resource_bounds.py.
"""

import pickle
import struct
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from tests.support.containers import (
    Storage,
    Tensor,
    expected_tensor,
    pickled,
    safetensors_bytes,
    write_torch_legacy,
    write_torch_zip,
)
from timm_vitscratch.errors import ConversionError
from timm_vitscratch.gate import checkpoints, json_data, torch_pickle, zip_archive
from timm_vitscratch.gate.safetensors_data import MAX_HEADER_BYTES
from timm_vitscratch.layouts import open_checkpoint

pytestmark = pytest.mark.slow  # crafted checkpoints through every reader

WRITERS = {"zip": write_torch_zip, "single-stream": write_torch_legacy}


def read_all(path):
    with open_checkpoint(path) as checkpoint:
        return {key: checkpoint.tensor(key).clone() for key in checkpoint.keys()}


def refused(path, *words):
    with pytest.raises(ConversionError) as err:
        read_all(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert all(word in message for word in words), message
    return message


# --- views: logical bytes, strides, offsets ---------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(WRITERS))
def test_views_that_store_each_element_once_read_exactly(fmt, tmp_path):
    storage = Storage.honest("0", torch.arange(24, dtype=torch.float32))
    tensors = {
        "whole": Tensor(storage, 0, (4, 6), (6, 1)),
        "transposed": Tensor(storage, 0, (6, 4), (1, 6)),
        "slice": Tensor(storage, 7, (2, 3), (6, 2)),
        "scalar": Tensor(storage, 23, (), ()),
        "empty": Tensor(storage, 0, (0, 5), (1, 1)),
        "tied": None,
    }
    tensors["tied"] = tensors["whole"]  # one tensor under two names: tied weights
    read = read_all(WRITERS[fmt](tmp_path / "ok.pth", tensors))
    assert list(read) == list(tensors)
    for name, tensor in tensors.items():
        assert torch.equal(read[name], expected_tensor(tensor)), name


@pytest.mark.parametrize("fmt", list(WRITERS))
@pytest.mark.parametrize(
    "shape, stride, offset, words",
    [
        ((4, 6), (0, 1), 0, ("strides (0, 1)", "stride-0", "expected each element stored once")),
        ((4, 6), (1, 1), 0, ("overlapping",)),
        ((4, 6), (6, 1), 1, ("reaches element 24 of a storage of 24 elements",)),
        ((4, 6), (6, -1), 0, ("strides", "expected sizes from 0")),
        ((-1, 6), (6, 1), 0, ("shape", "expected sizes from 0")),
        ((2**49,), (1,), 0, ("shape", "2**48")),
        ((1,) * 9, (1,) * 9, 0, ("9 dimensions", "at most 8")),
        ((4, 6), (6, 1), -3, ("storage offset -3",)),
        ((4, 6), (6,), 0, ("2 sizes but 1 strides",)),
        ("4x6", (6, 1), 0, ("shape '4x6'", "expected a list of integers")),
    ],
)
def test_views_outside_their_storage_or_repeating_it_are_refused(fmt, shape, stride, offset, words, tmp_path):
    storage = Storage.honest("0", torch.arange(24, dtype=torch.float32))
    path = WRITERS[fmt](tmp_path / "bad.pth", {"w": Tensor(storage, offset, shape, stride)})
    refused(path, "tensor 'w'", *words)


def test_an_expanded_tensor_saved_by_torch_is_refused(tmp_path):
    """r06 in small: torch.save keeps a stride-0 view as it is, one stored float claiming many."""
    torch.save({"pos_embed": torch.ones(1).expand(1, 197, 768), "fine": torch.ones(3)}, tmp_path / "x.pth")
    refused(tmp_path / "x.pth", "'pos_embed'", "(1, 197, 768)", "strides (0, 0, 0)", "tensor.expand")


def test_the_same_bytes_under_too_many_names_are_refused(tmp_path):
    storage = Storage.honest("0", torch.zeros(1 << 20, dtype=torch.float32))  # 4 MiB stored
    tensor = Tensor(storage, 0, (1 << 20,), (1,))
    path = write_torch_zip(tmp_path / "many.pth", {f"t{i}": tensor for i in range(6)})  # 24 MiB read
    refused(path, "claim 25,165,824 bytes in all", "stores 4,194,304 bytes", f"more than {checkpoints.MAX_REUSE}x")
    twice = write_torch_zip(tmp_path / "twice.pth", {"a": tensor, "b": tensor})  # tied weights
    assert len(read_all(twice)) == 2


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_storages_must_hold_what_their_pickle_claims(fmt, tmp_path):
    lie = Storage("0", torch.float32, 10**10, bytes(16))
    path = WRITERS[fmt](tmp_path / "lie.pth", {"w": Tensor(lie, 0, (4,), (1,))})
    refused(path, "storage '0'", "40,000,000,000 bytes")
    short = Storage("0", torch.float32, 4, bytes(12))
    path = WRITERS[fmt](tmp_path / "short.pth", {"w": Tensor(short, 0, (4,), (1,))})
    refused(path, "storage '0'")


def test_the_single_stream_count_must_match_the_pickle(tmp_path):
    storage = Storage("0", torch.float32, 4, bytes(16), count=2**40)
    refused(
        write_torch_legacy(tmp_path / "x.pth", {"w": Tensor(storage, 0, (4,), (1,))}), "stored with 1,099,511,627,776"
    )


def test_too_many_tensors_are_refused_before_torch_load(tmp_path):
    storage = Storage.honest("0", torch.zeros(1))
    empty = Tensor(storage, 0, (0,), (1,))
    path = write_torch_zip(tmp_path / "many.pth", [empty] * (checkpoints.MAX_TENSORS + 1))
    refused(path, f"holds {checkpoints.MAX_TENSORS + 1:,} tensors", f"at most {checkpoints.MAX_TENSORS:,}")


# --- the pickle: scanned before anything is built --------------------------------------------------------
def zip_with_pickle(tmp_path, pkl):
    return write_torch_zip(tmp_path / "crafted.pth", {}, storages=[], pkl=pkl)


@pytest.mark.parametrize(
    "pkl, words",
    [
        (b"\x80\x02}r\xff\xff\xff\x7f.", ("memo slot 2147483647",)),  # LONG_BINPUT: a 16 GiB memo table
        (b"\x80\x04\x8f.", ("opcode EMPTY_SET",)),
        (b"\x80\x02}", ("not a complete pickle",)),
        (b"\x80\x02(" + b"N" * torch_pickle.MAX_PICKLE_OPS + b"l.", ("more than", "pickle opcodes")),
        (b"\x80\x02cposix\nsystem\nX\x04\x00\x00\x00trueR.", ("refused to unpickle", "posix.system")),
        (  # protocol 4 names its globals from the stack: refused by find_class, before the call
            b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93X\x01\x00\x00\x001\x85R.",
            ("refused to unpickle", "builtins.eval", "weights_only=True"),
        ),
        (  # a million empty dicts from a million bytes: refused by count before any is built
            b"\x80\x02(" + b"}" * (torch_pickle.MAX_CONTAINER_OPS + 1) + b"l.",
            (f"more than {torch_pickle.MAX_CONTAINER_OPS:,} dicts, lists and tuples",),
        ),
        (  # within every count, but far more pickle than its (zero) tensors explain
            b"\x80\x02(" + b"N" * (torch_pickle.OPS_FLOOR + 1) + b"l.",
            (f"{torch_pickle.OPS_FLOOR + 5:,} opcodes for 0 tensors",),
        ),
        (b"\x80\x02]q\x00h\x00a.", ("holds itself",)),  # a list that holds itself
        (b"\x80\x02K\x01.", ("holds an int, not a state dict",)),
    ],
)
def test_pickles_are_scanned_before_they_are_unpickled(pkl, words, tmp_path):
    refused(zip_with_pickle(tmp_path, pkl), *words)


def test_a_container_reached_many_times_is_refused(tmp_path):
    # one dict of 100 tensors, listed 10,000 times: a million tensors from a small pickle
    storage = Storage.honest("0", torch.zeros(1))
    inner = {f"t{i}": Tensor(storage, 0, (1,), (1,)) for i in range(100)}
    refused(write_torch_zip(tmp_path / "dag.pth", {"w": [inner] * 10_000}), "the same containers over and over")


def test_train_py_checkpoints_keep_their_args(tmp_path):
    import argparse

    storage = Storage.honest("0", torch.arange(4.0))
    checkpoint = {"state_dict": {"w": Tensor(storage, 0, (4,), (1,))}, "args": argparse.Namespace(model="m")}
    path = write_torch_zip(tmp_path / "train.pth", checkpoint)
    with open_checkpoint(path) as loaded:
        assert loaded.train_args == {"model": "m"} and loaded.wrapper == "state_dict"


def test_every_allowed_global_has_a_builder():
    unpickler = torch_pickle.RecordUnpickler(pickled({}), legacy=False)
    assert {f"{module} {name}" for module, name in unpickler.allowed} == torch_pickle.ALLOWED_GLOBALS


# --- zip archives --------------------------------------------------------------------------------------
def test_a_zip_directory_past_the_bound_is_refused_before_zipfile_reads_it(tmp_path):
    path = tmp_path / "wide.pth"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(zip_archive.MAX_MEMBERS + 1):
            archive.writestr(f"archive/data/{i}", b"")
    refused(path, f"lists {zip_archive.MAX_MEMBERS + 1:,} members", f"at most {zip_archive.MAX_MEMBERS:,}")


def test_two_members_of_one_name_are_refused(tmp_path):
    storage = Storage.honest("0", torch.arange(4.0))
    path = write_torch_zip(tmp_path / "twice.pth", {"w": Tensor(storage, 0, (4,), (1,))})
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "a") as archive:
        archive.writestr("archive/data/0", bytes(16))
    refused(path, "two members named 'archive/data/0'")


def test_compressed_torch_members_are_refused(tmp_path):
    torch.save({"w": torch.zeros(64)}, tmp_path / "x.pth")
    with zipfile.ZipFile(tmp_path / "x.pth") as source, zipfile.ZipFile(tmp_path / "packed.pth", "w") as packed:
        for info in source.infolist():
            packed.writestr(info.filename, source.read(info), compress_type=zipfile.ZIP_DEFLATED)
    refused(tmp_path / "packed.pth", "is compressed")


# --- safetensors -----------------------------------------------------------------------------------------
def write(tmp_path, content, name="x.safetensors"):
    (tmp_path / name).write_bytes(content)
    return tmp_path / name


F32x4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}


@pytest.mark.parametrize(
    "header, data, header_length, words",
    [
        ({"a": F32x4, "b": {**F32x4, "data_offsets": [20, 36]}}, bytes(36), None, ("starts at data byte 20", "gap")),
        ({"a": F32x4, "b": {**F32x4, "data_offsets": [8, 24]}}, bytes(24), None, ("overlap",)),
        ({"a": F32x4}, bytes(20), None, ("16 bytes, but 20 follow",)),
        ({"a": {**F32x4, "shape": [5]}}, bytes(16), None, ("20 bytes, but its data_offsets",)),
        ({"a": {**F32x4, "dtype": "Q9"}}, bytes(16), None, ("dtype 'Q9'",)),
        ({"a": {**F32x4, "shape": [True, 4]}}, bytes(16), None, ("expected a list of integers",)),
        ({"a": F32x4}, bytes(16), MAX_HEADER_BYTES + 8, ("header is 16,777,224 bytes", "at most 16,777,216")),
        ({"a": F32x4}, bytes(16), 2**62, ("at most 16,777,216",)),
        ({"a": F32x4, "__metadata__": {"x": 1}}, bytes(16), None, ("__metadata__",)),
    ],
)
def test_safetensors_headers_are_checked_in_full(header, data, header_length, words, tmp_path):
    refused(write(tmp_path, safetensors_bytes(header, data, header_length)), *words)


def test_a_safetensors_key_named_twice_is_refused(tmp_path):
    raw = (
        b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
    )
    refused(write(tmp_path, struct.pack("<Q", len(raw)) + raw + bytes(16)), "names the key 'a' twice")


def test_a_safetensors_header_listing_too_many_tensors_is_refused_before_parsing(tmp_path):
    count = checkpoints.MAX_TENSORS + 1
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(count)}
    refused(write(tmp_path, safetensors_bytes(header)), f"lists {count:,} tensors", f"at most {count - 1:,}")


def test_safetensors_written_by_the_library_read_exactly(tmp_path):
    tensors = {"b": torch.arange(6, dtype=torch.int64), "a": torch.randn(2, 3).half(), "z": torch.zeros(0, 4)}
    save_file(tensors, str(tmp_path / "ok.safetensors"), metadata={"format": "pt"})
    read = read_all(tmp_path / "ok.safetensors")
    assert list(read) == sorted(tensors) and all(torch.equal(read[k], tensors[k]) for k in tensors)


# --- JSON, and timm's own config reads --------------------------------------------------------------
def test_json_keys_named_twice_are_refused_when_asked():
    assert json_data.parse_json(b'{"a": 1, "a": 2}', "x", ValueError) == {"a": 2}  # what json.loads does
    with pytest.raises(ValueError, match="names the key 'a' twice"):
        json_data.parse_json(b'{"b": {"a": 1, "a": 2}}', "x", ValueError, unique_keys=True)


def test_json_of_many_strings_stops_counting_at_the_bound():
    limits = json_data.JsonLimits(max_values=1000)
    with pytest.raises(ValueError, match="more than 1,000 JSON strings"):
        json_data.parse_json(b"[" + b'"a",' * 5000 + b"1]", "x", ValueError, limits)


def test_json_strings_are_scanned_in_linear_time():
    # '"' then '\\"' over and over: a string scan that retried at every quote would take hours on 16 MiB
    with pytest.raises(ValueError, match="holds a string of"):
        json_data.parse_json(b'"' + b'\\"' * (4 << 20), "x", ValueError)


def test_timm_reads_local_dir_and_hf_hub_configs_through_the_gate(tmp_path):
    import timm.models._hub

    (tmp_path / "config.json").write_text("[" + "{}," * 400_000 + "{}]")
    with pytest.raises(ValueError, match="JSON values; at most 250,000 are read"):
        timm.models._hub.load_model_config_from_path(tmp_path)  # what local-dir: calls first
    with pytest.raises(ValueError, match="JSON values"):
        timm.create_model(f"local-dir:{tmp_path}", pretrained=True)


def test_a_raw_pickle_that_is_not_torch_save_is_refused(tmp_path):
    (tmp_path / "raw.pth").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    refused(tmp_path / "raw.pth", "not a torch.save file")
