"""Analytic compute of one forward pass, in multiply-adds (MACs).

Convention: one multiply-add = one MAC; FLOPs = 2 x MACs. Only matrix products and the patch
convolution are counted, as ``torch.utils.flop_counter.FlopCounterMode`` does (it reports FLOPs,
i.e. 2 x our MACs); biases, softmax, LayerNorm, GELU and residual adds are left out (well under 1%).
"""

from __future__ import annotations

from collections import OrderedDict

from torch import nn

from ..models import TransformerBlock, VisionTransformer


def block_macs(tokens: int, embed_dim: int, mlp_hidden: int, mlp_matrices: int = 2) -> dict[str, int]:
    """MACs of one block on one image of ``tokens`` tokens.

    attention: qkv T·D·3D + scores QKᵀ T·T·D + weighted values T·T·D + projection T·D·D;
    MLP: fc1 T·D·M + fc2 T·M·D (SwiGLU: a third, the gate's fc1_g).
    """
    t, d = tokens, embed_dim
    return OrderedDict(attention=4 * t * d * d + 2 * t * t * d, mlp=mlp_matrices * t * d * mlp_hidden)


def _linear_macs(module: nn.Module | None) -> int:
    return module.in_features * module.out_features if isinstance(module, nn.Linear) else 0


def forward_macs(model: VisionTransformer) -> dict[str, int]:
    """MACs per image of the architecture's full forward at the model's image size, by part.

    This is ``forward_head(forward_features(x))``, the figure comparable with timm's and
    torchvision's ViTs, and what ``model.forward`` computes. With the opt-in pooled forward
    (``pooled_forward=True``) and ``global_pool='token'``, the last block runs for the pooled
    token(s) only and so does less (about 1/depth of the blocks' work less).

    Works on a model built on ``meta`` (only shapes are read).
    """
    embed = model.patch_embed
    patch_h, patch_w = embed.patch_size
    tokens = embed.num_patches + model.num_prefix_tokens
    embed_dim = model.embed_dim
    first = model.blocks[0]
    assert isinstance(
        first, TransformerBlock
    )  # nn.Sequential types its items as Module; a VisionTransformer's are Blocks
    per_block = block_macs(tokens, embed_dim, *first.mlp_shape)
    depth = len(model.blocks)
    # the head sees one pooled vector per image, or every token when global_pool=''
    pooled = tokens if model.global_pool == "" and model.head_dist is None else 1
    representation = _linear_macs(getattr(model.pre_logits, "fc", None)) * pooled
    heads = [model.head] + ([model.head_dist] if model.head_dist is not None else [])
    # SigLIP's attention pool (global_pool='map') reads the patch tokens with one latent query: part of the head,
    # as its parameters are: q and output projections D·D each, keys and values T·2D·D, scores and values 2·T·D,
    # and its MLP 2·D·M
    pool = model.attn_pool
    pool_macs = 0
    if pool is not None:
        seen = embed.num_patches + (model.num_prefix_tokens if model.pool_include_prefix else 0)
        pool_macs = 2 * embed_dim * embed_dim + 2 * seen * embed_dim * embed_dim + 2 * seen * embed_dim
        pool_macs += 2 * embed_dim * pool.mlp.hidden_features
    macs = OrderedDict(
        patch_embedding=embed.num_patches * embed.in_chans * patch_h * patch_w * embed_dim,
        attention=depth * per_block["attention"],
        mlp=depth * per_block["mlp"],
        representation=representation,
        head=sum(_linear_macs(h) for h in heads) * pooled + pool_macs,
    )
    macs["total"] = sum(macs.values())
    return macs
