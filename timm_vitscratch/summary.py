"""Text reports of the counts: the zoo table and one model's count summary."""
from __future__ import annotations

from typing import List, Optional

from .counting import (
    TORCHVISION_EQUIVALENTS, block_param_formula, build_on_meta, hidden_parameters,
    leaf_module_param_count, param_breakdown, torchvision_param_count, true_param_count,
)
from .variants import ARCHITECTURES


def _fmt(value: Optional[int]) -> str:
    return "—" if value is None else f"{value:,}"


def zoo_table(reference: bool = True) -> str:
    """Every registered variant at its default head: true count, leaf count, torchvision's count."""
    header = ["model", "classes", "true count", "torchsummary count", "hidden"]
    if reference:
        header += ["torchvision", "same"]
    rows: List[List[str]] = []
    for name in ARCHITECTURES:
        model = build_on_meta(name)
        true_count, leaf_count = true_param_count(model), leaf_module_param_count(model)
        row = [name, str(model.num_classes), _fmt(true_count), _fmt(leaf_count), _fmt(true_count - leaf_count)]
        if reference:
            tv_count = torchvision_param_count(name)
            tv_name = TORCHVISION_EQUIVALENTS.get(name, "VisionTransformer")
            row += [f"{tv_count:,} ({tv_name})" if tv_count is not None else "—",
                    "—" if tv_count is None else ("yes" if tv_count == true_count else "NO")]
        rows.append(row)
    return _render(header, rows)


def _render(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    def line(cells: List[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def count_summary(model_name: str, num_classes: Optional[int] = None) -> str:
    """Both counts for one model, why they differ, and the by-hand tally that sums to the true count."""
    kwargs = {} if num_classes is None else dict(num_classes=num_classes)
    model = build_on_meta(model_name, **kwargs)
    arch = ARCHITECTURES[model_name]
    h, depth = arch["embed_dim"], arch["depth"]
    true_count, leaf_count = true_param_count(model), leaf_module_param_count(model)
    hidden = hidden_parameters(model)
    shapes = dict(model.named_parameters())
    lines = [
        f"{model_name}: img_size {tuple(model.patch_embed.img_size)}, patch {model.patch_embed.patch_size[0]}, "
        f"embed_dim {h}, depth {depth}, heads {arch['num_heads']}, num_classes {model.num_classes}",
        "",
        f"  true count (sum of model.parameters())      {true_count:>15,}",
        f"  leaf-module count (what torchsummary prints) {leaf_count:>14,}",
        f"  difference                                  {true_count - leaf_count:>15,}",
        "  torchsummary only sums the weight/bias of the modules it hooks; these parameters belong",
        "  to the model itself, so it never sees them:",
    ]
    for name, numel in hidden.items():
        lines.append(f"    {name:<12} {str(tuple(shapes[name].shape)):<18} {numel:>12,}")
    lines += ["", "  by-hand tally"]
    for group, count in param_breakdown(model).items():
        if count:
            note = ""
            if group == "encoder blocks":
                note = f"  = {depth} x (12h²+13h), h={h}: {depth} x {block_param_formula(h):,}"
            lines.append(f"    {group:<30} {count:>14,}{note}")
    lines.append(f"    {'total':<30} {sum(param_breakdown(model).values()):>14,}  (= true count)")
    return "\n".join(lines)
