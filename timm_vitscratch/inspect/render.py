"""Text reports: the zoo table and one model's summary (counts, tally, FLOPs, memory, layers)."""

from __future__ import annotations

import re
import textwrap
from collections import OrderedDict
from typing import Any

from .layer_table import LayerRow, render_layer_table
from .report import build_report
from .zoo_counts import registry_rows, render_table, zoo_text


def zoo_table(reference: bool = True) -> str:
    """Every registered variant at its default head: true count, leaf count, and the true count of the same
    architecture in torchvision (classic ViT) or timm (DINOv3 ...). The counts are those pinned in
    ``zoo_counts.json`` (:mod:`.zoo_counts`); a variant the file does not hold at its arguments is built on
    ``meta`` and counted (``vitscratch list --live`` builds them all: :func:`.zoo_counts.live_rows`)."""
    return zoo_text(registry_rows(reference), reference)


def count_summary(model_name: str, num_classes: int | None = None) -> str:
    """Both counts for one model, why they differ, and the by-hand tally that sums to the true count."""
    report = build_report(model_name, num_classes=num_classes, activations=False)
    return "\n".join([_header(report), ""] + _count_lines(report) + [""] + _tally_lines(report))


def render_report(report: dict[str, Any]) -> str:
    """The text ``vitscratch summary`` prints for a report from ``build_report``."""
    lines = [_header(report), ""]
    if "layers" in report:
        rows = [LayerRow(**row) for row in report["layers"]]
        hidden = {name: item["shape"] for name, item in report["counts"]["hidden"].items()}
        lines += [render_layer_table(rows, hidden), ""]
    for section in (_count_lines, _tally_lines, _analytic_lines, _share_lines, _flops_lines, _memory_lines):
        lines += section(report) + [""]
    return "\n".join(lines).rstrip() + "\n"


def _header(report: dict[str, Any]) -> str:
    m = report["model"]
    return (
        f"{m['name']}: image {m['img_size'][0]}x{m['img_size'][1]}, patch {m['patch_size'][0]} -> "
        f"{m['num_patches']} patches + {m['prefix_tokens']} prefix token(s) = {m['tokens']} tokens; "
        f"embed_dim {m['embed_dim']}, depth {m['depth']}, heads {m['num_heads']}, MLP {m['mlp_hidden']}, "
        f"num_classes {m['num_classes']}"
    )


def _count_lines(report: dict[str, Any]) -> list[str]:
    c = report["counts"]
    lines = [
        "Parameters",
        f"  true count (sum of model.parameters())       {c['true']:>15,}",
        f"  leaf-module count (what torchsummary prints) {c['leaf_module']:>15,}",
        f"  difference                                   {c['difference']:>15,}",
        "  torchsummary only sums the weight/bias of the modules it hooks; these parameters belong",
        "  to the model itself, so it never sees them:",
    ]
    hidden = _per_block(c["hidden"])
    if any(name.endswith(".qkv.weight") for name in hidden):
        lines.append("  (qkv.weight: with Eva's split bias the attention applies it by F.linear, so qkv never runs)")
    width = max([12] + [len(name) for name in hidden])
    for name, (shape, params, count) in hidden.items():
        each = f"  ({count} blocks)" if count > 1 else ""
        lines.append(f"    {name:<{width}} {tuple(shape)!s:<18} {params:>12,}{each}")
    return lines


def _per_block(hidden: dict[str, Any]) -> dict[str, tuple[list[int], int, int]]:
    """The hidden parameters with every block's own as one line (``blocks.*.gamma_1``): shape, total, blocks."""
    lines: dict[str, tuple[list[int], int, int]] = OrderedDict()
    for name, item in hidden.items():
        key = re.sub(r"^blocks\.\d+\.", "blocks.*.", name)
        _, params, count = lines.get(key, (item["shape"], 0, 0))
        lines[key] = (item["shape"], params + item["params"], count + 1)
    return lines


def _block_groups(blocks: list[dict[str, int]]) -> list[tuple[int, int, dict[str, int]]]:
    """Runs of consecutive identical blocks as (first, last, parts)."""
    groups: list[tuple[int, int, dict[str, int]]] = []
    for index, parts in enumerate(blocks):
        if groups and groups[-1][2] == parts:
            groups[-1] = (groups[-1][0], index, parts)
        else:
            groups.append((index, index, parts))
    return groups


