"""timm's VisionTransformer contract beyond the logits: dropout wiring, reset/resize keeping the model's
state, scripting, the fused-attention switch, weight-init schemes, the MLP activation and norm layer
(act_layer / norm_layer) and the pooled-token forward switch."""

from functools import partial
from pathlib import Path

import pytest
import timm
import torch
from timm.layers import set_fused_attn, use_fused_attn
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torch import nn

import timm_vitscratch
from tests.support import tiny
from timm_vitscratch import VisionTransformer
from timm_vitscratch.models.vision_transformer import OWN_TENSORS

SMALL = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5)


def _dropout_rates(model: nn.Module) -> dict:
    """Every dropout-like layer's rate by module name (timm uses Identity where a rate is 0)."""
    rates = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            rates[name] = module.p
        elif type(module).__name__ == "PatchDropout":
            rates[name] = (module.prob, module.num_prefix_tokens)
        elif type(module).__name__ == "DropPath":
            rates[name] = module.drop_prob
    return rates


@pytest.mark.parametrize(
    "options",
    [
        dict(
            drop_rate=0.1,
            pos_drop_rate=0.2,
            proj_drop_rate=0.3,
            attn_drop_rate=0.4,
            patch_drop_rate=0.5,
            drop_path_rate=0.25,
        ),
        dict(drop_rate=0.3, patch_drop_rate=0.25, reg_tokens=2),
    ],
)
def test_dropout_rates_equal_timms(options):
    theirs = _dropout_rates(TimmViT(**SMALL, **options))
    ours = _dropout_rates(VisionTransformer(**SMALL, **options))
    # timm leaves out DropPath at rate 0 (an Identity); ours keeps the layer at 0
    assert {k: v for k, v in ours.items() if v != 0.0} == {k: v for k, v in theirs.items() if v != 0.0}
    assert ours["head_drop"] == options["drop_rate"]


def test_patch_dropout_keeps_prefix_tokens_and_drops_patches_in_training():
    model = VisionTransformer(**SMALL, patch_drop_rate=0.5, reg_tokens=1)
    x = torch.randn(2, 18, 4)
    out = model.patch_drop.train()(x)
    assert out.shape == (2, 2 + 8, 4) and torch.equal(out[:, :2], x[:, :2])
    assert torch.equal(model.patch_drop.eval()(x), x)
    model.train()(torch.randn(2, 3, 32, 32)).sum().backward()  # trains with fewer tokens


def test_reset_classifier_keeps_mode_device_dtype_and_the_rest_frozen():
    model = tiny(num_classes=5).eval().to(torch.float64)
    model.blocks.requires_grad_(False)
    model.reset_classifier(7)
    assert all(not m.training for m in model.modules())
    assert model.head.weight.dtype == torch.float64 and model.head.weight.requires_grad
    assert not any(p.requires_grad for p in model.blocks.parameters())
    distilled = tiny("scratch_deit_ti16_distilled").eval()
    distilled.reset_classifier(7)
    assert all(not m.training for m in distilled.modules())
    train = tiny().train()
    train.reset_classifier(3)
    assert train.head.training


def test_reset_classifier_pool_changes_as_timm():
    model = VisionTransformer(**SMALL, global_pool="map")
    with pytest.raises(ValueError, match="needs the class token"):
        VisionTransformer(**SMALL, class_token=False)
    model.reset_classifier(3, "avg")
    assert model.attn_pool is None and model.global_pool == "avg"
    with pytest.raises(ValueError, match="attention-pooling head"):
        model.reset_classifier(3, "map")


def test_set_input_size_keeps_device_dtype_requires_grad_and_mode():
    model = tiny(num_classes=3).eval().to(torch.float64)
    model.pos_embed.requires_grad_(False)
    model.set_input_size(img_size=48, patch_size=12)
    assert model.pos_embed.shape == (1, 1 + 16, 64) and not model.pos_embed.requires_grad
    assert model.pos_embed.dtype == model.patch_embed.proj.weight.dtype == torch.float64
    assert model.patch_embed.proj.weight.shape[-2:] == (12, 12) and model.patch_embed.proj.weight.requires_grad
    assert all(not m.training for m in model.modules())
    assert model(torch.randn(1, 3, 48, 48, dtype=torch.float64)).shape == (1, 3)
    assert timm.models.get_model_input_config(model)["input_size"][-2:] == (48, 48)


def test_sincos_table_follows_input_size():
    from timm_vitscratch.models.layers import sincos_2d_pos_embed

    model = tiny(pos_embed="sincos").eval()
    model.set_input_size(img_size=(48, 64))
    assert torch.equal(model.pos_embed, sincos_2d_pos_embed((6, 8), 64, 1))
    dynamic = tiny(pos_embed="sincos", dynamic_img_size=True).eval()
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        assert torch.allclose(dynamic(x), _resized(dynamic, (48, 64))(x), atol=1e-6)


def _resized(model, size):
    import copy

    twin = copy.deepcopy(model)
    twin.set_input_size(img_size=size)
    return twin


