"""Memory per rank under FSDP2: what a rank holds, counted, and the same by formula for every size of the zoo.

Counted (:func:`local_state_bytes`): the storage of this rank's parameters, gradients and optimizer state (a
sharded tensor counts its local shard, FSDP's padding included), each storage once.

By formula (:func:`estimate`), per rank of ``N``, fp32 shards with bf16 compute and AdamW:

- state: 16 bytes per parameter, sharded: fp32 parameter, fp32 gradient, AdamW's two fp32 moments, ``/ N``;
- gathered: the largest block's parameters unsharded in bf16, twice (the block computing and the one prefetched),
  and its gradient unsharded in fp32 for the reduction, 8 bytes per parameter of a block, plus the root's
  parameters (patch embedding, tokens, norm, head) unsharded in bf16 and their fp32 gradient (6 bytes each);
- activations, per image: ``c x D x L`` bytes per block, with ``L`` the tokens at the model's default input size,
  ``D`` its width, and ``c`` the bytes autograd saves per token and unit of width in one block, measured with
  :func:`~timm_vitscratch.inspect.memory.measure_activation_bytes` (bf16 autocast) on copies of the same family at
  width 64, one block and two; with activation checkpointing each block keeps its bf16 input (``2 x D x L``) and
  one block at a time holds all of its activations again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import timm
import torch
from torch import nn

from ..models.block import TransformerBlock
from ..models.build import build_on_meta

#: fp32 parameter + fp32 gradient + AdamW's two fp32 moments
STATE_BYTES_PER_PARAM = 16
#: per parameter of a block: bf16 unsharded twice (computing, prefetched) + its fp32 unsharded gradient
GATHERED_BYTES_PER_BLOCK_PARAM = 8
#: per root parameter: bf16 unsharded + fp32 unsharded gradient
GATHERED_BYTES_PER_ROOT_PARAM = 6
#: the width of the copies ``c`` is measured on
PROBE_WIDTH = 64
GIB = 1 << 30


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def local_state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of this rank's parameters, gradients and optimizer state: local shards' storage, each storage once."""
    seen: set[int] = set()

    def storage_bytes(tensors: Iterable[Any]) -> int:
        total = 0
        for tensor in tensors:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = _local(tensor).untyped_storage()
            if storage.nbytes() and storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            total += storage.nbytes()
        return total

    parameters = list(model.parameters())
    found = {
        "parameters": storage_bytes(parameters),
        "gradients": storage_bytes(p.grad for p in parameters if p.grad is not None),
        "optimizer": 0,
    }
    if optimizer is not None:
        found["optimizer"] = storage_bytes(v for state in optimizer.state.values() for v in state.values())
    return found


@dataclass(frozen=True)
class Size:
    """One size of the zoo: its first registered name, counts, width, depth and tokens at its default input."""

    name: str
    params: int
    block_params: int
    root_params: int
    width: int
    depth: int
    tokens: int
    bytes_per_token_width: float  # c: activation bytes one block saves per token and unit of width


def _blocks(model: nn.Module) -> list[nn.Module]:
    return [module for module in model.modules() if isinstance(module, TransformerBlock)]


def _tokens(model: nn.Module) -> int:
    embed: Any = model.patch_embed
    return int(embed.num_patches) + int(getattr(model, "num_prefix_tokens", 0))


def _measured_c(name: str, args: dict[str, Any]) -> float:
    """Activation bytes per token per unit of width of one block, on width-64 copies with one and two blocks."""
    from ..inspect.memory import measure_activation_bytes  # local: torch work only for the estimate

    patch = args.get("patch_size", 16)
    narrow = {"embed_dim": PROBE_WIDTH, "num_heads": 4, "img_size": 2 * patch, "num_classes": 0}
    measured = []
    for depth in (1, 2):
        torch.manual_seed(0)
        model = timm.create_model(name, depth=depth, **narrow)
        measured.append(measure_activation_bytes(model, 2))  # type: ignore[arg-type]
    per_image_block = (measured[1] - measured[0]) / 2
    return per_image_block / _tokens(model) / PROBE_WIDTH


def zoo_sizes(rows: Iterable[Any]) -> list[Size]:
    """One :class:`Size` per (width, depth) among the zoo's rows (``vitscratch list``'s), the first name of each."""
    firsts: dict[tuple[int, int], Any] = {}
    for row in rows:
        firsts.setdefault((int(row.args["embed_dim"]), int(row.args["depth"])), row)
    sizes = []
    for (width, depth), row in firsts.items():
        name = row.name
        model = build_on_meta(name)
        blocks = _blocks(model)
        per_block = max(sum(p.numel() for p in block.parameters()) for block in blocks)
        total = sum(p.numel() for p in model.parameters())
        in_blocks = sum(p.numel() for block in blocks for p in block.parameters())
        c = _measured_c(name, dict(row.args))
        sizes.append(Size(name, total, per_block, total - in_blocks, width, depth, _tokens(model), c))
    return sorted(sizes, key=lambda size: size.params)


def estimate(size: Size, ranks: int, batch: int, checkpointing: bool) -> dict[str, float]:
    """Bytes per rank of ``ranks`` (see the module's docstring), ``batch`` images per rank."""
    state = STATE_BYTES_PER_PARAM * size.params / ranks
    gathered = GATHERED_BYTES_PER_BLOCK_PARAM * size.block_params + GATHERED_BYTES_PER_ROOT_PARAM * size.root_params
    block = size.bytes_per_token_width * size.width * size.tokens * batch
    if checkpointing:
        activations = 2 * size.width * size.tokens * batch * size.depth + block
    else:
        activations = block * size.depth
    return {"state": state, "gathered": gathered, "activations": activations}


def _gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def render(sizes: Sequence[Size], ranks: Sequence[int], batch: int) -> str:
    """The table: per-rank GiB of state, gathered parameters and activations, and totals, without / with AC."""
    head = ["model", "params", "tokens", "c"]
    head += [f"state /{n}" for n in ranks] + ["gathered", "act.", "act. (AC)"]
    head += [f"total {n} GPUs" for n in ranks] + [f"total {n} GPUs (AC)" for n in ranks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for size in sizes:
        plain = {n: estimate(size, n, batch, False) for n in ranks}
        ac = {n: estimate(size, n, batch, True) for n in ranks}
        first = plain[ranks[0]]
        cells = [f"`{size.name}`", f"{size.params / 1e9:.2f} B", str(size.tokens), f"{size.bytes_per_token_width:.1f}"]
        cells += [_gib(plain[n]["state"]) for n in ranks]
        cells += [_gib(first["gathered"]), _gib(first["activations"]), _gib(ac[ranks[0]]["activations"])]
        cells += [_gib(sum(plain[n].values())) for n in ranks] + [_gib(sum(ac[n].values())) for n in ranks]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timm_vitscratch.train.memory",
        description="GiB per rank for every size of the zoo under FSDP2 (fp32 shards, bf16 compute, AdamW)",
    )
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16], help="world sizes")
    parser.add_argument("-b", "--batch", type=int, default=8, help="images per GPU")
    parser.add_argument("--json", action="store_true", help="the sizes as JSON instead of the table")
    args = parser.parse_args(argv)
    from ..inspect.zoo_counts import registry_rows

    sizes = zoo_sizes(registry_rows(reference=False))
    if args.json:
        print(json.dumps([asdict(size) for size in sizes], indent=1))
    else:
        print(render(sizes, args.gpus, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
