"""Parts of ``timm_vitscratch.train`` that need no training run: the data order every world size shares, the
refusals, the per-rank byte count and the memory formula."""

from __future__ import annotations

import pytest
import torch

from timm_vitscratch.train import memory
from timm_vitscratch.train.data import ResumableSampler
from timm_vitscratch.train.run import main


def _steps(world_size: int, global_batch: int, skip: int = 0) -> list[set[int]]:
    """The indices each step reads, over all ranks."""
    batch = global_batch // world_size
    shares = []
    for rank in range(world_size):
        sampler = ResumableSampler(range(48), num_replicas=world_size, rank=rank, seed=7, drop_last=True)
        sampler.set_epoch(2)
        sampler.start_at(skip, batch)
        shares.append(list(sampler))
    return [
        set().union(*(share[i * batch : (i + 1) * batch] for share in shares)) for i in range(len(shares[0]) // batch)
    ]


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_every_world_size_reads_the_same_images_at_each_step_and_resumes_at_any(world_size):
    one = _steps(1, 8)
    assert _steps(world_size, 8) == one
    assert _steps(world_size, 8, skip=2) == one[2:]  # resumed after two batches of the epoch


def test_the_skip_holds_for_one_epoch_only():
    sampler = ResumableSampler(range(16), num_replicas=1, rank=0, seed=0)
    whole = list(sampler)
    sampler.start_at(1, 4)
    assert list(sampler) == whole[4:]
    assert list(sampler) == whole


def test_mixtures_that_cannot_work_are_refused_before_anything_starts(tmp_path, capsys):
    common = ["--model", "scratch_vit_ti16", "--data-dir", str(tmp_path), "--output", str(tmp_path / "out")]
    assert main([*common, "--export", str(tmp_path / "x"), "--export-ema"]) == 2
    assert "--export-ema needs --model-ema" in capsys.readouterr().err
    assert main([*common, "--naflex-loader", "--mixup", "0.8"]) == 2
    assert "--naflex-loader trains without --mixup" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_local_state_bytes_counts_each_storage_once():
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    found = memory.local_state_bytes(model, optimizer)
    assert found["parameters"] == found["gradients"] == 15 * 4
    assert found["optimizer"] == 2 * 15 * 4 + 2 * 4  # two moments, and a step count a parameter


def test_the_formula_divides_the_state_by_the_ranks_and_checkpointing_keeps_block_inputs():
    size = memory.Size("m", params=1000, block_params=100, root_params=200, width=8, depth=4, tokens=10,
                       bytes_per_token_width=36.0)  # fmt: skip
    one, eight = memory.estimate(size, 1, 2, False), memory.estimate(size, 8, 2, False)
    assert one["state"] == 16_000 and eight["state"] == 2_000 and one["activations"] == eight["activations"]
    assert one["gathered"] == 8 * 100 + 6 * 200
    assert one["activations"] == 36.0 * 8 * 10 * 2 * 4
    assert memory.estimate(size, 8, 2, True)["activations"] == 2 * 8 * 10 * 2 * 4 + 36.0 * 8 * 10 * 2
