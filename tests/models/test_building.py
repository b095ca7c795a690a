"""How the model is built, as timm builds its own: keyword options named as timm's, device and dtype
threaded into every layer, one eps for every norm."""

import inspect
from functools import partial

import pytest
import timm
import torch
from timm.layers import Attention as TimmAttention
from timm.layers import AttentionPoolLatent as TimmAttentionPool
from timm.layers import LayerScale as TimmLayerScale
from timm.layers import Mlp as TimmMlp
from timm.layers import PatchEmbed as TimmPatchEmbed
from timm.models.eva import EvaAttention, EvaBlock
from timm.models.vision_transformer import Block as TimmBlock
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torch import nn

from tests.support import TINY
from timm_vitscratch import Attention, Block, Mlp, PatchEmbed, VisionTransformer
from timm_vitscratch.models.architecture import describe_model
from timm_vitscratch.models.attention import AttentionPool
from timm_vitscratch.models.layers import LayerScale, resolve_norm_eps

SMALL = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)

# --- layers: keyword options with timm's names ---------------------------------------------------
#: (ours, timm's, how many leading arguments stay positional: the sizes)
LAYERS = [
    (Block, TimmBlock, 2),
    (Attention, TimmAttention, 2),
    (Mlp, TimmMlp, 2),
    (PatchEmbed, TimmPatchEmbed, 4),
    (AttentionPool, TimmAttentionPool, 1),
    (LayerScale, TimmLayerScale, 1),
]
#: our options timm's layers do not have: the attention path switch, timm's old qk_scale, the switch to timm's
#: Eva names for the same layers (``eva_names`` on the block), the attention's projection layout (timm picks
#: between its attention classes and Eva's ``qkv_fused``) and its rotary pairing (timm's ``rotate_half``, negated)
OWN_OPTIONS = {"attn_impl", "qk_scale", "eva_names", "qkv_form", "rope_interleaved"}


def _parameters(cls: type) -> list[inspect.Parameter]:
    return list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self


@pytest.mark.parametrize("ours, theirs, sizes", LAYERS, ids=[layer[0].__name__ for layer in LAYERS])
def test_layer_options_are_keyword_only_and_named_as_timms(ours, theirs, sizes):
    params = _parameters(ours)
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:sizes])
    assert all(p.kind is p.KEYWORD_ONLY for p in params[sizes:]), [p.name for p in params[sizes:]]
    timm_names = {p.name for p in _parameters(theirs)}
    if ours is Block:  # the SwiGLU and EVA02's norms, named as timm's Eva block names them
        timm_names |= {p.name for p in _parameters(EvaBlock)} & {
            "swiglu_mlp",
            "swiglu_align_to",
            "scale_mlp",
            "scale_attn_inner",
        }
    if ours is Attention:  # EVA02-CLIP's norm on the merged heads, named as timm's Eva attention names it
        timm_names |= {p.name for p in _parameters(EvaAttention)} & {"scale_norm"}
    assert {p.name for p in params} - timm_names <= OWN_OPTIONS
    assert {"device", "dtype"} <= {p.name for p in params}


def test_block_and_attention_agree_on_the_dropouts():
    order = [[p.name for p in _parameters(cls) if p.name in ("attn_drop", "proj_drop")] for cls in (Block, Attention)]
    assert order[0] == order[1] == ["attn_drop", "proj_drop"]
    with pytest.raises(TypeError):
        Block(64, 4, 4.0)  # no option by position
    block = Block(64, 4, attn_drop=0.1, proj_drop=0.2)
    assert block.attn.attn_drop.p == 0.1 and block.attn.proj_drop.p == 0.2 and block.mlp.drop1.p == 0.2


# --- device and dtype flow down, as timm's factory arguments -----------------------------------------
def test_built_on_meta_directly_holds_no_storage():
    model = VisionTransformer(**SMALL, global_pool="map", class_token=False, pos_embed="sincos", device="meta")
    assert all(t.is_meta for t in [*model.parameters(), *model.buffers()])
    big = VisionTransformer(embed_dim=1280, depth=32, num_heads=16, patch_size=14, device="meta")
    assert sum(p.numel() for p in big.parameters()) == 632_045_800  # ViT-H/14, without a byte allocated


def test_construction_never_moves_the_model(monkeypatch):
    """Every tensor is made where it lives: no ``.to()`` after the layers are built."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was moved after being built")

    monkeypatch.setattr(nn.Module, "to", refuse)
    for kwargs in (dict(device="cpu", dtype=torch.bfloat16), dict(device="meta"), dict(pos_embed="sincos")):
        VisionTransformer(**SMALL, distilled=True, init_values=0.1, **kwargs)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_built_in_place_draws_timms_tensors(device, dtype):
    """Built on the device and in the dtype asked for, with timm's tensors there (same seed)."""
    options = dict(**SMALL, reg_tokens=2, qk_norm=True, device=device, dtype=dtype)
    torch.manual_seed(0)
    theirs = dict(TimmViT(**options).named_parameters())
    torch.manual_seed(0)
    ours = VisionTransformer(**options)
    for name, param in ours.named_parameters():
        assert param.device.type == device and param.dtype == dtype, name
        assert torch.equal(param, theirs[name]), name
    sincos = VisionTransformer(**SMALL, pos_embed="sincos", device=device, dtype=dtype)
    assert sincos.pos_embed.device.type == device and sincos.pos_embed.dtype == dtype


def test_create_model_builds_in_the_dtype_asked_for():
    model = timm.create_model("scratch_vit_ti16", **TINY, dtype=torch.bfloat16)
    assert {t.dtype for t in [*model.parameters(), *model.buffers()]} == {torch.bfloat16}
    assert not model.has_meta_tensors()


# --- one eps ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "norm_layer, norm_eps, expected",
    [
        (None, 1e-6, 1e-6),
        (None, 1e-12, 1e-12),  # what transformers' configs record
        (nn.LayerNorm, 1e-6, 1e-5),  # torch's LayerNorm, as timm takes it
        ("layernorm", 1e-6, 1e-6),
        (partial(timm.layers.LayerNorm, eps=1e-5), 1e-6, 1e-5),  # timm's CLIP towers
        (partial(timm.layers.LayerNorm, eps=1e-5), 1e-5, 1e-5),  # both, agreeing
    ],
)
def test_eps_comes_from_one_place(norm_layer, norm_eps, expected):
    assert resolve_norm_eps(norm_layer, norm_eps) == expected
    model = VisionTransformer(
        **SMALL, norm_layer=norm_layer, norm_eps=norm_eps, pre_norm=True, qk_norm=True, global_pool="map"
    )
    assert {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)} == {expected}


def test_architecture_reads_the_eps_under_fc_norm():
    """With fc_norm the final ``norm`` is an Identity: the eps is every norm's, not a default."""
    model = VisionTransformer(**SMALL, global_pool="avg", norm_eps=1e-5)
    assert isinstance(model.norm, nn.Identity) and model.fc_norm.eps == 1e-5
    assert describe_model(model).norm_eps == 1e-5
    assert describe_model(VisionTransformer(**SMALL, norm_eps=1e-12)).norm_eps == 1e-12
