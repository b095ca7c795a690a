"""One loader for every route a checkpoint takes into a model: foreign layouts remapped to the model's names.

:func:`checkpoint_filter_fn` is the named path: ``model.load_state_dict(checkpoint_filter_fn(state_dict, model))``
loads a timm, torchvision, Hugging Face transformers or JAX state dict (every format ``vitscratch convert`` reads,
remapped with the key maps of :mod:`timm_vitscratch.layouts`, the ones ``convert`` uses), and timm's ``NaFlexVit``
(:func:`from_naflexvit`: its embedding module's tensors in the classic names; a model built with ``naflex_embeds``
holds timm NaFlexVit's tree, and gets every format in that layout, :func:`to_naflexvit`). timm's ``load_pretrained``
calls it too (``pretrained=True``, a ``pretrained_cfg_overlay`` file or state dict, train.py's ``--pretrained-path``,
``local-dir:``, ``hf-hub:``); :func:`load_pretrained` reads a JAX ``.npz`` with it.

One route cannot be given a filter: timm's ``load_checkpoint(model, file)`` (train.py's ``--initial-checkpoint``,
``create_model(checkpoint_path=...)``) hands the file's state dict straight to ``model.load_state_dict``. For
it, ``VisionTransformer.__init__`` registers :func:`remap_on_load` as a ``load_state_dict`` pre-hook, which runs
:func:`checkpoint_filter_fn` on a foreign state dict (and logs that it did); a state dict in the model's own
names passes untouched.

After a load every tensor of the body comes from the checkpoint. Only a classifier (and a
representation layer) the checkpoint does not have, or has at another size, is freshly initialised,
and that is said in one logged line. What cannot be mapped is a ``ConversionError`` naming the keys.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..errors import ConversionError, listed
from ..gate.weight_dtypes import check_weight_dtypes
from ..layouts import LAYOUTS, Layout, StateDictCheckpoint, detect_layout, open_checkpoint
from ..layouts.keymap import available
from .layers import normal_init_

_logger = logging.getLogger(__name__)
#: the parts a load may initialise afresh: the classifier(s) and the representation layer
HEAD_PREFIXES = ("head.", "head_dist.", "pre_logits.")
#: the key that tells timm's ``NaFlexVit`` layout: its patch projection, a Linear inside its ``embeds`` module
NAFLEXVIT_MARKER = "embeds.proj.weight"
#: timm's ``NaFlexVit`` embedding tensors -> the classic ViT's names (ours); its other names are the classic ones
NAFLEXVIT_NAMES = {
    "embeds.proj.weight": "patch_embed.proj.weight",
    "embeds.proj.bias": "patch_embed.proj.bias",
    "embeds.pos_embed": "pos_embed",
    "embeds.cls_token": "cls_token",
    "embeds.reg_token": "reg_token",
}


def _detect(checkpoint: StateDictCheckpoint, own: set[str]) -> Layout:
    keys = set(checkpoint.keys())
    if keys <= own:
        return LAYOUTS["timm"]
    try:
        return LAYOUTS[detect_layout(checkpoint)[0]]
    except ConversionError:
        raise ConversionError(
            f"cannot load this checkpoint: keys not recognised: {listed(sorted(keys - own), 6)}. Expected a scratch/timm "
            f"ViT state dict or the layout of torchvision, Hugging Face transformers or Google's JAX ViT"
        ) from None


def _fresh(like: torch.Tensor, name: str) -> torch.Tensor:
    """A newly initialised classifier tensor: truncated normal (std .02) weights, zero biases."""
    device = "cpu" if like.is_meta else like.device
    tensor = torch.zeros(like.shape, dtype=like.dtype, device=device)
    if name.endswith("weight"):
        normal_init_(tensor, std=0.02)  # the model's own init rule for a Linear weight
    return tensor


def _resample_pos_embed(value: torch.Tensor, model: Any, fmt: Layout, checkpoint: StateDictCheckpoint) -> torch.Tensor:
    # ``model``: our VisionTransformer, whose module imports this one, so the type cannot be named here
    from timm.layers import resample_abs_pos_embed

    prefix = 0 if getattr(model, "no_embed_class", False) else model.num_prefix_tokens
    return resample_abs_pos_embed(
        value,
        new_size=list(model.patch_embed.grid_size),
        num_prefix_tokens=prefix,
        **fmt.resample_of(checkpoint).kwargs(),
    )


def _resample_patch_kernel(weight: torch.Tensor, size: torch.Size) -> torch.Tensor:
    """A patch projection trained at another patch size, resampled to ``size`` as timm's ViT filter does."""
    from timm.layers import resample_patch_embed

    return resample_patch_embed(weight, list(size), interpolation="bicubic", antialias=True, verbose=False)


