"""Resource bounds: files that claim absurd sizes are refused before memory is allocated.

The loaders run in a child process whose address space is capped (``RLIMIT_AS``) at what it uses plus
``HEADROOM``: a loader that believed the file and allocated what it claims would fail with
``MemoryError`` (or crash) instead of raising our error. A control allocation shows the cap bites, and
small valid files still load under it.
"""

import json
import shutil
import struct
import zipfile

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.fuzzing import LoaderProcess, check_outcome
from tests.support.hub_fixtures import model_dir
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import read_config, write_config

pytestmark = pytest.mark.slow  # memory-capped worker processes

HEADROOM = 384 << 20
BOMB_BYTES = 512 << 20  # more than the headroom: decompressing it under the cap would fail


@pytest.fixture(scope="module")
def capped():
    process = LoaderProcess(timeout=120.0)
    assert process.run("limit_memory", "-", headroom=HEADROOM)["outcome"] == "ok"
    denied = process.run("allocate", "-", bytes=2 * HEADROOM)  # the cap is real
    assert denied["outcome"] == "error" and denied["type"] == "builtins.MemoryError", denied
    yield process
    process.close()


def safetensors_bytes(header, data=b"", header_length=None):
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) if header_length is None else header_length) + raw + data


SAFETENSORS_LIES = {
    "a 16 GiB tensor in a tiny file": (
        {"w": {"dtype": "F32", "shape": [65536, 65536], "data_offsets": [0, 65536 * 65536 * 4]}},
        None,
    ),
    "offsets a terabyte past the end": (
        {"w": {"dtype": "F32", "shape": [4], "data_offsets": [2**40, 2**40 + 16]}},
        None,
    ),
    "a shape whose size overflows 64 bits": (
        {"w": {"dtype": "F32", "shape": [2**32, 2**32, 2**32], "data_offsets": [0, 16]}},
        None,
    ),
    "offsets reversed": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, None),
    "a header length of 2**62 bytes": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 2**62),
    "a header length of 99,999,992 bytes": ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 99_999_992),
}


@pytest.mark.parametrize("lie", list(SAFETENSORS_LIES))
def test_safetensors_claiming_absurd_sizes_is_refused_before_allocating(lie, capped, tmp_path):
    header, header_length = SAFETENSORS_LIES[lie]
    content = safetensors_bytes(header, bytes(16), header_length)
    path = tmp_path / "lie.safetensors"
    path.write_bytes(content)
    assert check_outcome(capped.run("checkpoint", path), str(path), lie) == "error"
    # the same file as a model directory's weights: our check, and timm's own local-dir loader
    directory = model_dir(tmp_path / "model", tiny())
    config = read_config(directory)
    (directory / "model.safetensors").write_bytes(content)
    config["vitscratch"]["sha256"] = sha256_file(directory / "model.safetensors")
    write_config(directory, config)
    assert check_outcome(capped.run("check_model_directory", directory), str(directory), lie) == "error"
    by_timm = capped.run("timm_local_dir", directory)
    assert by_timm["outcome"] == "error" and by_timm["type"] != "builtins.MemoryError", by_timm


