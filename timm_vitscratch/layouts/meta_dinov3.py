"""Meta's original DINOv3 checkpoints (``facebookresearch/dinov3``: ``dinov3_vit*_pretrain_*.pth``).

Meta's names onto timm's ``Eva`` names, which are ours for the DINOv3 family: ``storage_tokens`` are the
register tokens, ``ls1.gamma`` / ``ls2.gamma`` the layer scales ``gamma_1`` / ``gamma_2``, and the SwiGLU's
``w1`` / ``w2`` / ``w3`` are ``fc1_g`` / ``fc1_x`` / ``fc2``. The fused ``qkv.bias`` is q, k, v stacked; its
``bias_mask`` is applied as Meta's attention applies it (``qkv.bias * bias_mask``): the masked q and v thirds
become ``q_bias`` / ``v_bias`` (a mask that zeroes the q third gives a zero q bias), and the k bias must be
zero after the mask (under rotary position a k bias would change the attention). Biases that are zero
altogether are dropped, as timm's non-``_qkvb`` models drop them. ``rope_embed.periods`` (the rotary periods, a
buffer) is checked against DINOv3's rotary and gives the head width; the mask token and the 7B's
``local_cls_norm`` (used in training only) and EUPE's distillation ``projectors`` are dropped.
"""

from __future__ import annotations

import re

import torch

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Op, Rule, third, weight_and_bias
from .layout import Layout

#: the keys only Meta's layout has (timm's Eva names have none of them)
MARKERS = ("storage_tokens", "rope_embed.periods")
#: keys identity for inference, never loaded: training-only parts and fixed buffers (a ``qkv.bias_mask`` is read
#: with its bias, and dropped with it)
TRAINING_ONLY = re.compile(r"^(mask_token|rope_embed\.periods|local_cls_norm\..*|projectors\..*)$")
#: DINOv3's rotary base (``pos_embed_rope_base``), the only one ``rope_type='dinov3'`` models here are built with
ROPE_BASE = 100.0


