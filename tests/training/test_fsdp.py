"""``timm_vitscratch.train`` as one process, DDP x2 and FSDP x2 (gloo on CPU): the same loss line; DCP checkpoints
that resume on another world size, never from a partial one; a model directory exported from the shards.

Three jobs carry every check, each started once for the module: one ``torchrun --nproc_per_node 2`` job (DDP and
FSDP runs, checkpoints, an export), one plain process (the one-process runs, one through ``vitscratch train``, and
a resume) and one ``torchrun --nproc_per_node 4`` job (a resume of the one-process resume: 2 -> 1 -> 4 ranks).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

import timm_vitscratch_cli
from tests.support.train_runs import run_job, write_image_folder
from timm_vitscratch.train import checkpoint
from timm_vitscratch.train.export import export_checkpoint

pytestmark = pytest.mark.slow  # starts a torchrun job and a training process

REPO = Path(__file__).resolve().parents[2]
TINY = ["img_size=16", "patch_size=4", "embed_dim=64", "depth=2", "num_heads=4"]
MODELS = {"vit": "scratch_vit_ti16", "dinov3": "scratch_dinov3_s16"}
EPOCHS = 3
GLOBAL_BATCH = 8  # 32 images: 4 steps an epoch
# SGD: the update is linear in the gradient, so fp32 summation order is the only difference between world sizes
COMMON = ["--num-classes", "4", "--no-aug", "-j", "0", "--opt", "sgd", "--lr", "0.05", "--layer-decay", "0.75"]
COMMON += ["--epochs", str(EPOCHS), "--seed", "3", "--model-ema", "--model-ema-decay", "0.5"]
# timm's NaFlex loader: each 16-pixel picture as 16 patches of 4, or resized to 8 patches (variable batch size)
NAFLEX = ["--naflex-loader", "--naflex-train-seq-lens", "8", "16"]


def _arguments(model: str, data: Path, output: Path, world_size: int, *extra: str) -> list[str]:
    batch = str(GLOBAL_BATCH // world_size)
    return ["--model", MODELS[model], "--model-kwargs", *TINY, "--data-dir", str(data), "-b", batch, "--output",
            str(output), *COMMON, *extra]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    data = write_image_folder(root / "data")
    two = [
        {"args": _arguments("vit", data, root / "vit_ddp", 2)},
        {
            "args": _arguments(
                "vit",
                data,
                root / "vit_fsdp",
                2,
                "--fsdp",
                "--grad-checkpointing",
                "--export",
                str(root / "vit_export"),
            ),
            "full_weights": str(root / "vit_fsdp_trained.safetensors"),
            "builds": str(root / "vit_fsdp_builds"),
        },
        {"args": _arguments("dinov3", data, root / "dinov3_ddp", 2)},
        {"args": _arguments("dinov3", data, root / "dinov3_fsdp", 2, "--fsdp", "--checkpoint-every", "0")},
        {"args": _arguments("vit", data, root / "vit_naflex", 2, "--fsdp", "--checkpoint-every", "0", *NAFLEX)},
    ]
    run_job(two, root / "two.json", 2)
    # a killed run: its first checkpoint complete, the second without its marker, the third still being written
    killed = root / "killed" / checkpoint.CHECKPOINTS
    killed.mkdir(parents=True)
    fsdp = root / "vit_fsdp" / checkpoint.CHECKPOINTS
    shutil.copytree(fsdp / "step-4", killed / "step-4")
    shutil.copytree(fsdp / "step-8", killed / "step-8")
    (killed / "step-8" / checkpoint.COMPLETE).unlink()
    shutil.copytree(fsdp / "step-12", killed / ".step-12.partial")
    one = [
        {"args": _arguments("vit", data, root / "vit_one", 1, "--checkpoint-every-steps", "3")},
        {"args": _arguments("dinov3", data, root / "dinov3_one", 1, "--checkpoint-every", "0"), "cli": True},
        {"args": _arguments("vit", data, root / "vit_resumed", 1, "--resume", str(root / "killed"))},
        # last: it leaves the process in a group of one
        {"args": _arguments("vit", data, root / "vit_one_fsdp", 1, "--fsdp", "--checkpoint-every", "0")},
    ]
    run_job(one, root / "one.json", 1)
    # the chain goes on: the one-process run's step-8 checkpoint (resumed from two ranks) resumes on four
    step8 = str(root / "vit_resumed" / checkpoint.CHECKPOINTS / "step-8")
    step6 = str(root / "vit_one" / checkpoint.CHECKPOINTS / "step-6")  # in the middle of the second epoch
    four = [
        {"args": _arguments("vit", data, root / "vit_four", 4, "--fsdp", "--resume", step8)},
        {"args": _arguments("vit", data, root / "vit_four_mid", 4, "--fsdp", "--resume", step6)},
    ]
    run_job(four, root / "four.json", 4)
    return root


def _losses(root: Path, run: str) -> list[float]:
    return json.loads((root / run / "summary.json").read_text(encoding="utf-8"))["losses"]


def _relative(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("model", sorted(MODELS))
def test_one_process_ddp_and_fsdp_take_the_same_loss_line(runs, model):
    one = _losses(runs, f"{model}_one")
    assert len(one) == EPOCHS * 32 // GLOBAL_BATCH
    assert _relative(one, _losses(runs, f"{model}_ddp")) < 1e-5
    assert _relative(one, _losses(runs, f"{model}_fsdp")) < 1e-5
    if model == "vit":  # FSDP in one process (a process group of one)
        assert _relative(one, _losses(runs, "vit_one_fsdp")) < 1e-5
    assert one[-1] < one[0]  # it learns


def test_fsdp_ranks_build_on_meta_and_only_rank0_builds_whole(runs):
    # rank 0 draws the weights (the one-process run's draws) in host memory; every rank shards a meta model
    builds = {rank: json.loads((runs / "vit_fsdp_builds" / f"{rank}.json").read_text()) for rank in (0, 1)}
    # then the average's copy (--model-ema) and the export's plan, on meta too
    assert builds[0][0] == "cpu" and set(builds[0][1:]) == {"meta"}
    assert builds[1] == ["meta", "meta"]  # the model and the average


def _state(root: Path, run: str) -> list[int]:
    summary = json.loads((root / run / "summary.json").read_text(encoding="utf-8"))
    return [rank["parameters"] + rank["gradients"] + rank["optimizer"] for rank in summary["state_bytes"]]


def test_each_fsdp_rank_holds_its_share_of_the_training_state(runs):
    # parameters, gradients and SGD's momentum: the whole on one process and under DDP, a half per FSDP rank
    (whole,) = _state(runs, "vit_one")
    assert _state(runs, "vit_ddp") == [whole, whole]
    for share in _state(runs, "vit_fsdp"):
        assert 0.5 <= share / whole < 0.52  # FSDP pads a dimension that does not split evenly (the class token's)
    for share in _state(runs, "vit_four"):  # and a quarter on four
        assert 0.25 <= share / whole < 0.27


def test_the_committed_per_rank_memory_is_about_one_over_n():
    record = json.loads((REPO / "benchmarks" / "results" / "fsdp-memory-cpu.json").read_text(encoding="utf-8"))
    totals = {run["ranks"]: max(r["parameters"] + r["gradients"] + r["optimizer"] for r in run["per_rank"])
              for run in record["runs"]}  # fmt: skip
    assert sorted(totals) == [1, 2, 4]
    for ranks, total in totals.items():
        assert total / totals[1] == pytest.approx(1 / ranks, rel=0.01)


def test_fsdp_trains_on_timms_naflex_loader(runs):
    summary = json.loads((runs / "vit_naflex" / "summary.json").read_text(encoding="utf-8"))
    assert summary["world_size"] == 2 and summary["step"] > 0
    assert all(0 < loss < 10 for loss in summary["losses"])
    log = [json.loads(line) for line in (runs / "vit_naflex" / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted({line["epoch"] for line in log}) == list(range(EPOCHS))


def test_a_two_rank_checkpoint_resumes_on_one_process_from_the_last_complete_one(runs):
    one = _losses(runs, "vit_one")
    resumed = json.loads((runs / "vit_resumed" / "summary.json").read_text(encoding="utf-8"))
    assert resumed["world_size"] == 1
    # step-8 has no marker and step-12 is still .partial: the run continues from step 4, on the same line
    assert len(resumed["losses"]) == len(one) - 4
    assert _relative(one[4:], resumed["losses"]) < 1e-5
    record = checkpoint.read_training(runs / "vit_fsdp" / checkpoint.CHECKPOINTS / "step-4")
    assert (record["world_size"], record["epoch"], record["step"]) == (2, 1, 4)


def test_the_chain_goes_on_at_four_ranks_on_the_same_line(runs):
    # two FSDP ranks -> one process (from step 4) -> four FSDP ranks (from the one process's step 8)
    one = _losses(runs, "vit_one")
    four = json.loads((runs / "vit_four" / "summary.json").read_text(encoding="utf-8"))
    assert four["world_size"] == 4
    assert len(four["losses"]) == len(one) - 8
    assert _relative(one[8:], four["losses"]) < 1e-5
    record = checkpoint.read_training(runs / "vit_resumed" / checkpoint.CHECKPOINTS / "step-8")
    assert (record["world_size"], record["epoch"]) == (1, 2)


def test_a_checkpoint_in_the_middle_of_an_epoch_resumes_at_the_next_batch(runs):
    one = _losses(runs, "vit_one")
    record = checkpoint.read_training(runs / "vit_one" / checkpoint.CHECKPOINTS / "step-6")
    assert (record["epoch"], record["epoch_step"], record["step"]) == (1, 2, 6)
    mid = json.loads((runs / "vit_four_mid" / "summary.json").read_text(encoding="utf-8"))
    assert len(mid["losses"]) == len(one) - 6
    assert _relative(one[6:], mid["losses"]) < 1e-5
    ended = checkpoint.read_training(runs / "vit_one" / checkpoint.CHECKPOINTS / "step-8")
    assert (ended["epoch"], ended["epoch_step"]) == (2, 0)


def test_only_complete_checkpoints_count(runs):
    killed = runs / "killed"
    assert checkpoint.latest(killed).name == "step-4"
    assert checkpoint.latest(killed / checkpoint.CHECKPOINTS).name == "step-4"
    with pytest.raises(checkpoint.CheckpointError, match="not a complete checkpoint"):
        checkpoint.latest(killed / checkpoint.CHECKPOINTS / "step-8")
    assert checkpoint.latest(runs / "vit_fsdp").name == "step-12"


def test_the_exported_directory_holds_the_trained_weights_exactly(runs, tmp_path):
    trained = safetensors.torch.load_file(runs / "vit_fsdp_trained.safetensors")
    exported = safetensors.torch.load_file(runs / "vit_export" / "model.safetensors")
    assert set(trained) == set(exported)
    for name, tensor in trained.items():
        assert torch.equal(tensor, exported[name]), name
    model = timm.create_model(f"local-dir:{runs / 'vit_export'}", pretrained=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    config = json.loads((runs / "vit_export" / "config.json").read_text(encoding="utf-8"))
    assert config["pretrained_cfg"]["license"] == "unknown"  # trained from a random start: no one's licence
    # the CLI's route, from a run directory (its latest complete checkpoint), gives the same bytes
    again = export_checkpoint(runs / "vit_fsdp", tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (runs / "vit_export" / "model.safetensors").read_bytes()


def _ema(root: Path, run: str, tmp_path: Path) -> dict[str, torch.Tensor]:
    out = export_checkpoint(root / run, tmp_path / f"{run}_ema", ema=True)
    return safetensors.torch.load_file(out / "model.safetensors")


def test_the_average_of_the_weights_is_the_same_sharded_or_whole_and_travels_in_checkpoints(runs, tmp_path):
    one = _ema(runs, "vit_one", tmp_path)
    weights = safetensors.torch.load_file(runs / "vit_fsdp_trained.safetensors")
    assert not torch.equal(one["head.weight"], weights["head.weight"])  # an average, not the weights
    # averaged shard by shard on two FSDP ranks; resumed (two ranks -> one process) with the average in the checkpoint
    for run in ("vit_fsdp", "vit_resumed"):
        other = _ema(runs, run, tmp_path)
        assert set(other) == set(one)
        for name, tensor in one.items():
            torch.testing.assert_close(other[name], tensor, rtol=1e-5, atol=1e-6, msg=f"{run} {name}")
    config = json.loads((tmp_path / "vit_one_ema" / "config.json").read_text(encoding="utf-8"))
    assert "EMA" in config["vitscratch"]["source"]["weights"]
    # the console script's route gives the same bytes
    assert timm_vitscratch_cli.main(["export-checkpoint", "--ema", str(runs / "vit_one"), str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "model.safetensors").read_bytes() == (
        tmp_path / "vit_one_ema" / "model.safetensors"
    ).read_bytes()
