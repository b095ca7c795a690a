"""Per-layer table in torchsummary's layout, from forward hooks on the model's own modules.

Like torchsummary, every module except the model itself and plain containers (``nn.Sequential``,
``nn.ModuleList``) is hooked, rows appear in the order the modules finish their forward, and a row's
parameter count is its ``weight`` plus ``bias``. Only shapes are needed, so by default the model runs
on the ``meta`` device: no memory and no compute even for ViT-H.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

CONTAINERS = (nn.Sequential, nn.ModuleList)  # what torchsummary skips
RULE_WIDTH = 96


@dataclass(frozen=True)
class LayerRow:
    layer: str  # torchsummary's "Type-index" label, e.g. "Conv2d-1"
    module: str  # qualified module name, e.g. "patch_embed.proj"
    output_shape: list  # [-1, ...] with -1 for the batch axis; a list of those for tuple outputs
    params: int  # weight + bias, what torchsummary sums

    def as_dict(self) -> dict[str, Any]:
        return dict(layer=self.layer, module=self.module, output_shape=self.output_shape, params=self.params)


def _shape(output: Any) -> list:
    if isinstance(output, (tuple, list)):
        return [[-1] + list(o.shape[1:]) for o in output]
    return [-1] + list(output.shape[1:])


def _own_weight_and_bias(module: nn.Module) -> int:
    return sum(p.numel() for n, p in module.named_parameters(recurse=False) if n in ("weight", "bias"))


def layer_rows(model: nn.Module, input_size: Sequence[int], batch: int = 2) -> list[LayerRow]:
    """Run one eval forward of ``batch`` inputs of ``input_size`` (C, H, W) on the model's device and
    return one row per hooked module call."""
    device = next(model.parameters()).device
    rows: list[LayerRow] = []
    handles = []

    def hook_for(name: str) -> Callable[[nn.Module, Any, Any], None]:
        def hook(module: nn.Module, _inputs: Any, output: Any) -> None:
            label = f"{type(module).__name__}-{len(rows) + 1}"
            rows.append(LayerRow(label, name, _shape(output), _own_weight_and_bias(module)))

        return hook

    for name, module in model.named_modules():
        if module is model or isinstance(module, CONTAINERS):
            continue
        handles.append(module.register_forward_hook(hook_for(name)))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(batch, *input_size, device=device))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return rows


def render_layer_table(rows: list[LayerRow], hidden: dict[str, Sequence[int]]) -> str:
    """torchsummary-style text: the rows, then the model's own parameters no layer holds.

    ``hidden`` maps parameter name -> shape.
    """
    lines = [
        "-" * RULE_WIDTH,
        f"{'Layer (type)':>22}  {'Module':<30} {'Output Shape':>25} {'Param #':>15}",
        "=" * RULE_WIDTH,
    ]
    for row in rows:
        lines.append(f"{row.layer:>22}  {row.module:<30} {row.output_shape!s:>25} {row.params:>15,}")
    in_layers = sum(row.params for row in rows)
    lines += ["=" * RULE_WIDTH, f'Params in layers (torchsummary\'s "Total params"): {in_layers:,}']
    hidden_total = 0
    if hidden:
        lines.append("Held by the model itself (no layer's weight/bias; torchsummary skips them):")
        for name, shape in hidden.items():
            numel = 1
            for size in shape:
                numel *= size
            hidden_total += numel
            lines.append(f"{'Parameter':>22}  {name:<30} {list(shape)!s:>25} {numel:>15,}")
    lines += [f"Total params (true count): {in_layers + hidden_total:,}", "-" * RULE_WIDTH]
    return "\n".join(lines)
