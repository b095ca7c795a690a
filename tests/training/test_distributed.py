"""DDP under torchrun: two gloo processes on CPU take the same steps as one process."""

import json
import os
import sys
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

from examples.ddp_train import DEFAULT_MODEL_ARGS
from tests.support import time_limits

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example

REPO = Path(__file__).resolve().parents[2]
COMMON = ["--steps", "4", "--global-batch", "16", "--opt", "sgd", "--lr", "0.05"]


def _run(command, cwd):
    # one thread per process on a 2-core machine; the example runs from the repository, not the wheel
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    if os.path.isdir("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's sockets on the loopback interface only
    result = time_limits.run(command, cwd=cwd, env=env, capture_output=True, text=True, quiet_seconds=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_torchrun_two_processes_match_one_process_on_the_same_global_batch(tmp_path):
    # SGD: the update is linear in the gradient, so fp32 summation order is the only difference
    # (Adam would divide the ~1e-9 noise in gradients that are zero in theory, such as the key bias)
    module = ["-m", "examples.ddp_train", *COMMON]
    _run([sys.executable, *module, "--out", str(tmp_path / "one")], tmp_path)
    _run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            *module,
            "--out",
            str(tmp_path / "two"),
        ],
        tmp_path,
    )

    one = safetensors.torch.load_file(tmp_path / "one" / "params_rank0.safetensors")
    rank0 = safetensors.torch.load_file(tmp_path / "two" / "params_rank0.safetensors")
    rank1 = safetensors.torch.load_file(tmp_path / "two" / "params_rank1.safetensors")
    assert set(one) == set(rank0) == set(rank1)
    for name in one:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between ranks"
        assert torch.allclose(rank0[name], one[name], rtol=1e-5, atol=1e-6), name

    result_one = json.loads((tmp_path / "one" / "result.json").read_text())
    result_two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert (result_one["world_size"], result_two["world_size"]) == (1, 2)
    assert result_two["max_param_difference_between_ranks"] == 0.0
    assert result_one["steps"] == result_two["steps"] == 4
    # the mean of the two ranks' losses is the loss of the whole global batch
    assert torch.allclose(torch.tensor(result_two["losses"]), torch.tensor(result_one["losses"]), rtol=1e-5)
    # the weights did move
    torch.manual_seed(0)
    initial = timm.create_model("scratch_vit_ti16", num_classes=10, **DEFAULT_MODEL_ARGS).state_dict()
    assert (initial["head.weight"] - one["head.weight"]).abs().max() > 1e-3
