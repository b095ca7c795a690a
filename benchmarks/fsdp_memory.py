"""Per-rank memory of FSDP2 training state, measured at 1, 2 and 4 ranks (gloo on CPU).

    python benchmarks/fsdp_memory.py --out benchmarks/results/fsdp-memory-cpu.json     # measure (torchrun per N)
    python benchmarks/fsdp_memory.py --render benchmarks/results/fsdp-memory-cpu.json  # the table of the docs

Each world size is one ``torchrun --standalone`` job. Every rank builds the model on ``meta``, shards it as
``--fsdp`` does (``fully_shard`` per block, then the root), gives storage to its shards only, takes one AdamW step
(timm's ``create_optimizer_v2``) on two random images, and counts the storage of its local parameters, gradients
and optimizer state (:func:`timm_vitscratch.train.memory.local_state_bytes`) and its peak resident set.
The model is ViT-L/16 (width 1024, 24 blocks, 16 heads) at a 32-pixel input, so the step is quick and the
parameters are those of ViT-L but for a shorter position table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "scratch_vit_l16"
KWARGS = {"img_size": 32}
RANKS = (1, 2, 4)
MIB = 1 << 20


def worker(out: Path) -> None:
    import torch
    import torch.distributed as dist
    from timm.optim import create_optimizer_v2

    from timm_vitscratch.models.build import build_on_meta
    from timm_vitscratch.train.memory import local_state_bytes
    from timm_vitscratch.train.parallel import shard

    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    model = shard(build_on_meta(MODEL, **KWARGS))
    model.to_empty(device="cpu")
    with torch.no_grad():  # values do not matter here, only where they are
        for parameter in model.parameters():
            parameter.to_local().normal_(0, 0.02)  # type: ignore[operator]
        for buffer in model.buffers():
            buffer.zero_()
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-4, weight_decay=0.05)
    images, targets = torch.randn(2, 3, 32, 32), torch.randint(0, 1000, (2,))
    torch.nn.functional.cross_entropy(model(images), targets).backward()
    optimizer.step()
    found = {
        **local_state_bytes(model, optimizer),
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    everyone: list[dict[str, int] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, found)
    if dist.get_rank() == 0:
        params = sum(p.numel() for p in model.parameters())
        out.write_text(json.dumps({"params": params, "per_rank": everyone}), encoding="utf-8")
    dist.destroy_process_group()


def measure(out: Path) -> None:
    runs = []
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    if os.path.isdir("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    with tempfile.TemporaryDirectory() as scratch:
        for ranks in RANKS:
            piece = Path(scratch) / f"{ranks}.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
            command += [__file__, "--worker", str(piece)]
            subprocess.run(command, check=True, env=env, cwd=ROOT)
            runs.append({"ranks": ranks, **json.loads(piece.read_text(encoding="utf-8"))})
    record = {"model": MODEL, "model_kwargs": KWARGS, "optimizer": "adamw (fp32)", "device": "cpu", "runs": runs}
    out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def state_total(per_rank: dict[str, int]) -> int:
    return per_rank["parameters"] + per_rank["gradients"] + per_rank["optimizer"]


def render(path: Path) -> str:
    record = json.loads(path.read_text(encoding="utf-8"))
    runs = record["runs"]
    one = max(state_total(rank) for rank in runs[0]["per_rank"])
    lines = [
        f"`{record['model']}` {record['model_kwargs']}: {runs[0]['params']:,} parameters, AdamW, one step",
        "",
        "| ranks | parameters (MiB) | gradients (MiB) | optimizer (MiB) | state per rank (MiB) | of 1 rank | 1/N "
        "| peak RSS per rank (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        largest = max(run["per_rank"], key=state_total)
        total = state_total(largest)
        rss = max(rank["peak_rss"] for rank in run["per_rank"])
        cells = [str(run["ranks"])]
        cells += [f"{largest[key] / MIB:,.1f}" for key in ("parameters", "gradients", "optimizer")]
        cells += [f"{total / MIB:,.1f}", f"{total / one:.4f}", f"{1 / run['ranks']:.4f}", f"{rss / MIB:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="measure at 1, 2 and 4 ranks and write the results here")
    parser.add_argument("--render", type=Path, help="print the table of a results file")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
    elif args.out:
        measure(args.out)
        print(render(args.out))
    elif args.render:
        print(render(args.render))
    else:
        parser.error("--out or --render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