def test_dynamic_size_equals_a_model_resized_to_the_input():
    model = tiny(dynamic_img_size=True, reg_tokens=2, no_embed_class=True).eval()
    x = torch.randn(2, 3, 40, 56)
    with torch.no_grad():
        assert torch.allclose(model(x), _resized(model, (40, 56))(x), atol=1e-6)
    with pytest.raises(ValueError, match="multiples of the patch size"):
        model(torch.randn(1, 3, 36, 32))
    with pytest.raises(ValueError, match=r"\(batch, 3, 32, 32\)"):
        tiny()(torch.randn(1, 3, 40, 32))


@pytest.mark.slow  # TorchScript
@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(distilled=True),
        dict(reg_tokens=2, init_values=0.1, no_embed_class=True, qk_norm=True, dynamic_img_size=True),
        dict(global_pool="map", pre_norm=True, act_layer="quick_gelu"),
        dict(pos_embed="sincos"),
    ],
)
def test_torchscript_equals_eager(options):
    model = VisionTransformer(**SMALL, **options).eval()
    scripted = torch.jit.script(model)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(scripted(x), model(x))
        assert torch.equal(scripted.forward_features(x), model.forward_features(x))


def test_fused_attention_follows_timms_switch():
    assert tiny().attn_impl == ("sdpa" if use_fused_attn() else "eager")
    was = use_fused_attn()
    try:
        set_fused_attn(False)
        model = tiny()
        assert model.attn_impl == "eager" and all(b.attn.attn_impl == "eager" for b in model.blocks)
        assert tiny(attn_impl="sdpa").attn_impl == "sdpa"  # an explicit choice wins
    finally:
        set_fused_attn(was)


def test_no_weight_decay_is_timms_and_the_model_own_tensors():
    assert tiny().no_weight_decay() == set(OWN_TENSORS) == TimmViT(**SMALL).no_weight_decay()


def test_weight_init_schemes():
    nlhb = VisionTransformer(**SMALL, weight_init="jax_nlhb")
    reference = TimmViT(**SMALL, weight_init="jax_nlhb")
    assert torch.equal(nlhb.head.weight, reference.head.weight)  # zeros
    assert torch.equal(nlhb.head.bias, reference.head.bias)  # -log(num_classes)
    moco = VisionTransformer(**SMALL, weight_init="moco")
    bound = (6.0 / (64 + 64)) ** 0.5
    assert moco.blocks[0].attn.qkv.weight.abs().max() <= bound
    ls = VisionTransformer(**SMALL, init_values=0.5)
    assert torch.equal(ls.blocks[1].ls2.gamma, torch.full((64,), 0.5))
    with pytest.raises(ValueError, match="weight_init must be one of"):
        VisionTransformer(**SMALL, weight_init="xavier")


def test_variants_accept_timm_options_through_create_model():
    model = timm.create_model(
        "scratch_vit_ti16",
        img_size=32,
        depth=2,
        reg_tokens=4,
        init_values=1e-5,
        no_embed_class=True,
        dynamic_img_size=True,
        global_pool="avg",
        drop_rate=0.1,
    )
    assert model.reg_token.shape == (1, 4, 192) and model.pos_embed.shape == (1, 4, 192)
    assert isinstance(model.norm, nn.Identity) and isinstance(model.fc_norm, nn.LayerNorm)
    assert model.eval()(torch.randn(1, 3, 48, 32)).shape == (1, 1000)


# --- the MLP activation and the norm layer (act_layer / norm_layer) ------------------------------------
TI_WIDTH = dict(img_size=64, patch_size=16, embed_dim=192, depth=4, num_heads=3, num_classes=10)
#: OpenAI CLIP's image tower as timm builds it (vit_*_clip_quickgelu_*): norm before the blocks, QuickGELU, eps 1e-5
CLIP_OPENAI = dict(pre_norm=True, norm_layer=partial(timm.layers.LayerNorm, eps=1e-5), act_layer="quick_gelu")


