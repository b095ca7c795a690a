"""One NaFlex training run, in one process or as a torchrun/gloo rank (tests/training/test_naflex_training.py).

Each step's global batch is a fixed list of images of mixed sizes; rank r takes images r, r + W, ...
(unequal shares when W does not divide the count). As timm's train.py does for NaFlex batches under
DDP, each rank's mean loss is scaled by ``world_size * local_batch / global_batch``, so that DDP's
gradient average equals the one-process gradient of the global batch's mean loss.

    python -m tests.support.naflex_ddp_worker OUT_DIR
    torchrun --standalone --nproc_per_node=2 -m tests.support.naflex_ddp_worker OUT_DIR
"""

import json
import sys
from pathlib import Path

import safetensors.torch
import torch
import torch.distributed as dist
import torch.nn.functional as F
from timm.task import ClassificationTask
from timm.utils.distributed import init_distributed_device_so

from tests.support import tiny
from tests.support.naflex_batches import images, naflex_batch

SIZES = ((32, 32), (16, 40), (8, 64), (48, 24), (24, 24), (8, 8), (40, 16))
STEPS = 3


def main(out: Path) -> None:
    torch.set_num_threads(1)
    info = init_distributed_device_so(device="cpu")
    rank, world = info["global_rank"], info["world_size"]
    torch.manual_seed(0)
    model = tiny(num_classes=4)
    task = ClassificationTask(model, verbose=False)
    if info["distributed"]:
        task.prepare_distributed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainable = task.get_trainable_module()  # DDP-wrapped under torchrun; Optional in timm only for ema=True
    assert trainable is not None
    losses = []
    for step in range(STEPS):
        pictures = images(SIZES, seed=step)
        labels = torch.arange(len(pictures)) % 4
        mine = list(range(rank, len(pictures), world))
        batch = naflex_batch([pictures[i] for i in mine], patch_size=8, max_seq_len=64)
        loss = F.cross_entropy(trainable(batch), labels[mine])
        (loss * world * len(mine) / len(pictures)).backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach() * len(mine) / len(pictures)
        if info["distributed"]:
            dist.all_reduce(total)
        losses.append(total.item())
    out.mkdir(parents=True, exist_ok=True)
    params = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    safetensors.torch.save_file(params, str(out / f"params_rank{rank}.safetensors"))
    if rank == 0:
        (out / "result.json").write_text(json.dumps(dict(world_size=world, losses=losses)))
    if info["distributed"]:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