def _tally_lines(report: dict[str, Any]) -> list[str]:
    t, depth = report["tally"], report["model"]["depth"]
    labels = [
        ("patch_embedding", "patch embedding (conv)"),
        ("tokens", "class/dist/register tokens"),
        ("position_embedding", "position embedding"),
        ("pre_norm", "norm before the blocks"),
    ]
    lines = ["By-hand tally"]
    lines += [f"    {label:<30} {t[key]:>14,}" for key, label in labels if t[key]]
    for first, last, parts in _block_groups(t["blocks"]):
        span = f"block {first}" if first == last else f"blocks {first}-{last}, each"
        scale = f" + layer scale {parts['layer_scale']:,}" if parts.get("layer_scale") else ""
        lines.append(
            f"    {span:<30} {parts['total']:>14,}  = attention {parts['attention']:,} + "
            f"MLP {parts['mlp']:,} + norms {parts['norms']:,}{scale}"
        )
    in_blocks = sum(b["total"] for b in t["blocks"])
    a = report["analytic"]
    lines.append(
        f"    {'encoder blocks':<30} {in_blocks:>14,}  = {depth} x ({a['block_formula']}), {_h_and_m(a)}: "
        f"{depth} x {a['block']:,}"
    )
    labels = [
        ("final_norm", "final norm"),
        ("representation", "representation (pre_logits)"),
        ("head", "classifier head(s)"),
    ]
    lines += [f"    {label:<30} {t[key]:>14,}" for key, label in labels if t[key]]
    lines.append(f"    {'total':<30} {t['total']:>14,}  (= true count)")
    return lines


def _h_and_m(analytic: dict[str, Any]) -> str:
    """``h=768``, and ``M=...`` where the formulas name the MLP width (it is not 4h)."""
    hidden = analytic["block_shape"]["mlp_hidden"]
    return f"h={analytic['h']}" + ("" if hidden == 4 * analytic["h"] else f", M={hidden}")


def _block_words(shape: dict[str, Any], layers: dict[str, str], h: int) -> tuple[str, dict[str, str]]:
    """The block's description for the analytic heading, and a note per part saying what it sums."""
    biases = {3: "qkv bias", 2: "q and v biases", 0: "no qkv bias"}[shape["qkv_biases"]]
    if layers["qkv"] == "separate":
        biases = f"separate q, k, v projections, {biases}"
    qkv = {3: "qkv 3h²+3h", 2: "qkv 3h², q and v biases 2h", 0: "qkv 3h²"}[shape["qkv_biases"]]
    if layers["qkv"] == "separate":
        qkv = qkv.replace("qkv 3h²", "q, k, v h² each", 1)
    if shape["mlp_matrices"] == 3:
        packed = layers["mlp"] == "PackedSwiGLU"
        mlp = f"{'packed ' if packed else ''}SwiGLU width M = {shape['mlp_hidden']}"
        mlp_note = "fc1 2hM+2M, fc2 hM+h" if packed else "fc1_g and fc1_x hM+M each, fc2 hM+h"
    elif shape["mlp_hidden"] == 4 * h:
        mlp, mlp_note = "MLP ratio 4", "fc1 4h²+4h, fc2 4h²+h"
    else:
        mlp, mlp_note = f"MLP width M = {shape['mlp_hidden']}", "fc1 hM+M, fc2 hM+h"
    if shape.get("mlp_norm"):
        mlp, mlp_note = f"{mlp} with a norm inside", f"{mlp_note}, LayerNorm 2M before fc2"
    inner = ["a norm on the merged heads"] if shape.get("attn_norm") else []
    words = ", ".join([mlp, biases] + inner + (["layer scale"] if shape["layer_scale"] else []))
    notes = dict(
        attention=f"{qkv}, {'LayerNorm 2h, ' if shape.get('attn_norm') else ''}projection h²+h",
        mlp=mlp_note,
        norms="two LayerNorms, weight + bias",
        layer_scale="two scales of h",
    )
    return words, notes


def _analytic_lines(report: dict[str, Any]) -> list[str]:
    a = report["analytic"]
    words, notes = _block_words(a["block_shape"], a["block_layers"], a["h"])
    lines = [f"Analytic, per block (h = {a['h']}, {words})"]
    width = max(10, *(len(part) for part in a["part_formulas"]))
    column = max(9, len(a["block_formula"]))  # the formulas' column: the block's is the longest
    for part, formula in a["part_formulas"].items():
        label = part.replace("_", " ")
        lines.append(f"    {label:<{width}} {formula:<{column}} = {a['parts'][part]:>12,}  ({notes[part]})")
    lines.append(f"    {'block':<{width}} {a['block_formula']:<{column}} = {a['block']:>12,}")
    if a["model"] is None:
        lines.append("    whole model from the architecture alone: not given (the formula takes square images)")
    elif a["model"] != report["counts"]["true"]:
        lines.append(
            f"    whole model from the architecture alone: {a['model']:,} (the true count differs: the formula "
            "does not cover an option of this model)"
        )
    else:
        lines.append(f"    whole model from the architecture alone: {a['model']:,}")
    return lines


def _share_lines(report: dict[str, Any]) -> list[str]:
    p, m = report["share"]["params"], report["share"]["macs"]
    return [
        "MLP vs attention",
        f"    parameters: MLP {p['mlp']:,} ({p['mlp_of_blocks']:.1%} of the blocks, {p['mlp_of_model']:.1%} "
        f"of the model) vs attention {p['attention']:,} ({p['attention_of_blocks']:.1%}, "
        f"{p['attention_of_model']:.1%})",
        f"    forward MACs: MLP {m['mlp_of_forward']:.1%} vs attention {m['attention_of_forward']:.1%} "
        "(attention includes the token-count-squared score and value products)",
    ]