def from_naflexvit(state_dict: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """timm's ``NaFlexVit`` state dict in the classic ViT's names, for ``model`` (our ``VisionTransformer``).

    Its Linear patch projection (D, ph * pw * C) becomes the Conv2d kernel (D, C, ph, pw), read in the flat patch
    order the model reads NaFlex patches in (``patchify_channels_last``, timm's default (row, column, channel));
    its (1, H, W, D) position table becomes (1, H * W, D), after zero rows for the prefix tokens the model's table
    has rows for (NaFlexVit adds no position to them), resampled as the model resamples it when the model's grid
    is another. Keys it has no rename for (an embedding norm) are left for the loader to refuse by name.
    """
    out = {NAFLEXVIT_NAMES.get(k, k): v for k, v in state_dict.items()}
    chans, (ph, pw) = model.in_chans, model.patch_embed.patch_size
    linear = out["patch_embed.proj.weight"]
    if linear.dim() != 2 or linear.shape[1] != chans * ph * pw:
        raise ConversionError(
            f"cannot load this timm NaFlexVit checkpoint: embeds.proj.weight {tuple(linear.shape)} is not a Linear "
            f"over the model's {ph}x{pw} patches of {chans} channels ({chans * ph * pw} inputs)"
        )
    if model.patchify_channels_last:
        out["patch_embed.proj.weight"] = linear.reshape(-1, ph, pw, chans).permute(0, 3, 1, 2).contiguous()
    else:
        out["patch_embed.proj.weight"] = linear.reshape(-1, chans, ph, pw)
    table = out.get("pos_embed")
    own = model.state_dict()
    if isinstance(table, torch.Tensor) and table.dim() == 4 and ("pos_embed" in own or "embeds.pos_embed" in own):
        height, width = table.shape[1:3]
        prefix = table.new_zeros(1, model.pos_prefix_tokens, table.shape[-1])
        table = torch.cat([prefix, table.reshape(1, height * width, -1)], dim=1)
        if tuple(model.patch_embed.grid_size) != (height, width):
            table = model.pos_encoding.for_grid(table, *model.patch_embed.grid_size, (height, width), table)
        out["pos_embed"] = table
    return out


def to_naflexvit(state_dict: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """A state dict in the classic ViT's names and shapes (what the key maps give) -> timm ``NaFlexVit``'s, for
    ``model`` built with ``naflex_embeds``: the (D, C, ph, pw) kernel as the Linear over flat patches in the model's
    order (``patchify_channels_last``), the (1, H * W, D) table as (1, H, W, D) on the model's grid."""
    names = {classic: theirs for theirs, classic in NAFLEXVIT_NAMES.items()}
    out = {names.get(k, k): v for k, v in state_dict.items()}
    kernel = out.get("embeds.proj.weight")
    if isinstance(kernel, torch.Tensor) and kernel.dim() == 4:
        if model.patchify_channels_last:
            kernel = kernel.permute(0, 2, 3, 1)
        out["embeds.proj.weight"] = kernel.reshape(kernel.shape[0], -1).contiguous()
    table = out.get("embeds.pos_embed")
    if isinstance(table, torch.Tensor) and table.dim() == 3:
        rows, cols = model.patch_embed.grid_size
        out["embeds.pos_embed"] = table[:, table.shape[1] - rows * cols :].reshape(1, rows, cols, -1)
    return out


def checkpoint_filter_fn(state_dict: Mapping[str, Any], model: nn.Module) -> dict[str, torch.Tensor]:
    """``state_dict`` in any format ``convert`` reads -> ``model``'s names and shapes, every body tensor present.

    timm's filter convention (``pretrained_filter_fn``), and what code holding a foreign state dict calls:
    ``model.load_state_dict(checkpoint_filter_fn(torch.load(path, weights_only=True), model))``. A position table
    of another grid is resampled, a patch kernel of another size too; a classifier of another size is new.
    A model with timm NaFlexVit's tree (``naflex_embeds``) is filtered in the classic names, then given its own.
    """
    if NAFLEXVIT_MARKER in state_dict:
        state_dict = from_naflexvit(state_dict, model)
    if getattr(model, "embeds", None) is not None:
        return to_naflexvit(_filter(state_dict, model, from_naflexvit(model.state_dict(), model)), model)
    return _filter(state_dict, model, model.state_dict())


def _filter(
    state_dict: Mapping[str, Any], model: nn.Module, own: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """:func:`checkpoint_filter_fn` on the classic ViT's names: ``own``, the model's tensors in those names."""
    checkpoint = StateDictCheckpoint(state_dict)
    keys = set(checkpoint.keys())
    fmt = _detect(checkpoint, set(own))
    ignored = fmt.ignorable_keys(checkpoint)
    rules = fmt.key_map(keys, fmt.depth(keys))
    out: dict[str, torch.Tensor] = {}
    used: set[str] = set(ignored)
    head_sources: set[str] = set()
    for target, rule in rules.items():
        if target.startswith(HEAD_PREFIXES):
            head_sources.update(rule.sources)
        if target == "pos_embed" and target not in own and available(rule, keys):
            used.update(rule.sources)  # a fixed (sincos) table is rebuilt, never loaded
        if target not in own or not available(rule, keys):
            continue
        value = rule.op(*[checkpoint.tensor(s) for s in rule.sources])
        if target == "pos_embed" and value.shape != own[target].shape:
            value = _resample_pos_embed(value, model, fmt, checkpoint)
        out[target] = value
        used.update(rule.sources)
    unmatched = sorted(keys - used - head_sources)
    if unmatched:
        raise ConversionError(
            f"cannot load this {fmt.name} checkpoint: keys with no place in the model: {listed(sorted(unmatched), 6)}"
        )
    body = [k for k in own if not k.startswith(HEAD_PREFIXES)]
    missing = [k for k in body if k not in out]
    if missing:
        raise ConversionError(
            f"cannot load this {fmt.name} checkpoint: it lacks {listed(sorted(missing), 6)}; a load never "
            f"leaves body weights random"
        )
    stem = "patch_embed.proj.weight"
    if stem in out and out[stem].shape[-2:] != own[stem].shape[-2:]:
        out[stem] = _resample_patch_kernel(out[stem], own[stem].shape[-2:])
    # another input channel count is left to timm's load_pretrained, which adapts the stem after this filter
    wrong = [
        f"{k} {tuple(out[k].shape)} (model: {tuple(own[k].shape)})"
        for k in body
        if out[k].shape != own[k].shape
        and not (k == stem and out[k].shape[2:] == own[k].shape[2:] and out[k].shape[0] == own[k].shape[0])
    ]
    if wrong:
        raise ConversionError(
            f"cannot load this {fmt.name} checkpoint: shapes differ from the model's: {listed(wrong, 5, '; ', quote=False)}"
        )
    check_floating(out, f"{fmt.name} checkpoint")
    fresh = [k for k in own if k.startswith(HEAD_PREFIXES) and (k not in out or out[k].shape != own[k].shape)]
    _check_representation(own, out, fresh, keys & head_sources, fmt.name)
    for key in fresh:
        out[key] = _fresh(own[key], key)
    dropped = sorted(k for k in keys & head_sources if k not in used)
    if fresh or dropped:
        parts = sorted({k.rsplit(".", 1)[0] for k in fresh})
        _logger.warning(
            "loaded every body tensor from the %s checkpoint; freshly initialised: %s%s",
            fmt.name,
            ", ".join(parts) or "nothing",
            f" (the checkpoint's {', '.join(sorted({k.rsplit('.', 1)[0] for k in dropped}))} not used)"
            if dropped
            else "",
        )
    return out


def _check_representation(
    own: Mapping[str, torch.Tensor], out: Mapping[str, torch.Tensor], fresh: list[str], head_keys: set[str], fmt: str
) -> None:
    """A kept classifier must read what it was trained on: the checkpoint's representation layer (Linear +
    Tanh, "has_logits") exactly when the model has one. Otherwise the logits would be silently wrong, so
    the mismatch is refused unless the classifier itself is new (another ``num_classes``)."""
    kept_head = "head.weight" in own and "head.weight" in out and "head.weight" not in fresh
    model_has = "pre_logits.fc.weight" in own
    checkpoint_has = any("pre_logits" in k for k in head_keys)
    if not kept_head or model_has == checkpoint_has:
        return
    if checkpoint_has:
        raise ConversionError(
            f"this {fmt} checkpoint's classifier reads a representation layer (pre_logits, Linear + Tanh) that the "
            f"model does not have, so its logits would be wrong: build the model with representation_size="
            f"{out['head.weight'].shape[1]} (the scratch_*_in21k variants), or with another num_classes for a new "
            f"classifier on the plain features"
        )
    raise ConversionError(
        f"the model has a representation layer (pre_logits) that this {fmt} checkpoint does not, so it would be "
        f"random while the checkpoint's classifier is kept: build the model without representation_size, or with "
        f"another num_classes so that both are new"
    )


def check_floating(state_dict: Mapping[str, Any], label: str = "checkpoint") -> None:
    """Weights must be float32, float16, bfloat16 or float64 (the gate's one rule, ``gate.weight_dtypes``): a float8,
    int8, bool or complex tensor would be cast to the model's dtype silently."""
    tensors = ((k, v.dtype) for k, v in state_dict.items() if isinstance(v, torch.Tensor))
    check_weight_dtypes(tensors, f"cannot load this {label}", ConversionError)


def remap_on_load(
    module: nn.Module,
    state_dict: dict[str, Any],
    prefix: str,
    local_metadata: Any,
    strict: bool,
    missing_keys: list[str],
    unexpected_keys: list[str],
    error_msgs: list[str],
) -> None:
    """``load_state_dict`` pre-hook (registered by ``VisionTransformer.__init__``) for timm's ``load_checkpoint``,
    which calls ``model.load_state_dict`` with no filter: a foreign state dict is remapped in place by
    :func:`checkpoint_filter_fn` before the model reads it, and an INFO line says so.

    A state dict in the model's own names passes untouched (the usual case costs one set comparison);
    torch reports its missing or unexpected keys as ``strict`` asks (torch does not tell the hook).
    """
    own = set(module.state_dict())
    mine = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
    check_floating({k: v for k, v in mine.items() if k in own})
    if set(mine) <= own or not mine:
        return
    layout = "timm NaFlexVit" if NAFLEXVIT_MARKER in mine else _detect(StateDictCheckpoint(mine), own).name
    if layout == "timm" and getattr(module, "embeds", None) is None:
        return  # our own names (with extras or gaps): torch reports them as ``strict`` asks
    remapped = checkpoint_filter_fn(mine, module)
    _logger.info("load_state_dict: a %s state dict, remapped to the model's names by checkpoint_filter_fn", layout)
    for key in [k for k in state_dict if k.startswith(prefix)]:
        del state_dict[key]
    state_dict.update({prefix + k: v for k, v in remapped.items()})


def load_pretrained(model: nn.Module, checkpoint_path: os.PathLike[str] | str, prefix: str = "") -> None:
    """timm's ``model.load_pretrained`` hook: load a JAX ``.npz`` (or any file ``convert`` reads)."""
    with open_checkpoint(checkpoint_path) as checkpoint:
        state_dict = {k: checkpoint.tensor(k).clone() for k in checkpoint.keys()}
    model.load_state_dict(checkpoint_filter_fn(state_dict, model), strict=True)