def rope_periods(head_dim: int, base: float = ROPE_BASE) -> torch.Tensor:
    """The periods DINOv3's rotary stores for ``head_dim``-wide heads: ``base ** (4 i / head_dim)``."""
    return base ** (4 * torch.arange(head_dim // 4, dtype=torch.float64) / head_dim)


class MetaDinov3Layout(Layout):
    name = "meta_dinov3"
    library = "Meta's DINOv3"
    block_pattern = r"^blocks\.(\d+)\."
    example_keys = ("storage_tokens", "blocks.0.ls1.gamma", "rope_embed.periods")

    def detect(self, keys: set[str]) -> bool:
        return "patch_embed.proj.weight" in keys and any(marker in keys for marker in MARKERS)

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        rules: KeyMap = {"cls_token": Rule.rename("cls_token"), "reg_token": Rule.rename("storage_tokens")}
        weight_and_bias(rules, "patch_embed.proj", "patch_embed.proj")
        for i in range(depth):
            block = f"blocks.{i}."
            for norm in ("norm1", "norm2"):
                weight_and_bias(rules, block + norm, block + norm)
            rules[block + "attn.qkv.weight"] = Rule.rename(block + "attn.qkv.weight")
            bias = block + "attn.qkv.bias"
            if bias + "_mask" in keys:  # Meta's attention computes with qkv.bias * bias_mask
                rules[block + "attn.q_bias"] = Rule((bias, bias + "_mask"), masked_third(0))
                rules[block + "attn.v_bias"] = Rule((bias, bias + "_mask"), masked_third(2))
            else:
                rules[block + "attn.q_bias"] = Rule((bias,), third(0))
                rules[block + "attn.v_bias"] = Rule((bias,), third(2))
            weight_and_bias(rules, block + "attn.proj", block + "attn.proj")
            rules[block + "gamma_1"] = Rule.rename(block + "ls1.gamma")
            rules[block + "gamma_2"] = Rule.rename(block + "ls2.gamma")
            if f"{block}mlp.w1.weight" in keys:  # SwiGLU (S+, H+, 7B)
                for theirs, ours in (("w1", "fc1_g"), ("w2", "fc1_x"), ("w3", "fc2")):
                    weight_and_bias(rules, f"{block}mlp.{ours}", f"{block}mlp.{theirs}")
            else:
                for fc in ("fc1", "fc2"):
                    weight_and_bias(rules, f"{block}mlp.{fc}", f"{block}mlp.{fc}")
        weight_and_bias(rules, "norm", "norm")
        weight_and_bias(rules, "head", "head")
        return rules

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        keys = set(checkpoint.keys())
        ignored = {k for k in keys if TRAINING_ONLY.match(k)}
        if "rope_embed.periods" in keys:
            check_periods(checkpoint)
        biases = sorted(k for k in keys if re.match(r"^blocks\.\d+\.attn\.qkv\.bias$", k))
        zero = [qkv_bias_is_zero(checkpoint, key) for key in biases]  # every mask checked, none skipped
        if biases and all(zero):
            ignored.update(biases)  # all zero: a model without q/v biases computes the same
        # a mask is read with its bias (the q / v biases are the masked ones); without a bias to mask it says nothing
        masks = (k for k in keys if re.match(r"^blocks\.\d+\.attn\.qkv\.bias_mask$", k))
        ignored.update(k for k in masks if k.removesuffix("_mask") not in keys - ignored)
        return ignored


def masked_third(index: int) -> Op:
    """An op taking the ``index``-th third of a fused q/k/v bias after its ``bias_mask`` (as Meta's attention
    applies it: ``qkv.bias * bias_mask``, in the bias's dtype)."""
    part = third(index)

    def masked(bias: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return part(bias * mask.to(bias.dtype))

    return masked


def apply_bias_masks(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` with every fused ``qkv.bias`` multiplied by its ``bias_mask`` (what Meta's attention computes
    with), for readers that ignore the mask (timm's importer)."""
    out = dict(state_dict)
    for key, bias in state_dict.items():
        mask = state_dict.get(key + "_mask")
        if key.endswith(".qkv.bias") and mask is not None and mask.shape == bias.shape:
            out[key] = bias * mask.to(bias.dtype)
    return out


def qkv_bias_is_zero(checkpoint: Checkpoint, key: str) -> bool:
    """Whether a fused q/k/v bias (with its ``bias_mask`` applied) is zero; refuses a k bias the mask lets through."""
    bias = checkpoint.tensor(key).float()
    mask_key = key + "_mask"
    if mask_key in checkpoint:
        mask = checkpoint.tensor(mask_key).float()
        if mask.shape != bias.shape or not torch.isin(mask, torch.tensor([0.0, 1.0])).all():
            raise ConversionError(
                f"{mask_key!r} is not a 0/1 mask of {key!r}'s shape {tuple(bias.shape)}; expected DINOv3's "
                f"k-bias mask (ones for q and v, zeros for k)",
                checkpoint.path,
            )
        bias = bias * mask
    k_bias = bias.chunk(3, dim=0)[1]
    if bool(k_bias.any()):
        raise ConversionError(
            f"{key!r} has a non-zero key bias (after its mask); DINOv3 models keep the key bias at zero (under "
            f"rotary position it would change the attention), and so do timm's and ours",
            checkpoint.path,
        )
    return not bool(bias.any())


def check_periods(checkpoint: Checkpoint) -> None:
    """``rope_embed.periods`` must be DINOv3's rotary at base 100 (the only one the model builds): one dimension of
    ``head_dim / 4`` finite floating-point periods, ``head_dim`` dividing the width (it gives the head count)."""
    shape, dtype = checkpoint.shape("rope_embed.periods"), checkpoint.dtype("rope_embed.periods")
    expected = "expected DINOv3's rotary periods, one dimension of head_dim / 4 floating-point values"
    if len(shape) != 1 or not shape[0]:
        raise ConversionError(f"rope_embed.periods has shape {tuple(shape)}; {expected}", checkpoint.path)
    if not dtype.is_floating_point:
        raise ConversionError(f"rope_embed.periods is {str(dtype).removeprefix('torch.')}; {expected}", checkpoint.path)
    head_dim = 4 * shape[0]
    stem = checkpoint.shape("patch_embed.proj.weight") if "patch_embed.proj.weight" in checkpoint else ()
    if stem:  # a stem of another rank is refused with the other shapes
        width = stem[0]
        if width % head_dim:
            raise ConversionError(
                f"rope_embed.periods has {shape[0]} periods (head_dim {head_dim}), which does not divide the width "
                f"{width} (patch_embed.proj.weight); {expected} whose head_dim divides the width",
                checkpoint.path,
            )
    periods = checkpoint.tensor("rope_embed.periods").double()
    if not bool(periods.isfinite().all()) or not torch.allclose(periods, rope_periods(head_dim), rtol=1e-2):
        raise ConversionError(
            f"rope_embed.periods {periods.flatten()[:4].tolist()}... is not DINOv3's rotary with base "
            f"{ROPE_BASE:g} (periods {ROPE_BASE:g} ** (4 i / head_dim)); other rotary settings are not supported",
            checkpoint.path,
        )


#: the layout of source meta_dinov3 (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = MetaDinov3Layout()
