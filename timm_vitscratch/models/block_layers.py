"""The block, attention and MLP classes a model is built with, chosen once from its options (timm's ``block_fn``,
``attn_layer`` and ``mlp_layer``).

The options keep timm's names, the ones a ``config.json`` and the variant table carry: ``eva_names`` (timm's
``Eva`` and its names), ``qkv_fused`` and ``attn_type`` (``Eva``'s projection layouts), ``init_values``,
``swiglu_mlp`` / ``swiglu_align_to`` / ``scale_mlp`` (the MLP by ``Eva``'s rule). :func:`block_layers` maps them to
classes here and nowhere else; the blocks, attention layers and MLPs then compute without asking which family
they belong to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

from torch import nn

from .attention import Attention, EvaAttention, SeparateQkvAttention
from .block import AttnLayer, Block, EvaBlock, MlpFactory, ScaledEvaBlock, TransformerBlock
from .layers import FactoryKwargs, Mlp, NormLayer, PackedSwiGLU, SwiGLU


class BlockLayers(NamedTuple):
    """The classes of a model's blocks: the block (``block_fn``), its attention and its MLP (options bound)."""

    block_fn: type[TransformerBlock]
    attn_layer: AttnLayer
    mlp_layer: MlpFactory


def block_layers(
    *,
    eva_names: bool,
    qkv_fused: bool,
    attn_type: str,
    qkv_bias: bool,
    init_values: float | None,
    swiglu_mlp: bool,
    swiglu_align_to: int,
    scale_mlp: bool,
    mlp_layer: str = "",
    act_layer: Callable[[], nn.Module],
    norm_layer: NormLayer,
) -> BlockLayers:
    """The classes timm's options name. Block: timm ``VisionTransformer``'s (``ls1`` / ``ls2``), or with ``eva_names``
    its ``EvaBlock`` (``gamma_1`` / ``gamma_2`` with ``init_values``). Attention: one ``qkv`` with its bias (the
    classic ViT; ``Eva``'s ``attn_type='rope'``), ``Eva``'s ``q_bias`` / ``v_bias`` beside ``qkv``, or its
    ``q_proj`` / ``k_proj`` / ``v_proj`` (``qkv_fused=False``). MLP by ``Eva``'s rule: GELU (``act_layer``) unless
    ``swiglu_mlp``; a SwiGLU with separate input layers when aligned (``swiglu_align_to``) or normalised inside
    (``scale_mlp``, EVA02's normformer MLP: a LayerNorm before fc2), else the packed one. ``mlp_layer='swiglu'``
    names timm's ``SwiGLU`` outright, as timm's ``VisionTransformer`` takes ``mlp_layer=SwiGLU`` (AIMv2)."""
    block_fn: type[TransformerBlock] = Block
    attn_layer: AttnLayer = Attention
    if eva_names:
        block_fn = ScaledEvaBlock if init_values else EvaBlock
        if not qkv_fused:
            attn_layer = SeparateQkvAttention
        elif attn_type != "rope" and qkv_bias:
            attn_layer = EvaAttention
    inner = norm_layer if scale_mlp else None
    mlp_fn: MlpFactory
    if mlp_layer == "swiglu" or (swiglu_mlp and (swiglu_align_to or scale_mlp)):
        mlp_fn = functools.partial(SwiGLU, align_to=swiglu_align_to, norm_layer=inner)
    elif not swiglu_mlp:
        mlp_fn = functools.partial(Mlp, act_layer=act_layer, norm_layer=inner)
    else:
        mlp_fn = PackedSwiGLU
    return BlockLayers(block_fn, attn_layer, mlp_fn)


def build_blocks(
    layers: BlockLayers,
    depth: int,
    dim: int,
    num_heads: int,
    *,
    drop_path_rate: float,
    dd: FactoryKwargs,
    **options: Any,
) -> nn.Sequential:
    """``depth`` blocks of ``layers``, stochastic depth rising linearly from 0 at the first to ``drop_path_rate`` at
    the last; ``options``: each block's other options (``mlp_ratio``, ``qkv_bias``, ``init_values`` ...)."""
    rates = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
    block_fn, attn_layer, mlp_layer = layers
    return nn.Sequential(
        *[
            block_fn(dim, num_heads, attn_layer=attn_layer, mlp_layer=mlp_layer, drop_path=rate, **options, **dd)
            for rate in rates
        ]
    )
