"""Atomic writes and the shared model-directory format."""

import json
import re

import pytest
import timm
import torch
from safetensors.torch import save_file

from tests.support import tiny
from timm_vitscratch.files import atomic_write, sha256_file
from timm_vitscratch.model_dir import METADATA_KEY, WEIGHTS_NAME, model_config, read_config, write_config


def test_atomic_write_keeps_previous_file_on_error(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"good")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as handle:
            handle.write(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_atomic_write_gives_default_permissions(tmp_path):
    import os

    target = tmp_path / "out.bin"
    with atomic_write(target) as handle:
        handle.write(b"x")
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x")
    assert os.stat(target).st_mode & 0o777 == os.stat(plain).st_mode & 0o777


def test_atomic_write_refuses_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with atomic_write(tmp_path / "nope" / "x.bin"):
            pass


def test_model_directory_loads_with_timm_local_dir(tmp_path):
    model = tiny(num_classes=3).eval()
    weights = tmp_path / WEIGHTS_NAME
    save_file(model.state_dict(), str(weights))
    config = model_config(model, weights_sha256=sha256_file(weights), source={"format": "test"})
    write_config(tmp_path, config)
    assert read_config(tmp_path)[METADATA_KEY]["sha256"] == sha256_file(weights)
    assert json.loads((tmp_path / "config.json").read_text())["architecture"] == "scratch_vit_ti16"
    loaded = timm.create_model(f"local-dir:{tmp_path}", pretrained=True).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_read_config_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape("config.json not found")):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_config(tmp_path)