def _perturbed(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model.eval()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.mark.slow  # conversions verified against timm
@pytest.mark.parametrize(
    "family, options",
    [
        ("clip_openai", CLIP_OPENAI),
        ("siglip_map", dict(global_pool="map", class_token=False, act_layer="gelu_tanh")),  # MAP head's MLP too
        ("module_class", dict(act_layer=nn.SiLU, norm_layer=nn.LayerNorm)),  # torch's LayerNorm: eps 1e-5
    ],
)
def test_act_and_norm_layer_load_strict_and_match_timm(family, options):
    torch.manual_seed(0)
    reference = _perturbed(TimmViT(**TI_WIDTH, **options))
    ours = VisionTransformer(**TI_WIDTH, **options).eval()
    assert ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert _max_diff(ours(x), reference(x)) <= 1e-5, family
        # the options matter: the same weights under the defaults (GELU, eps 1e-6) give other logits
        # (tanh-approximate GELU is the closest: about 5e-4 apart here)
        default = VisionTransformer(
            **TI_WIDTH, **{k: v for k, v in options.items() if k not in ("act_layer", "norm_layer")}
        ).eval()
        default.load_state_dict(reference.state_dict())
        assert _max_diff(default(x), reference(x)) > 1e-4  # ten times the tolerance
    assert type(ours.blocks[0].mlp.act) is type(reference.blocks[0].mlp.act)
    assert {m.eps for m in ours.modules() if isinstance(m, nn.LayerNorm)} == {
        m.eps for m in reference.modules() if isinstance(m, nn.LayerNorm)
    }


def test_create_model_takes_act_layer_and_matches_timms_clip_quickgelu():
    """timm's own vit_base_patch16_clip_quickgelu_224 (2 blocks, 64 px) loads into scratch_vit_b16 built with
    the same options through timm.create_model, and gives the same logits."""
    reference = _perturbed(
        timm.create_model("vit_base_patch16_clip_quickgelu_224", img_size=64, depth=2, num_classes=10)
    )
    ours = timm.create_model(
        "scratch_vit_b16", img_size=64, depth=2, num_classes=10, act_layer="quick_gelu", pre_norm=True, norm_eps=1e-5
    ).eval()
    assert ours.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert _max_diff(ours(x), reference(x)) <= 1e-5
    with_norm_layer = timm.create_model(
        "scratch_vit_b16",
        img_size=64,
        depth=1,
        act_layer="quick_gelu",
        pre_norm=True,
        norm_layer=CLIP_OPENAI["norm_layer"],
    )
    assert with_norm_layer.norm_pre.eps == with_norm_layer.blocks[0].norm2.eps == 1e-5


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(act_layer="no_such_act"), "not an activation timm knows"),
        (dict(act_layer=3), "activation name or a module class"),
        (dict(norm_layer="groupnorm"), "norm_layer must be a LayerNorm or an RmsNorm"),
        (dict(norm_layer=partial(timm.layers.LayerNorm, eps=1e-5), norm_eps=1e-3), "pass one of them"),
    ],
)
def test_act_and_norm_layer_errors(options, match):
    with pytest.raises(ValueError, match=match):
        VisionTransformer(**SMALL, **options)


# --- the pooled-token forward ---------------------------------------------------------------------
POOLED = {
    "token": dict(),
    "distilled": dict(distilled=True),
    "registers_layerscale": dict(reg_tokens=3, init_values=0.1, no_embed_class=True, qk_norm=True),
    "fc_norm_token": dict(fc_norm=True, pre_norm=True),
    "no_final_norm_dynamic": dict(final_norm=False, dynamic_img_size=True, representation_size=32),
    "patch_dropout": dict(patch_drop_rate=0.3),
}


def test_pooled_forward_is_opt_in():
    model = VisionTransformer(**SMALL)
    assert not model.pooled_forward  # off by default: forward is timm's computation
    model.set_pooled_forward()
    assert model.pooled_forward
    model.set_pooled_forward(False)
    assert not model.pooled_forward
    assert VisionTransformer(**SMALL, pooled_forward=True).pooled_forward
    assert tiny(pooled_forward=True).pooled_forward  # through timm.create_model


@pytest.mark.parametrize("family", list(POOLED))
def test_pooled_forward_equals_full_path(family):
    model = VisionTransformer(**SMALL, **POOLED[family], pooled_forward=True).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    assert model.pooled_token_count() == (2 if model.distilled else 1)
    x = torch.randn(3, 3, 32, 32)
    seen = []
    model.blocks[-1].mlp.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    with torch.no_grad():
        full = model.forward_head(model.forward_features(x))
        assert seen.pop() == (3, model.num_prefix_tokens + 16, 64)
        assert torch.allclose(model(x), full, atol=1e-6)
        assert seen.pop() == (3, model.pooled_token_count(), 64)  # the last MLP ran for those tokens alone
        model.pooled_forward = False
        assert torch.equal(model(x), full)
    model.pooled_forward = True
    # training: same loss and gradients through both paths (dropout off: same random numbers)
    if not POOLED[family].get("patch_drop_rate"):
        model.train()
        model(x).sum().backward()
        pooled = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        model.pooled_forward = False
        model(x).sum().backward()
        for name, param in model.named_parameters():
            assert torch.allclose(param.grad, pooled[name], atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("pool", ["avg", "avgmax", "max", "map", ""])
def test_pooling_over_every_token_takes_the_full_path(pool):
    model = VisionTransformer(**SMALL, global_pool=pool, pooled_forward=True).eval()
    assert model.pooled_token_count() == 0
    seen = []
    model.blocks[-1].register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert seen == [(2, 17, 64)]


def test_fx_feature_extraction_sees_every_token_of_the_last_block():
    from timm.models import create_feature_extractor

    model = tiny(depth=2, pooled_forward=True).eval()
    extractor = create_feature_extractor(model, return_nodes={"blocks.1": "last", "norm": "norm"})
    out = extractor(torch.randn(1, 3, 32, 32))
    assert out["last"].shape == out["norm"].shape == (1, 17, 64)


def test_package_reads_no_private_torch_state():
    package = Path(timm_vitscratch.__file__).parent
    for path in package.rglob("*.py"):
        text = path.read_text()
        for private in ("_symbolic_trace", "_forward_hooks", "_forward_pre_hooks"):
            assert private not in text, f"{path.relative_to(package)} uses {private}"
