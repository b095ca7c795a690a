"""Resource bounds: files that claim absurd sizes are refused before memory is allocated.

The loaders run in a child process whose address space is capped (``RLIMIT_AS``) at what it uses plus
``HEADROOM``: a loader that believed the file and allocated what it claims would fail with
``MemoryError`` (or crash) instead of raising our error. A control allocation shows the cap bites, and
small valid files still load under it.
"""

import json
import struct
import zipfile

import numpy as np
import pytest
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.fuzzing import LoaderProcess, check_outcome
from tests.support.hub_fixtures import model_dir
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import read_config, write_config

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
