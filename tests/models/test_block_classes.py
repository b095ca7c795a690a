"""Blocks are found by class, never by name: every block of every family is a ``TransformerBlock``, the model lists
the classes one may be (``VisionTransformer.block_types``), and FSDP's wrap policy and activation checkpointing,
given those classes, reach exactly the blocks, with outputs unchanged. The classes are chosen once, from the
options (models/block_layers.py); the forwards of blocks and attention do not branch on the family."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from timm_vitscratch.models import TransformerBlock, VisionTransformer
from timm_vitscratch.models.attention import Attention, EvaAttention, SeparateQkvAttention
from timm_vitscratch.models.block import Block, EvaBlock, ScaledEvaBlock
from timm_vitscratch.models.layers import Mlp, PackedSwiGLU, SwiGLU

TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=5)
#: options of each family -> (block class, attention class, MLP class)
FAMILIES = {
    "vit": ({}, Block, Attention, Mlp),
    "deit3": ({"init_values": 1e-5}, Block, Attention, Mlp),
    "dinov3": (
        dict(
            eva_names=True, init_values=1e-5, rope_type="dinov3", pos_embed="none", swiglu_mlp=True, swiglu_align_to=8
        ),
        ScaledEvaBlock,
        EvaAttention,
        SwiGLU,
    ),
    "dinov3_no_qkv_bias": (dict(eva_names=True, init_values=1e-5, qkv_bias=False), ScaledEvaBlock, Attention, Mlp),
    "pe": (dict(eva_names=True, attn_type="rope", rope_type="cat"), EvaBlock, Attention, Mlp),
    "eva02": (
        dict(eva_names=True, qkv_fused=False, rope_type="cat", swiglu_mlp=True, scale_mlp=True),
        EvaBlock,
        SeparateQkvAttention,
        SwiGLU,
    ),
    "eva02_tiny": (dict(eva_names=True, swiglu_mlp=True), EvaBlock, EvaAttention, PackedSwiGLU),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_blocks_are_found_by_class(family: str) -> None:
    options, block_cls, attn_cls, mlp_cls = FAMILIES[family]
    torch.manual_seed(0)
    model = VisionTransformer(**TINY, **options).eval()
    blocks = [m for m in model.modules() if isinstance(m, TransformerBlock)]
    assert blocks == list(model.blocks)
    assert all(type(b) is block_cls and type(b.attn) is attn_cls and type(b.mlp) is mlp_cls for b in blocks)
    assert block_cls in VisionTransformer.block_types
    # FSDP's policy matches exact classes: given block_types, it wraps each block and nothing else below the root
    wrapped = ModuleWrapPolicy(set(VisionTransformer.block_types))._run_policy(model, set(), {})
    assert [m for m in wrapped if m is not model] == blocks
    # activation checkpointing by class: every block wrapped, the forward unchanged
    x = torch.randn(2, 3, 32, 32)
    expected = model(x)
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, TransformerBlock))
    assert sum(type(m).__name__ == "CheckpointWrapper" for m in model.modules()) == TINY["depth"]
    assert torch.equal(model(x), expected)


FAMILY_NAMES = ("eva_names", "qkv_fused", "attn_type", "separate", "qkv_form", "gamma_1 is", "ls1 is", "swiglu")


@pytest.mark.parametrize("cls", [Block, EvaBlock, ScaledEvaBlock, Attention, EvaAttention, SeparateQkvAttention])
def test_forwards_do_not_branch_on_the_family(cls: type) -> None:
    source = textwrap.dedent(inspect.getsource(cls.forward))
    branches = [node for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.If, ast.IfExp))]
    tests = [ast.unparse(node.test) for node in branches]
    assert not [t for t in tests if any(name in t for name in FAMILY_NAMES)], tests
    assert all(t in ALLOWED_TESTS for t in tests), tests


#: what a forward may ask: an input's presence (as attn_mask's), timm's own attention switch, training mode (dropout),
#: and whether the layer holds separate biases (timm's Eva asks the same; the class chose them once, when built)
ALLOWED_TESTS = (
    "rope is not None",
    "segments is not None and (not torch.jit.is_scripting())",  # as ast.unparse writes it
    "self.fused_attn",
    "self.training",
    "self.q_bias is None",
)
