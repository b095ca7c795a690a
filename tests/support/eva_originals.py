"""timm's PE and EVA02 (its ``Eva``), tiny and with random weights, written in the layouts their authors publish.

Meta's PE code and BAAI's EVA02 code are not packages: their files are made here from a timm model by the inverse
of timm's own importer (``timm.models.eva._convert_pe`` and ``checkpoint_filter_fn``). That timm's importer loads
each file back into timm's model with the same outputs is what the tests check first: it proves the file is what
timm reads as Meta's or BAAI's.
"""

from __future__ import annotations

from typing import Any, cast

import timm
import torch
from timm.models.eva import Eva
from torch import nn

#: small enough for every test: 4 heads of width 16 (the axial rotary needs a multiple of 4)
TINY = dict(embed_dim=64, depth=2, num_heads=4)
#: PE at 64 x 64 with patch 16: its rotary reference grid is the position table's, as in every PE Meta released
PE_SIZE = dict(img_size=64, ref_feat_shape=(4, 4))
#: EVA02 at 56 x 56 with patch 14 (its rotary reference grid stays the family's 16 x 16)
EVA02_SIZE = dict(img_size=56)


def randomized(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter drawn at random (norm and layer scales near 1, so that no block is an identity), in eval."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            near_one = param.dim() == 1 and (("norm" in name and name.endswith("weight")) or "gamma" in name)
            param.copy_(1 + 0.1 * noise if near_one else noise / 8)
    return model.eval()


def timm_model(timm_name: str, seed: int = 0, **overrides: Any) -> Eva:
    """timm's model of that name, tiny (``TINY`` unless overridden), every weight random."""
    model = cast(Eva, randomized(timm.create_model(timm_name, **{**TINY, **overrides}), seed))
    if "pe_core" in timm_name:
        with torch.no_grad():
            cast(nn.Linear, model.head).bias.zero_()  # Meta's projection has no bias: timm's importer makes it zero
    return model


# --- Meta's Perception Encoder -------------------------------------------------------------------------------------
PE_BLOCK = (
    ("norm1.", "ln_1."),
    ("norm2.", "ln_2."),
    ("attn.qkv.weight", "attn.in_proj_weight"),
    ("attn.qkv.bias", "attn.in_proj_bias"),
    ("attn.proj.", "attn.out_proj."),
    ("mlp.fc1.", "mlp.c_fc."),
    ("mlp.fc2.", "mlp.c_proj."),
    ("gamma_1", "ls_1.gamma"),
    ("gamma_2", "ls_2.gamma"),
)
PE_TOP = (
    ("patch_embed.proj.weight", "conv1.weight"),
    ("norm_pre.", "ln_pre."),
    ("norm.", "ln_post."),
    ("attn_pool.latent", "attn_pool.probe"),
    ("attn_pool.proj.", "attn_pool.attn.out_proj."),
    ("attn_pool.norm.", "attn_pool.layernorm."),
    ("attn_pool.mlp.fc1.", "attn_pool.mlp.c_fc."),
    ("attn_pool.mlp.fc2.", "attn_pool.mlp.c_proj."),
)


def _renamed(key: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for ours, theirs in pairs:
        if key.startswith(ours):
            return theirs + key[len(ours) :]
    raise KeyError(key)


def meta_pe_state_dict(model: nn.Module, clip: bool = False) -> dict[str, torch.Tensor]:
    """Meta's names for a timm PE: OpenAI CLIP's (``conv1``, ``transformer.resblocks``, ``ln_pre`` / ``ln_post``),
    the attention pool's fused ``in_proj`` and ``probe``, the head as ``proj`` (width x output, no bias). ``clip``:
    a whole CLIP model, the tower under ``visual.`` beside a text tower of the same names."""
    prefix = "visual." if clip else ""
    out: dict[str, torch.Tensor] = {}
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for key, value in state.items():
        if key == "cls_token":
            out["class_embedding"] = value.reshape(-1)
        elif key == "pos_embed":
            out["positional_embedding"] = value[0]
        elif key.startswith("blocks."):
            index, rest = key[len("blocks.") :].split(".", 1)
            out[f"transformer.resblocks.{index}.{_renamed(rest, PE_BLOCK)}"] = value
        elif key.startswith(("attn_pool.q.", "attn_pool.kv.")):
            part = key.rsplit(".", 1)[1]
            out[f"attn_pool.attn.in_proj_{part}"] = torch.cat(
                [state[f"attn_pool.q.{part}"], state[f"attn_pool.kv.{part}"]]
            )
        elif key == "head.weight":
            out["proj"] = value.t().contiguous()
        elif key == "head.bias":
            assert not value.any(), "Meta's projection has no bias"
        else:
            out[_renamed(key, PE_TOP)] = value
    out = {prefix + k: v for k, v in out.items()}
    if clip:
        width = 32
        out.update(
            {
                "positional_embedding": torch.randn(8, width),
                "token_embedding.weight": torch.randn(100, width),
                "transformer.resblocks.0.attn.in_proj_weight": torch.randn(3 * width, width),
                "transformer.resblocks.0.ln_1.weight": torch.ones(width),
                "ln_final.weight": torch.ones(width),
                "text_projection": torch.randn(width, 16),
                "logit_scale": torch.tensor(4.6),
            }
        )
    return out


# --- BAAI's EVA02 ------------------------------------------------------------------------------------------------
EVA_RENAMES = (
    (".mlp.norm.", ".mlp.ffn_ln."),
    (".attn.norm.", ".attn.inner_attn_ln."),
    (".mlp.fc1_g.", ".mlp.w1."),
    (".mlp.fc1_x.", ".mlp.w2."),
    (".mlp.fc2.", ".mlp.w3."),
    (".mlp.fc1.", ".mlp.w12."),
    (".attn.q_proj.bias", ".attn.q_bias"),
    (".attn.v_proj.bias", ".attn.v_bias"),
)


def baai_eva_state_dict(model: nn.Module, mim: bool = False, clip: bool = False) -> dict[str, torch.Tensor]:
    """BAAI's names for a timm EVA02: ``w1`` / ``w2`` / ``w3`` (packed: ``w12``), ``ffn_ln``, ``inner_attn_ln``,
    ``q_bias`` / ``v_bias`` beside separate projections, the rotary's fixed tables under ``rope.``. ``mim``: a MIM
    pretraining checkpoint (the pooling norm as ``norm``, a mask token and the ``lm_head``); ``clip``: EVA-CLIP's
    whole model, the tower under ``visual.`` beside a text tower."""
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        for ours, theirs in EVA_RENAMES:
            key = key.replace(ours, theirs)
        if mim and key.startswith("fc_norm."):
            key = key[len("fc_") :]
        out[key] = value.detach().clone()
    eva: Any = model  # timm's Eva, read by its attributes
    width = int(eva.embed_dim)
    head_dim = width // int(eva.blocks[0].attn.num_heads)
    grid = eva.patch_embed.grid_size
    out["rope.freqs_cos"] = torch.randn(grid[0] * grid[1], head_dim)  # fixed buffers: dropped, rebuilt
    out["rope.freqs_sin"] = torch.randn(grid[0] * grid[1], head_dim)
    if mim:
        out["mask_token"] = torch.randn(1, 1, width)
        out["lm_head.weight"] = torch.randn(1024, width)
        out["lm_head.bias"] = torch.randn(1024)
    if clip:
        out = {"visual." + k: v for k, v in out.items()}
        out.update(
            {
                "text.token_embedding.weight": torch.randn(100, 32),
                "text.transformer.resblocks.0.ln_1.weight": torch.ones(32),
                "logit_scale": torch.tensor(4.6),
            }
        )
    return out


def open_clip_trunk_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """open_clip's names for a CLIP model whose image tower is this timm model (``timm_proj`` None: the trunk's own
    head is the projection): timm's names under ``visual.trunk.``, beside a text tower."""
    out = {"visual.trunk." + k: v.detach().clone() for k, v in model.state_dict().items()}
    out.update({"text.token_embedding.weight": torch.randn(100, 32), "logit_scale": torch.tensor(4.6)})
    return out
