"""A synthetic DINOv3 7B checkpoint (random weights, 13.4 GB in bfloat16), written tensor by tensor.

The tensors are timm's ``vit_7b_patch16_dinov3`` (6,716,030,976 parameters), in timm's names (``--names
timm``, the layout timm publishes) or in Meta's (``--names meta``: ``storage_tokens``, ``ls1.gamma``,
``mlp.w1/w2/w3``, plus the ``mask_token`` and ``rope_embed.periods`` Meta's files carry). The file is laid
out as ``safetensors.torch.save_file`` lays it out (tensors by name, the header padded to 8 bytes), with
its data starting at a multiple of 8 that is not one of 64: the case in which a load must copy each tensor
to align it (timm_vitscratch/models/storage.py), the harder one for memory.

Memory stays at one chunk of one tensor (``--chunk`` elements): the shapes come from a model built on
``meta``, each tensor is drawn in chunks and written as it is drawn. ``--depth``, ``--embed-dim`` and
``--num-heads`` make a smaller model of the same architecture (the tests use them). The file is written
under a temporary name and renamed when complete.

    python benchmarks/make_synthetic_7b.py OUT.safetensors [--names timm|meta] [--dtype bfloat16] [--depth N]

Prints one JSON line: the path, its size, the tensor count, the largest tensor and the time taken.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import time
from pathlib import Path
from typing import Any

import torch

from timm_vitscratch.files import atomic_write

TIMM_MODEL = "vit_7b_patch16_dinov3"
#: timm's names -> Meta's, the reverse of the renames timm's Eva ``checkpoint_filter_fn`` applies
META_NAMES = (
    ("reg_token", "storage_tokens"),
    ("gamma_1", "ls1.gamma"),
    ("gamma_2", "ls2.gamma"),
    ("mlp.fc1_g", "mlp.w1"),
    ("mlp.fc1_x", "mlp.w2"),
    ("mlp.fc2", "mlp.w3"),
)
DTYPES = {"bfloat16": (torch.bfloat16, "BF16"), "float16": (torch.float16, "F16"), "float32": (torch.float32, "F32")}
ALIGNMENT = 64  # PyTorch's CPU allocator alignment: the data start is kept off it on purpose (see above)


def timm_shapes(depth: int | None = None, **overrides: Any) -> dict[str, tuple[int, ...]]:
    """Name -> shape of timm's 7B state dict (built on ``meta``: no memory), at ``depth`` blocks if given."""
    import timm

    kwargs = {**overrides, **({"depth": depth} if depth is not None else {})}
    model = timm.create_model(TIMM_MODEL, device="meta", **kwargs)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def meta_layout(shapes: dict[str, tuple[int, ...]], head_dim: int) -> dict[str, tuple[tuple[int, ...], bool]]:
    """timm's names and shapes renamed to Meta's; the extra tensors Meta's files hold (float32 periods)."""
    renamed: dict[str, tuple[tuple[int, ...], bool]] = {}
    for name, shape in shapes.items():
        for timm_part, meta_part in META_NAMES:
            name = name.replace(timm_part, meta_part)
        renamed[name] = (shape, False)
    renamed["mask_token"] = ((1, shapes["cls_token"][-1]), False)
    renamed["rope_embed.periods"] = ((head_dim // 4,), True)
    return renamed


def header_bytes(entries: list[tuple[str, str, tuple[int, ...], int]]) -> bytes:
    """safetensors' header for (name, dtype, shape, bytes) in file order: padded to 8, data start off 64."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    if (8 + len(encoded)) % ALIGNMENT == 0:
        encoded += b" " * 8
    return struct.pack("<Q", len(encoded)) + encoded


def _values(name: str, numel: int, start: int, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` values of tensor ``name`` from element ``start``: norms' weights about 1, the rest N(0, .02)."""
    if name.endswith("periods"):  # Meta's rotary periods: 100 ** (2i / (head_dim / 2)), as its model computes
        index = torch.arange(start, start + count, dtype=torch.float64)
        return torch.pow(100.0, 2 * index / (2 * numel)).float()
    values = torch.randn(count, generator=generator).mul_(0.02)
    if "norm" in name and name.endswith("weight"):
        values.add_(1.0)
    return values


def write_synthetic(
    path: Path,
    names: str = "timm",
    dtype: str = "bfloat16",
    depth: int | None = None,
    chunk: int = 1 << 24,
    seed: int = 0,
    **overrides: Any,
) -> dict[str, Any]:
    """Write the checkpoint to ``path``; returns what the JSON line reports."""
    start_time = time.perf_counter()
    torch_dtype, st_dtype = DTYPES[dtype]
    shapes = timm_shapes(depth, **overrides)
    embed_dim = shapes["cls_token"][-1]
    num_heads = overrides.get("num_heads", 32)
    layout = (
        meta_layout(shapes, embed_dim // num_heads) if names == "meta" else {k: (s, False) for k, s in shapes.items()}
    )
    # safetensors' own order: wider dtypes first, then by name
    order = sorted(layout, key=lambda k: (not layout[k][1], k))
    entries = []
    for name in order:
        shape, is_f32 = layout[name]
        item = 4 if is_f32 else torch.empty((), dtype=torch_dtype).element_size()
        entries.append((name, "F32" if is_f32 else st_dtype, shape, math.prod(shape) * item))
    generator = torch.Generator().manual_seed(seed)
    with atomic_write(path, "wb") as handle:
        handle.write(header_bytes(entries))
        for name, _, shape, _ in entries:
            numel = math.prod(shape)
            out_dtype = torch.float32 if layout[name][1] else torch_dtype
            for first in range(0, numel, chunk):
                count = min(chunk, numel - first)
                values = _values(name, numel, first, count, generator).to(out_dtype)
                handle.write(values.view(torch.uint8).numpy().data)
    largest = max(entries, key=lambda entry: entry[3])
    return {
        "path": str(path),
        "names": names,
        "dtype": dtype,
        "bytes": path.stat().st_size,
        "tensors": len(entries),
        "parameters": sum(math.prod(shapes[k]) for k in shapes),
        "largest_tensor": {"name": largest[0], "bytes": largest[3]},
        "data_start_mod_64": (path.stat().st_size - sum(e[3] for e in entries)) % ALIGNMENT,
        "seconds": time.perf_counter() - start_time,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--names", choices=("timm", "meta"), default="timm")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bfloat16")
    parser.add_argument("--depth", type=int, default=None, help="blocks (default: the 7B's 40)")
    parser.add_argument("--embed-dim", type=int, default=None, help="width (default: the 7B's 4096)")
    parser.add_argument("--num-heads", type=int, default=None, help="heads (default: the 7B's 32)")
    parser.add_argument("--chunk", type=int, default=1 << 24, help="elements drawn at once")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    overrides = {key: value for key, value in (("embed_dim", args.embed_dim), ("num_heads", args.num_heads)) if value}
    summary = write_synthetic(args.out, args.names, args.dtype, args.depth, args.chunk, args.seed, **overrides)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