def _flops_lines(report: dict[str, Any]) -> list[str]:
    f, m = report["flops"], report["model"]
    macs = f["per_image_macs"]
    labels = [
        ("patch_embedding", "patch embedding"),
        ("attention", f"attention ({m['depth']} blocks)"),
        ("mlp", f"MLP ({m['depth']} blocks)"),
        ("representation", "representation"),
        ("head", "head(s)"),
    ]
    lines = [
        f"FLOPs, one forward at {m['img_size'][0]}x{m['img_size'][1]} (analytic: 1 MAC = one multiply-add, "
        "FLOPs = 2 x MACs;",
        "  matrix products and the patch convolution only)",
    ]
    lines += [f"    {label:<24} {macs[key]:>18,} MACs" for key, label in labels if macs[key]]
    lines.append(
        f"    {'per image':<24} {macs['total']:>18,} MACs = {macs['total'] / 1e9:.2f} GMACs "
        f"= {f['per_image_flops'] / 1e9:,.2f} GFLOPs"
    )
    if f["batch"] > 1:
        lines.append(
            f"    {'batch of ' + str(f['batch']):<24} {f['batch_macs']:>18,} MACs = "
            f"{f['batch_macs'] / 1e9:,.2f} GMACs = {f['batch_flops'] / 1e9:,.2f} GFLOPs"
        )
    return lines


def _bytes(value: int, exact: bool = False) -> str:
    suffix = f" ({value:,} bytes)" if exact else ""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:,.2f} {unit}{suffix}"
    return f"{value:,} bytes"


def _memory_lines(report: dict[str, Any]) -> list[str]:
    mem = report["memory"]
    w, t = mem["weights_bytes"], mem["training_mixed_precision_adamw"]
    items = " + ".join(f"{item} {size}" for item, size in t["bytes_per_param_by_item"].items())
    lines = [
        "Memory (estimates; 1 GiB = 2^30 bytes)",
        f"    weights: fp32 {_bytes(w['fp32'])}, fp16 {_bytes(w['fp16'])}, bf16 {_bytes(w['bf16'])}",
        f"    inference in fp16 ≈ 2 bytes/param: {_bytes(mem['inference_fp16_bytes'])} "
        "(weights; activations are freed block by block)",
        f"    mixed-precision AdamW training ≈ {t['bytes_per_param']} bytes/param: {_bytes(t['states_bytes'], True)}",
        *(f"      {line}" for line in textwrap.wrap(f"= {items}", 92)),
    ]
    if "activations_bytes" in t:
        batch = report["model"]["batch"]
        lines += [
            f"    + activations for batch {batch}: {_bytes(t['activations_bytes'], True)}",
            *(f"      {line}" for line in textwrap.wrap(t["activations_method"], 92)),
            f"    = training total ≈ {_bytes(t['total_bytes'], True)}",
        ]
    return lines


def _norm_name(mean: tuple[float, ...], std: tuple[float, ...]) -> str:
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, IMAGENET_INCEPTION_MEAN, IMAGENET_INCEPTION_STD

    if tuple(mean) == IMAGENET_DEFAULT_MEAN and tuple(std) == IMAGENET_DEFAULT_STD:
        return "imagenet"
    if tuple(mean) == IMAGENET_INCEPTION_MEAN and tuple(std) == IMAGENET_INCEPTION_STD:
        return "0.5/0.5"
    return f"{tuple(mean)}/{tuple(std)}"


def pretrained_table() -> str:
    """Every pretrained tag: where its weights live, its classes, preprocessing, license and top-1."""
    from timm.models import get_pretrained_cfg

    from ..models.pretrained import pretrained_tags, top1

    header = ["tag", "weights", "classes", "input", "crop", "interp", "mean/std", "license", "top-1"]
    rows: list[list[str]] = []
    for name in sorted(pretrained_tags()):
        pretrained = get_pretrained_cfg(name)
        if pretrained is None:  # pretrained_tags() lists the tags registered with timm
            raise KeyError(f"timm has no pretrained cfg for {name!r}")
        cfg = pretrained.to_dict()  # what timm's registry holds, not the table
        where = f"hf-hub:{cfg['hf_hub_id']}" if cfg.get("hf_hub_id") else cfg["url"].rsplit("/", 1)[-1]
        accuracy = top1(cfg)
        rows.append(
            [
                name,
                where,
                str(cfg["num_classes"]),
                str(cfg["input_size"][-1]),
                f"{cfg['crop_pct']:g}",
                cfg["interpolation"],
                _norm_name(cfg["mean"], cfg["std"]),
                cfg["license"],
                f"{accuracy:.2f}" if accuracy is not None else "—",
            ]
        )
    return render_table(header, rows)
