"""The checks of ``VisionTransformer``'s options: values and combinations the model cannot build are refused, by
name, before anything is built."""

from __future__ import annotations

from ..choices import ATTN_TYPES, GLOBAL_POOLS, MLP_LAYERS, POS_EMBEDS, ROPE_TYPES
from .weight_init import check_weight_init


def check_options(
    *,
    num_classes: int,
    depth: int,
    embed_dim: int,
    num_heads: int,
    pos_embed: str,
    global_pool: str,
    class_token: bool,
    distilled: bool,
    representation_size: int | None,
    weight_init: str,
    reg_tokens: int,
    rope_type: str,
    eva_names: bool,
    qkv_fused: bool,
    attn_type: str,
    naflex_init: bool,
    naflex_embeds: bool = False,
    mlp_layer: str = "",
) -> None:
    """Refuse option values and combinations the model cannot build, before anything is built."""
    if num_classes < 0:
        raise ValueError(f"num_classes must be >= 0 (0 = no classifier), got {num_classes}")
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    if num_heads < 1 or embed_dim % num_heads:
        raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
    if pos_embed not in POS_EMBEDS:
        raise ValueError(f"pos_embed must be one of {POS_EMBEDS}, got {pos_embed!r}")
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
    if rope_type and (embed_dim // num_heads) % 4:
        raise ValueError(
            f"rotary position needs a head width (embed_dim / num_heads) divisible by 4, got {embed_dim // num_heads}"
        )
    check_weight_init(weight_init)
    if attn_type not in ATTN_TYPES:
        raise ValueError(f"attn_type must be one of {ATTN_TYPES}, got {attn_type!r}")
    if mlp_layer not in MLP_LAYERS:
        raise ValueError(f"mlp_layer must be one of {MLP_LAYERS}, got {mlp_layer!r}")
    if not qkv_fused and not eva_names:
        raise ValueError("qkv_fused=False is timm Eva's layout (q_proj, k_proj, v_proj): it needs eva_names=True")
    if reg_tokens < 0:
        raise ValueError(f"reg_tokens must be >= 0, got {reg_tokens}")
    if distilled and representation_size:
        raise ValueError("representation_size (has_logits) cannot be combined with distilled=True")
    if distilled and not class_token:
        raise ValueError("distilled=True needs the class token (class_token=True)")
    if naflex_init and (eva_names or distilled):
        raise ValueError("naflex_init is timm NaFlexVit's init, which has neither Eva's names nor a distillation token")
    if naflex_embeds and (eva_names or distilled or representation_size or pos_embed == "sincos"):
        raise ValueError(
            "naflex_embeds is timm NaFlexVit's embedding module, which has neither Eva's names, a distillation "
            "token, a representation layer nor a sincos table"
        )
    check_global_pool(global_pool, distilled, class_token)


def check_global_pool(global_pool: str, distilled: bool, class_token: bool) -> str:
    """``global_pool`` if the model's tokens allow it (``reset_classifier`` checks a new one too)."""
    if global_pool not in GLOBAL_POOLS:
        raise ValueError(f"global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}")
    if distilled and global_pool != "token":
        raise ValueError(
            f"a distilled model pools its class and distillation tokens: global_pool must be "
            f"'token', got {global_pool!r}"
        )
    if global_pool == "token" and not class_token:
        raise ValueError("global_pool='token' needs the class token: pass class_token=True or another global_pool")
    return global_pool
