"""One model's inspection report as plain data (what ``vitscratch summary --json`` prints).

Counts, the by-hand tally, the analytic formulas, FLOPs and the per-layer table come from the model
built on ``meta``; only the activation measurement runs real (small) tensors.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from timm.models import get_model_args
from torch import nn

from ..models import TransformerBlock, VisionTransformer
from ..models.architecture import describe_model
from ..models.build import build_on_meta
from ..models.model_args import check_architecture, check_option
from .counts import (
    analytic_param_count,
    block_formula_text,
    block_layers,
    block_param_breakdown,
    block_param_formula,
    block_part_formulas,
    block_shape,
    hidden_parameters,
    leaf_module_param_count,
    model_count_args,
    param_breakdown,
    true_param_count,
)
from .flops import block_macs, forward_macs
from .layer_table import layer_rows
from .memory import TRAINING_BYTES_PER_PARAM, estimate_activation_bytes, training_bytes, weight_bytes
from .model_ref import check_scratch_model, timm_model_name

#: param_breakdown's labels -> the report's keys
_TALLY_KEYS = OrderedDict(
    [
        ("patch embedding (conv)", "patch_embedding"),
        ("class/dist/register tokens", "tokens"),
        ("position embedding", "position_embedding"),
        ("norm before the blocks", "pre_norm"),
        ("encoder blocks", "blocks"),
        ("final norm", "final_norm"),
        ("representation (pre_logits)", "representation"),
        ("classifier head(s)", "head"),
    ]
)

WHY_COUNTS_DIFFER = (
    "torchsummary hooks modules and sums only each hooked module's weight and bias; the parameters "
    "the model or a block holds itself (class, register and distillation tokens, position embedding, "
    "Eva's layer scales and q/v biases) belong to no such module, and a module that never runs (Eva's "
    "qkv under a split bias) fires no hook, so the leaf-module count misses them"
)


def model_kwargs(num_classes: int | None = None, img_size: int | None = None) -> dict[str, Any]:
    """create_model overrides for the options the user gave, inside the bounds a config file has
    (:mod:`timm_vitscratch.models.model_args`); the whole model is checked once built on ``meta``."""
    kwargs: dict[str, Any] = {}
    if num_classes is not None:
        kwargs["num_classes"] = check_option("num_classes", num_classes, "--num-classes")
    if img_size is not None:
        kwargs["img_size"] = check_option("img_size", img_size, "--img-size")
    return kwargs


def _describe(model: VisionTransformer, model_name: str, batch: int) -> dict[str, Any]:
    arch = describe_model(model)
    embed = model.patch_embed
    return OrderedDict(
        name=model_name,
        img_size=list(embed.img_size),
        patch_size=list(embed.patch_size),
        in_chans=arch.in_chans,
        num_patches=embed.num_patches,
        prefix_tokens=model.num_prefix_tokens,
        tokens=embed.num_patches + model.num_prefix_tokens,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_heads=arch.num_heads,
        mlp_hidden=arch.mlp_hidden,
        num_classes=arch.num_classes,
        batch=batch,
    )


def _tally(model: VisionTransformer) -> dict[str, Any]:
    groups = param_breakdown(model)
    tally: dict[str, Any] = OrderedDict((key, groups[label]) for label, key in _TALLY_KEYS.items())
    blocks: list[dict[str, int]] = []
    for block in model.blocks:
        parts = block_param_breakdown(block)
        parts["total"] = sum(parts.values())
        blocks.append(parts)
    tally["blocks"] = blocks
    tally["total"] = sum(groups.values())
    return tally


def _analytic(model: VisionTransformer) -> dict[str, Any]:
    h = model.embed_dim
    arch = describe_model(model)
    shape = block_shape(model.blocks[0])
    text = block_formula_text(h, **shape)
    return OrderedDict(
        h=h,
        block_shape=shape,
        block_layers=block_layers(model.blocks[0]),
        block_formula=text.pop("block"),
        block=block_param_formula(h, **shape),
        parts=OrderedDict((k, v) for k, v in block_part_formulas(h, **shape).items() if k in text),
        part_formulas=text,
        # every figure read from the model; the formula knows square images only: None where it does not apply
        model=analytic_param_count(**model_count_args(model)) if arch.img_size[0] == arch.img_size[1] else None,
    )


def _share(tally: dict[str, Any], macs: dict[str, int], true_count: int) -> dict[str, Any]:
    attention = sum(b["attention"] for b in tally["blocks"])
    mlp = sum(b["mlp"] for b in tally["blocks"])
    in_blocks = sum(b["total"] for b in tally["blocks"])
    return OrderedDict(
        params=OrderedDict(
            attention=attention,
            mlp=mlp,
            attention_of_blocks=attention / in_blocks,
            mlp_of_blocks=mlp / in_blocks,
            attention_of_model=attention / true_count,
            mlp_of_model=mlp / true_count,
        ),
        macs=OrderedDict(
            attention_of_forward=macs["attention"] / macs["total"], mlp_of_forward=macs["mlp"] / macs["total"]
        ),
    )


def _flops(model: VisionTransformer, batch: int) -> dict[str, Any]:
    per_image = forward_macs(model)
    first = model.blocks[0]
    assert isinstance(
        first, TransformerBlock
    )  # nn.Sequential types its items as Module; a VisionTransformer's are Blocks
    per_block = block_macs(model.patch_embed.num_patches + model.num_prefix_tokens, model.embed_dim, *first.mlp_shape)
    return OrderedDict(
        convention="MACs = multiply-adds of matrix products and the patch convolution; FLOPs = 2 x MACs "
        "(FlopCounterMode's unit); biases, softmax, norms, GELU and adds are not counted",
        per_image_macs=per_image,
        per_block_macs=per_block,
        per_image_flops=2 * per_image["total"],
        batch=batch,
        batch_macs=batch * per_image["total"],
        batch_flops=2 * batch * per_image["total"],
    )


def _memory(model_name: str, kwargs: dict[str, Any], true_count: int, batch: int, activations: bool) -> dict[str, Any]:
    states = training_bytes(true_count)
    training: dict[str, Any] = OrderedDict(
        bytes_per_param=sum(TRAINING_BYTES_PER_PARAM.values()),
        bytes_per_param_by_item=OrderedDict(TRAINING_BYTES_PER_PARAM),
        states_bytes=sum(states.values()),
    )
    if activations:
        measured = estimate_activation_bytes(model_name, batch, **kwargs)
        if measured["bytes"] is None:  # could not be measured in bounded memory: said, not guessed
            training["activations_method"] = measured["method"]
        else:
            training["activations_bytes"] = measured["bytes"]
            training["activations_method"] = measured["method"] + (
                "; tensors autograd saves for backward under torch.autocast(bfloat16), "
                "parameters and their half-precision copies excluded"
            )
            training["total_bytes"] = training["states_bytes"] + measured["bytes"]
    return OrderedDict(
        weights_bytes=weight_bytes(true_count),
        inference_fp16_bytes=2 * true_count,
        training_mixed_precision_adamw=training,
    )


def built_from(model: nn.Module) -> tuple[str, dict[str, Any]]:
    """The registered name and the ``create_model`` arguments that rebuild ``model``'s architecture: its
    ``pretrained_cfg["architecture"]`` and the arguments timm recorded when building it (``get_model_args``,
    what ``save_config_for_hf`` writes as ``model_args``); a ValueError when they would build another one."""
    check_scratch_model(model, type(model).__name__)
    name = getattr(model, "pretrained_cfg", {}).get("architecture")
    recorded = {k: v for k, v in get_model_args(model).items() if k not in ("pretrained_cfg_overlay", "cache_dir")}
    rebuilt = build_on_meta(name, **recorded) if isinstance(name, str) else None
    if not isinstance(name, str) or rebuilt is None or describe_model(rebuilt) != describe_model(model):
        raise ValueError(
            f"cannot tell which architecture this {type(model).__name__} was built as (architecture {name!r}, "
            f"recorded arguments {recorded}): pass the name it was built from, e.g. build_report('scratch_vit_b16')"
        )
    return name, recorded


def build_report(
    model_name: str | nn.Module,
    num_classes: int | None = None,
    img_size: int | None = None,
    batch: int = 1,
    layers: bool = False,
    activations: bool = True,
) -> dict[str, Any]:
    """Everything ``vitscratch summary`` shows about one model, as JSON-ready data.

    ``model_name``: a registered name, a pretrained tag, a model directory, ``local-dir:DIR`` or
    ``hf-hub:ORG/NAME`` (only its config is read; the model is built on ``meta``), or a model of ours built
    by ``timm.create_model`` (its architecture is rebuilt on ``meta`` from what timm recorded; see
    :func:`built_from`). ``num_classes`` and ``img_size`` override the model's.
    """
    if batch < 1:
        raise ValueError(f"--batch must be >= 1, got {batch}")
    recorded: dict[str, Any] = {}
    if isinstance(model_name, nn.Module):
        model_name, recorded = built_from(model_name)
    kwargs = {**recorded, **model_kwargs(num_classes, img_size)}
    timm_name = timm_model_name(model_name)
    model = check_scratch_model(build_on_meta(timm_name, **kwargs), model_name)
    arch = describe_model(model)
    check_architecture({**arch.constructor_args(), "num_classes": model.num_classes}, f"{model_name} with {kwargs}")
    true_count = true_param_count(model)
    shapes = dict(model.named_parameters())
    hidden = hidden_parameters(model)
    tally = _tally(model)
    macs = forward_macs(model)
    report: dict[str, Any] = OrderedDict(
        model=_describe(model, model_name, batch),
        counts=OrderedDict(
            true=true_count,
            leaf_module=leaf_module_param_count(model),
            difference=true_count - leaf_module_param_count(model),
            hidden=OrderedDict((n, OrderedDict(shape=list(shapes[n].shape), params=c)) for n, c in hidden.items()),
            why=WHY_COUNTS_DIFFER,
        ),
        tally=tally,
        analytic=_analytic(model),
        share=_share(tally, macs, true_count),
        flops=_flops(model, batch),
        memory=_memory(timm_name, kwargs, true_count, batch, activations),
    )
    if layers:
        embed = model.patch_embed
        rows = layer_rows(model, (embed.in_chans, *embed.img_size), batch=batch)
        report["layers"] = [row.as_dict() for row in rows]
    return report