def npz_bomb(path, nbytes):
    """A genuine decompression bomb: one float32 member of ``nbytes`` zeros, deflated (about 0.1% of that)."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("weights.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            chunk = bytes(16 << 20)
            for _ in range(nbytes // len(chunk)):
                member.write(chunk)
    return path


def test_npz_decompression_bomb_is_refused_before_decompressing(capped, tmp_path):
    bomb = npz_bomb(tmp_path / "bomb.npz", BOMB_BYTES)
    assert bomb.stat().st_size < BOMB_BYTES // 100
    result = capped.run("checkpoint", bomb)
    assert check_outcome(result, str(bomb), "bomb") == "error"
    assert "decompression bomb" in result["message"] and "refused before decompressing" in result["message"]
    converted = capped.run("convert", bomb, out=str(tmp_path / "out"))
    assert check_outcome(converted, str(bomb), "bomb") == "error" and "decompression bomb" in converted["message"]


def test_small_valid_files_still_load_under_the_cap(capped, tmp_path):
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, dtype=np.float16)}
    np.savez_compressed(tmp_path / "ok.npz", **arrays)
    assert capped.run("checkpoint", tmp_path / "ok.npz") == {"outcome": "ok", "tensors": 2}
    save_file({"w": tiny().state_dict()["head.weight"]}, str(tmp_path / "ok.safetensors"))
    assert capped.run("checkpoint", tmp_path / "ok.safetensors") == {"outcome": "ok", "tensors": 1}
    assert capped.run("check_model_directory", model_dir(tmp_path / "model", tiny()))["outcome"] == "ok"


# --- what the probes found (r06, r07, r14): each written here in small ----------------------------------
def converts_nothing(capped, source, out, *words):
    """``convert`` of ``source`` is refused under the cap, with our error naming it and ``words``; nothing written."""
    result = capped.run("convert", source, out=str(out))
    assert check_outcome(result, str(source), "hostile source") == "error"
    assert all(word in result["message"] for word in words), result["message"]
    assert not out.exists()
    return result["message"]


def test_r06_a_torch_zip_of_expanded_tensors_is_refused_before_anything_is_materialised(capped, tmp_path):
    """One stored float viewed with stride 0 as every tensor of a ViT (a 20 KB file claiming 346 MB), and as
    one tensor claiming 40 GB: refused from the pickle's records, before torch.load or any copy."""
    one = torch.randn(1)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in timm.create_model("scratch_vit_b16").state_dict().items()}
    torch.save({k: one.expand(shape) for k, shape in shapes.items()}, tmp_path / "b16.pth")
    torch.save({"w": torch.ones(1, dtype=torch.float64).expand(50_000, 100_000)}, tmp_path / "wide.pth")
    assert (tmp_path / "wide.pth").stat().st_size < 4096
    for name in ("b16.pth", "wide.pth"):
        converts_nothing(capped, tmp_path / name, tmp_path / "out", "strides (0,", "expected each element stored once")
        result = capped.run("checkpoint", tmp_path / name)
        assert check_outcome(result, str(tmp_path / name), name) == "error" and "stride-0" in result["message"]


def test_r07_a_safetensors_header_of_many_tensors_is_refused_before_it_is_parsed(capped, tmp_path):
    """A header past 16 MiB (r07's was 92 MB of 1.5 M zero-length tensors) is refused from its length; one
    within it but listing more tensors than a checkpoint has is refused from a byte count, before parsing.
    Each as a file to convert, as a model directory's weights (our check, and timm's local-dir: loader)."""
    entry = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    big = safetensors_bytes({f"t{i:08d}": entry for i in range(300_000)})
    assert len(big) > 16 << 20
    many = safetensors_bytes({f"t{i:08d}": entry for i in range(20_000)})
    for content, words in ((big, "at most 16,777,216 are read"), (many, "lists 20,000 tensors; at most 16,384")):
        path = tmp_path / "lie.safetensors"
        path.write_bytes(content)
        result = capped.run("checkpoint", path)
        assert check_outcome(result, str(path), words) == "error" and words in result["message"], result
        converts_nothing(capped, path, tmp_path / "out", words)
        directory = model_dir(tmp_path / "model", tiny())
        (directory / "model.safetensors").write_bytes(content)
        checked = capped.run("check_model_directory", directory)
        assert check_outcome(checked, str(directory), words) == "error" and words in checked["message"]
        by_timm = capped.run("timm_local_dir", directory)
        assert by_timm["outcome"] == "error" and by_timm["ours"] and words in by_timm["message"], by_timm
        shutil.rmtree(directory)


def test_r14_a_config_of_millions_of_empty_objects_is_refused_at_a_bounded_cost(capped, tmp_path):
    """config.json as '"x": [{},{},...]': just under 16 MiB for convert (refused by its value count), 20 MB for
    timm's own local-dir: loader (refused by its size, read no further than the bound)."""
    directory = model_dir(tmp_path / "model", tiny())
    config = json.dumps(read_config(directory))[:-1] + ', "x": ['

    def stuff(size):
        count = (size - len(config) - 8) // 3
        (directory / "config.json").write_text(config + "{}," * count + "{}]}")

    stuff((16 << 20) - 64)
    converts_nothing(capped, directory, tmp_path / "out", "config.json", "JSON values; at most 250,000 are read")
    stuff(20_000_000)
    by_timm = capped.run("timm_local_dir", directory)
    assert by_timm["outcome"] == "error" and by_timm["type"].endswith("ModelDirectoryError"), by_timm
    assert "larger than 16,777,216 bytes" in by_timm["message"]
