"""Data-parallel training with timm's components, runnable under ``torchrun`` or as one process.

::

    torchrun --standalone --nproc_per_node=2 -m examples.ddp_train --steps 5 --out DIR
    python -m examples.ddp_train --steps 5 --out DIR      # the same global batches, one process

Every process builds the same model and the same synthetic data set (both from ``--seed``);
timm's ``init_distributed_device_so`` joins the process group (gloo on CPU, nccl on CUDA),
``ClassificationTask.prepare_distributed`` wraps the model in ``DistributedDataParallel`` and a
``DistributedSampler`` gives each rank its share of every global batch. DDP averages the
gradients, so N processes on batches of ``global_batch / N`` take the same steps as one process
on the whole global batch. Each rank writes its parameters to ``DIR/params_rank{R}.safetensors``;
rank 0 writes ``DIR/result.json`` (global-batch losses, steps/s, the largest parameter difference between ranks).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import safetensors.torch
import timm
import torch
import torch.distributed as dist
from timm.task import ClassificationTask
from timm.utils import ParseKwargs, unwrap_model
from timm.utils.distributed import init_distributed_device_so
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from examples.training_loop import create_train_state, train_step
from timm_vitscratch.files import atomic_write

#: a small ViT that takes a few milliseconds per step on a CPU core
DEFAULT_MODEL_ARGS: dict[str, Any] = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)


def synthetic_dataset(num_samples: int, num_classes: int, img_size: int, seed: int) -> TensorDataset:
    """Random images whose label is a fixed random linear function of the pixels (learnable)."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(num_samples, 3, img_size, img_size, generator=generator)
    rule = torch.randn(3 * img_size * img_size, num_classes, generator=generator)
    labels = (images.flatten(1) @ rule).argmax(dim=1)
    return TensorDataset(images, labels)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m examples.ddp_train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for parameters and result.json")
    parser.add_argument("--model", default="scratch_vit_ti16")
    parser.add_argument(
        "--model-kwargs",
        nargs="*",
        default={},
        action=ParseKwargs,
        help=f"overrides of the small default architecture {DEFAULT_MODEL_ARGS}",
    )
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=16, help="samples per step over all processes")
    parser.add_argument("--opt", default="adamw")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    parser.add_argument("--device", default="cpu")
    return parser


def _max_difference_between_ranks(flat: torch.Tensor, world_size: int) -> float:
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    return max((other - gathered[0]).abs().max().item() for other in gathered)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    info = init_distributed_device_so(device=args.device)
    device, rank, world_size = torch.device(info["device"]), info["global_rank"], info["world_size"]
    if args.global_batch % world_size:
        raise ValueError(f"--global-batch {args.global_batch} must be divisible by the {world_size} processes")

    model_args = {**DEFAULT_MODEL_ARGS, **args.model_kwargs}
    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = timm.create_model(args.model, num_classes=args.num_classes, **model_args).to(device)
    dataset = synthetic_dataset(args.steps * args.global_batch, args.num_classes, model_args["img_size"], args.seed)
    # no shuffling: rank r takes samples r, r + N, r + 2N, ... so each global batch is the same
    # set of samples as one process's batch of --global-batch consecutive samples
    sampler = DistributedSampler(dataset, world_size, rank, shuffle=False) if info["distributed"] else None
    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler)

    task = ClassificationTask(model, device=device, verbose=False)
    state = create_train_state(model, args.steps, opt=args.opt, lr=args.lr, weight_decay=0.05, sched="")
    if info["distributed"]:
        task.prepare_distributed()

    step_times: list[float] = []
    for images, labels in loader:
        start = time.perf_counter()
        train_step(task, state, images.to(device), labels.to(device))
        step_times.append(time.perf_counter() - start)

    params = {k: v.detach().cpu().contiguous() for k, v in unwrap_model(model).state_dict().items()}
    args.out.mkdir(parents=True, exist_ok=True)
    with atomic_write(args.out / f"params_rank{rank}.safetensors") as handle:
        handle.write(safetensors.torch.save(params))
    flat = torch.cat([p.detach().flatten() for p in unwrap_model(model).parameters()])
    losses = torch.tensor(state.losses, dtype=torch.float64)
    rank_difference = 0.0
    if info["distributed"]:
        rank_difference = _max_difference_between_ranks(flat, world_size)
        dist.all_reduce(losses)  # equal shares: the mean of the ranks' losses is the global batch's
        losses /= world_size
    timed = step_times[1:] or step_times  # the first step pays for allocation and DDP's first sync
    result = dict(
        rank=rank,
        world_size=world_size,
        steps=len(step_times),
        global_batch=args.global_batch,
        losses=losses.tolist(),
        max_param_difference_between_ranks=rank_difference,
        steps_per_s=len(timed) / sum(timed),
        samples_per_s=len(timed) * args.global_batch / sum(timed),
        threads_per_process=args.threads,
    )
    if rank == 0:
        with atomic_write(args.out / "result.json", "w") as handle:
            json.dump(result, handle, indent=2)
    if info["distributed"]:
        dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    result = run(build_parser().parse_args(argv))
    if result["rank"] == 0:
        print(json.dumps({k: v for k, v in result.items() if k != "losses"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
