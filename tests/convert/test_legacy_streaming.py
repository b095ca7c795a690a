"""A single-stream (``_use_new_zipfile_serialization=False``) ``torch.save`` file is read one tensor at a time,
as a zip one is: never loaded whole (issue 36, s18), and what it reads is what torch.save stored."""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import pytest
import torch

from timm_vitscratch.errors import ConversionError
from timm_vitscratch.layouts.reader import open_checkpoint

MB = 1 << 20


def test_legacy_file_is_read_tensor_by_tensor(tmp_path, monkeypatch):
    tensors = {f"blocks.{i}.mlp.fc1.weight": torch.full((256, 1024), float(i)) for i in range(16)}  # 1 MiB each
    path = tmp_path / "legacy.pth"
    torch.save(tensors, path, _use_new_zipfile_serialization=False)

    def whole_load(*args, **kwargs):
        raise AssertionError("torch.load read the whole legacy file")

    monkeypatch.setattr(torch, "load", whole_load)
    gc.collect()
    tracemalloc.start()
    try:
        with open_checkpoint(path) as checkpoint:
            for key in checkpoint.keys():
                tensor = checkpoint.tensor(key)
                assert torch.equal(tensor, tensors[key])
                del tensor
                checkpoint.release(key)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the file holds 16 MiB of tensors; reading it holds one (1 MiB) at a time, plus the pickle's records
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MiB while reading a 16 MiB legacy file"


def test_legacy_views_dtypes_and_train_args_read_as_stored(tmp_path):
    base = torch.randn(8, 6)
    state = {
        "whole": base,
        "slice": base[2:5, 1:4],
        "transposed": base.t(),
        "half": torch.randn(5).half(),
        "bf16": torch.randn(2, 3).bfloat16(),
        "steps": torch.arange(4),
        "mask": torch.tensor([True, False]),
        "empty": torch.zeros(0, 3),
    }
    path = tmp_path / "train.pth.tar"
    checkpoint = {"state_dict": state, "epoch": 2, "args": argparse.Namespace(model="scratch_vit_ti16", lr=0.1)}
    torch.save(checkpoint, path, _use_new_zipfile_serialization=False)
    with open_checkpoint(path) as read:
        assert read.wrapper == "state_dict"
        assert read.train_args == {"model": "scratch_vit_ti16", "lr": 0.1}
        for key, expected in state.items():
            tensor = read.tensor(key)
            assert tensor.dtype == expected.dtype and tensor.stride() == expected.stride(), key
            assert torch.equal(tensor, expected), key


def test_legacy_file_truncated_after_the_check_is_one_clear_error(tmp_path):
    path = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(1024, 64)}, path, _use_new_zipfile_serialization=False)
    with open_checkpoint(path) as read:
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size - 1024)
        with pytest.raises(ConversionError, match="ends inside the bytes of a tensor"):
            read.tensor("w")
