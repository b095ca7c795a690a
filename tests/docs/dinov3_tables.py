"""The tables docs/dinov3.md shows, from the registry and the models themselves (its checked blocks run these).

python -m tests.docs.dinov3_tables tags      # every DINOv3 tag: timm's weights, license, input
python -m tests.docs.dinov3_tables counts    # true and torchsummary counts, ours next to timm's
python -m tests.docs.dinov3_tables rotary    # the rotary terms' dtype and error after a cast
python -m tests.docs.dinov3_tables streaming # the 7B's convert and loads (benchmarks/results/stream-7b*.json)
python -m tests.docs.dinov3_tables drift     # how far a bf16 cast moves the output, ours and timm's
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import timm
import torch

from timm_vitscratch.models.pretrained import TIMM_TAGS


def _table(header: list[str], rows: list[list[str]], right: int) -> str:
    """Columns from ``right`` on are right-aligned (numbers)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for cells in [header, ["-" * w for w in widths], *rows]:
        padded = [c.rjust(w) if i >= right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def tags() -> str:
    rows = []
    for ours in TIMM_TAGS:
        if not ours.startswith("scratch_dinov3_"):
            continue
        cfg = timm.models.get_pretrained_cfg(ours)
        assert cfg is not None and cfg.hf_hub_id and cfg.license, ours
        size = "x".join(str(s) for s in cfg.input_size[1:])
        mean = "ImageNet" if tuple(cfg.mean) == timm.data.IMAGENET_DEFAULT_MEAN else ", ".join(map(str, cfg.mean))
        rows.append([ours, cfg.hf_hub_id, cfg.license, size, mean])
    return _table(["tag", "weights (timm's repo)", "license", "input", "mean"], rows, right=5)


def _ours_terms(model: Any, grid: int) -> torch.Tensor:
    return model.rope.for_grid(grid, grid, torch.device("cpu"))  # (2, N, head_dim): sines, cosines


def _timm_terms(model: Any, grid: int) -> torch.Tensor:
    # a fixed-size model returns its cached table; a dynamic-size one builds one for the grid asked
    embed = model.rope.get_embed() if model.rope.feat_shape is not None else model.rope.get_embed(shape=[grid, grid])
    return torch.stack(embed.chunk(2, dim=-1))  # (N, 2 * head_dim) of [sines, cosines] -> (2, N, head_dim)


def rotary() -> str:
    """Each model cast to bf16 and fp16: the dtype of its rotary terms, and their largest error against the fp32 terms."""
    grid, rows = 16, []
    for dynamic in (True, False):
        build: dict[str, tuple[str, Callable[[Any, int], torch.Tensor]]] = {
            "ours": ("scratch_dinov3_s16", _ours_terms),
            "timm": ("vit_small_patch16_dinov3", _timm_terms),
        }
        for who, (name, terms) in build.items():
            model = timm.create_model(name, depth=1, dynamic_img_size=dynamic).eval()
            reference = terms(model, grid).double()
            for dtype in (torch.bfloat16, torch.float16):
                cast = terms(copy.deepcopy(model).to(dtype), grid)  # each cast from the fp32 model
                error = (cast.double() - reference).abs().max().item()
                rows.append(
                    [
                        who,
                        str(dynamic),
                        str(dtype).removeprefix("torch."),
                        str(cast.dtype).removeprefix("torch."),
                        f"{error:.1e}",
                    ]
                )
    header = ["model", "dynamic_img_size", "model cast to", "rotary terms", "max |error|"]
    return _table(header, rows, right=4)


def drift() -> str:
    """S/16 with the same (perturbed) weights in ours and timm's Eva, cast to bfloat16: the features' distance
    from each model's own float32 features, at 224 px, and the two bfloat16 outputs' distance from each other."""
    from tests.support.dinov3_pairs import dinov3_pair

    torch.manual_seed(0)
    reference, ours = dinov3_pair("scratch_dinov3_s16")
    x = torch.randn(4, 3, 224, 224)
    rows = []
    with torch.no_grad():
        full = {"ours": ours.forward_features(x), "timm": reference.forward_features(x)}
        half = {}
        for who, model in (("ours", ours), ("timm", reference)):
            half[who] = model.to(torch.bfloat16).forward_features(x.bfloat16()).float()
            error = (half[who] - full[who]).abs()
            rows.append([who, f"{error.max().item():.4f}", f"{error.mean().item():.5f}"])
    gap = (half["ours"] - half["timm"]).abs().max().item()
    table = _table(["model", "max |bf16 - fp32|", "mean |bf16 - fp32|"], rows, right=1)
    return table + f"\n\nours in bfloat16 against timm's in bfloat16: max |difference| {gap:.1e}"


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def streaming() -> str:
    """The synthetic 7B (benchmarks/stream_7b.py): each step's peak memory above the imports, and its time."""
    runs = {}
    for name in ("stream-7b.json", "stream-7b-pretrained.json"):
        record = json.loads((RESULTS / name).read_text())
        runs.update(record["7b"] if "7b" in record else {"pretrained": record})
    checkpoint = runs["checkpoint"]
    rows = []
    steps = [
        ("vitscratch convert", runs["convert"]),
        ("create_model, local-dir: (converted)", runs["load"]["local-dir"]),
        ("create_model, pretrained_cfg_overlay file=", runs["pretrained"]["load"]["file"]),
        ("create_model, tag from the Hub cache", runs["pretrained"]["load"]["tag"]),
    ]
    for label, step in steps:
        child = step.get("child", {})
        mapped = child.get("memory_mapped_bytes")
        rows.append(
            [
                label,
                f"{step['peak_above_imports_mb']:,} MB",
                f"{step['peak_above_imports_over_checkpoint']:.3f}",
                f"{step['peak_above_imports_over_largest_tensor']:.1f}",
                "-" if mapped is None else f"{mapped / child['model_bytes']:.0%}",
                f"{step['wall_seconds']:.0f} s",
            ]
        )
    head = (
        f"checkpoint: {checkpoint['bytes'] / 1e9:.1f} GB {checkpoint['dtype']}, {checkpoint['tensors']} tensors, "
        f"{checkpoint['parameters']:,} parameters; largest tensor {checkpoint['largest_tensor']['name']} "
        f"{checkpoint['largest_tensor']['bytes'] / 1e6:.1f} MB"
    )
    header = ["step", "peak above imports", "x checkpoint", "x largest tensor", "memory-mapped", "time"]
    return head + "\n\n" + _table(header, rows, right=1)


TABLES = {"tags": tags, "rotary": rotary, "streaming": streaming, "drift": drift}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in TABLES:
        sys.exit(f"usage: python -m tests.docs.dinov3_tables {{{','.join(TABLES)}}}")
    print(TABLES[sys.argv[1]]())
