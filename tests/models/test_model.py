"""Behaviour of the model and its timm hooks, on tiny configurations."""

import pytest
import timm
import torch
from torch import nn

from tests.support import TINY, tiny
from timm_vitscratch import DropPath, VisionTransformer
from timm_vitscratch.models.layers import drop_path


def test_drop_path_identity_in_eval():
    layer = DropPath(0.5).eval()
    x = torch.randn(8, 4, 3)
    assert torch.equal(layer(x), x)


def test_drop_path_drops_whole_samples_at_rate_and_rescales():
    x = torch.ones(20000, 3, 2)
    out = drop_path(x, 0.25, training=True)
    per_sample = out.reshape(out.shape[0], -1)
    kept = per_sample[:, 0] != 0
    # every sample is either entirely dropped or entirely kept and scaled by 1/keep
    assert torch.all((per_sample == 0).all(1) | (per_sample == 1 / 0.75).all(1))
    assert abs(kept.float().mean().item() - 0.75) < 0.015
    assert abs(out.mean().item() - 1.0) < 0.02  # expectation preserved


def test_drop_path_rates_rise_linearly_over_depth():
    model = timm.create_model("scratch_vit_ti16", img_size=32, patch_size=8, depth=5, drop_path_rate=0.2)
    # as timm: a rate of 0 (the first block's) is no DropPath at all, an Identity
    rates = [getattr(block.drop_path1, "drop_prob", 0.0) for block in model.blocks]
    assert rates == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert isinstance(model.blocks[0].drop_path1, torch.nn.Identity)
    assert all(type(b.drop_path1) is type(b.drop_path2) for b in model.blocks)
    assert all(getattr(b.drop_path1, "drop_prob", 0) == getattr(b.drop_path2, "drop_prob", 0) for b in model.blocks)


def test_dropout_rates_reach_every_layer():
    model = tiny(drop_rate=0.3, pos_drop_rate=0.1, proj_drop_rate=0.15, attn_drop_rate=0.2)
    assert model.head_drop.p == 0.3 and model.pos_drop.p == 0.1
    block = model.blocks[0]
    assert block.attn.attn_drop.p == 0.2 and block.attn.proj_drop.p == 0.15
    assert block.mlp.drop1.p == 0.15 and block.mlp.drop2.p == 0.15


def test_distilled_training_returns_pair_eval_returns_mean():
    model = tiny("scratch_deit_ti16_distilled", num_classes=7, distilled_training=True)
    x = torch.randn(3, 3, 32, 32)
    model.eval()
    with torch.no_grad():
        tokens = model.forward_features(x)
        mean = model(x)
        expected = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
    assert torch.allclose(mean, expected)
    model.train()  # training returns the pair
    with torch.no_grad():
        cls_logits, dist_logits = model(x)
    assert cls_logits.shape == dist_logits.shape == (3, 7)
    assert torch.allclose((cls_logits + dist_logits) / 2, mean)
    # switched off (timm DeiT's default), training returns the mean too
    model.set_distilled_training(False)
    with torch.no_grad():
        assert torch.allclose(model(x), mean)
    assert not tiny("scratch_deit_ti16_distilled").distilled_training  # timm's DeiT default
    assert isinstance(model.get_classifier(), tuple)


def test_distilled_variant_trains_on_one_tensor_by_default():
    """train.py without a teacher: the default training forward returns the logits tensor."""
    model = timm.create_model("scratch_deit_ti16_distilled", img_size=32, depth=1).train()
    out = model(torch.randn(2, 3, 32, 32))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 1000)


def test_distilled_training_needs_a_distillation_head():
    assert not tiny().distilled_training  # nothing to switch on without a distillation token
    with pytest.raises(ValueError, match="head_dist"):
        tiny().set_distilled_training(True)


def test_has_logits_pre_logits_is_linear_tanh():
    model = tiny("scratch_vit_b16_in21k", num_classes=11, representation_size=48).eval()
    assert isinstance(model.pre_logits.fc, nn.Linear) and isinstance(model.pre_logits.act, nn.Tanh)
    assert model.head.in_features == 48 == model.head_hidden_size
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.forward_features(x)
        pre = model.forward_head(tokens, pre_logits=True)
        assert torch.allclose(pre, torch.tanh(model.pre_logits.fc(tokens[:, 0])))
        assert torch.allclose(model(x), model.head(pre))
    assert pre.abs().max() <= 1


def test_in21k_variant_has_21843_classes():
    model = timm.create_model("scratch_vit_b16_in21k", img_size=32, depth=1)
    assert model.num_classes == 21843 and model.pre_logits.fc.out_features == 768


def test_grad_checkpointing_same_output_and_gradients():
    model = tiny(depth=3)
    x = torch.randn(2, 3, 32, 32)
    out_plain = model(x)
    out_plain.sum().backward()
    grads_plain = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.set_grad_checkpointing(True)
    out_ckpt = model(x)
    out_ckpt.sum().backward()
    assert torch.allclose(out_plain, out_ckpt)
    for name, param in model.named_parameters():
        assert torch.allclose(param.grad, grads_plain[name], atol=1e-6), name


def test_num_classes_zero_gives_features():
    model = tiny(num_classes=0).eval()
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 64) and model.num_features == 64


@pytest.mark.parametrize("pool,shape", [("token", (2, 5)), ("avg", (2, 5)), ("", (2, 17, 5))])
def test_global_pool(pool, shape):
    model = tiny(num_classes=5, global_pool=pool).eval()
    assert model(torch.randn(2, 3, 32, 32)).shape == shape


def test_avg_pool_excludes_prefix_tokens():
    model = tiny(num_classes=0, global_pool="avg").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        # as timm: the final norm moves after the pooling (fc_norm) for 'avg'
        assert torch.allclose(model(x), model.fc_norm(model.forward_features(x)[:, 1:].mean(1)), atol=1e-6)


def test_reset_classifier():
    model = tiny(num_classes=5)
    model.reset_classifier(9)
    assert model.get_classifier().out_features == 9 and model.num_classes == 9
    model.reset_classifier(0, global_pool="avg")
    assert isinstance(model.head, nn.Identity) and model.global_pool == "avg"
    distilled = tiny("scratch_deit_ti16_distilled")
    distilled.reset_classifier(3)
    assert distilled.head.out_features == distilled.head_dist.out_features == 3


def test_img_size_384_builds_and_runs():
    model = timm.create_model("scratch_vit_ti16", img_size=384, depth=1, num_classes=3).eval()
    assert model.pos_embed.shape == (1, 24 * 24 + 1, 192)
    with torch.no_grad():
        assert model(torch.randn(1, 3, 384, 384)).shape == (1, 3)


def test_non_square_input():
    model = tiny(img_size=(60, 100), patch_size=20).eval()
    assert model.patch_embed.grid_size == (3, 5)
    assert model(torch.randn(2, 3, 60, 100)).shape == (2, 1000)
    _, feats = model.forward_intermediates(torch.randn(1, 3, 60, 100), indices=1)
    assert feats[0].shape == (1, 64, 3, 5)


def test_sincos_pos_embed_is_fixed_buffer():
    model = tiny(pos_embed="sincos").eval()
    assert "pos_embed" in dict(model.named_buffers()) and "pos_embed" not in model.state_dict()
    assert torch.all(model.pos_embed[0, 0] == 0)  # the class token carries no position
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 1000)


def test_single_channel_and_regression_head():
    model = tiny(in_chans=1, num_classes=1).eval()
    assert model(torch.randn(4, 1, 32, 32)).shape == (4, 1)


def test_timm_hooks():
    model = tiny(num_classes=5)
    assert model.pretrained_cfg["architecture"] == "scratch_vit_ti16"
    assert model.default_cfg is model.pretrained_cfg
    assert model.no_weight_decay() >= {"pos_embed", "cls_token"}
    matcher = model.group_matcher()
    assert set(matcher) == {"stem", "blocks"}
    state = model.state_dict()
    cfg = model.pretrained_cfg
    assert cfg["first_conv"] + ".weight" in state and cfg["classifier"] + ".weight" in state


def test_layer_decay_groups_follow_group_matcher():
    from timm.optim import create_optimizer_v2

    model = tiny(depth=3, num_classes=5)
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, layer_decay=0.5)
    scales = sorted({g["lr_scale"] for g in optimizer.param_groups})
    # stem, three blocks, then the final norm/head: five distinct depths
    assert scales == pytest.approx([0.5**k for k in range(4, -1, -1)])


def test_forward_intermediates_timm_signature():
    model = tiny(depth=3).eval()
    x = torch.randn(2, 3, 32, 32)
    final, feats = model.forward_intermediates(x)
    assert len(feats) == 3 and feats[0].shape == (2, 64, 4, 4)
    with torch.no_grad():
        assert torch.allclose(final, model.forward_features(x))
    only = model.forward_intermediates(x, indices=[0, -1], output_fmt="NLC", intermediates_only=True)
    assert [t.shape for t in only] == [(2, 16, 64), (2, 16, 64)]
    with_prefix = model.forward_intermediates(x, indices=1, return_prefix_tokens=True, intermediates_only=True)
    assert with_prefix[0][1].shape == (2, 1, 64)
    plain = model.forward_intermediates(x, indices=1, output_fmt="NLC", intermediates_only=True)
    normed = model.forward_intermediates(
        x, indices=1, output_fmt="NLC", norm=True, stop_early=True, intermediates_only=True
    )
    with torch.no_grad():
        assert torch.allclose(normed[0], model.norm(plain[0]), atol=1e-6)


def test_features_only_through_timm():
    model = timm.create_model("scratch_vit_ti16", features_only=True, out_indices=(0, 1), **TINY)
    feats = model(torch.randn(1, 3, 32, 32))
    assert [f.shape for f in feats] == [(1, 64, 4, 4)] * 2


def test_attention_paths_equal_and_maps_are_stochastic():
    model = tiny().eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        sdpa = model(x)
        model.set_attn_impl("eager")
        eager = model(x)
        features, maps = model.forward_attention(x)
    assert torch.allclose(sdpa, eager, atol=1e-5)
    assert torch.allclose(features, model.forward_features(x), atol=1e-5)
    assert len(maps) == 2 and maps[0].shape == (2, 4, 17, 17)
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, 4, 17))


def test_create_model_kwargs_pass_through():
    model = timm.create_model(
        "scratch_vit_s16", num_classes=3, drop_rate=0.1, drop_path_rate=0.1, img_size=64, in_chans=1, depth=2
    )
    assert isinstance(model, VisionTransformer)
    assert model.patch_embed.img_size == (64, 64) and model.patch_embed.in_chans == 1
    assert model.blocks[-1].drop_path1.drop_prob == pytest.approx(0.1)


@pytest.mark.slow  # torch.compile
def test_torch_compile_forward():
    model = tiny().eval()
    x = torch.randn(2, 3, 32, 32)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), atol=1e-5)


@pytest.mark.slow  # torch.export and fx tracing
def test_torch_export_and_fx_trace():
    model = tiny(num_classes=3).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        exported = torch.export.export(model, (x,)).module()
        assert torch.allclose(exported(x), expected, atol=1e-6)
        traced = torch.fx.symbolic_trace(model)
        # traced, forward computes every token of the last block (feature extractors name its
        # nodes), eager forward only the pooled one: same function, rounding may differ
        assert torch.allclose(traced(x), expected, atol=1e-6)


def test_timm_fx_feature_extractor():
    from timm.models import create_feature_extractor

    model = tiny().eval()
    extractor = create_feature_extractor(model, return_nodes={"blocks.1": "last"})
    assert extractor(torch.randn(1, 3, 32, 32))["last"].shape == (1, 17, 64)


def test_forward_equals_forward_head_of_forward_features():
    """The opt-in pooled forward skips the last block's patch-token outputs for 'token' pooling: same logits."""
    for name in ("scratch_vit_ti16", "scratch_vit_b16_in21k", "scratch_deit_ti16_distilled"):
        model = tiny(name, num_classes=5, pooled_forward=True).eval()
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            assert torch.allclose(model(x), model.forward_head(model.forward_features(x)), atol=1e-6), name
            pooled = model.forward_pooled_tokens(x)
            assert torch.allclose(pooled, model.forward_features(x)[:, : model.num_prefix_tokens], atol=1e-6)


def test_hooks_see_every_token_by_default():
    model = tiny().eval()
    seen = []
    for module in (model.blocks[-1], model.blocks[-1].mlp.fc2, model.norm):
        handle = module.register_forward_hook(lambda _m, _i, out: seen.append(out.shape))
        with torch.no_grad():
            model(torch.randn(2, 3, 32, 32))
        handle.remove()
    assert seen == [(2, 17, 64)] * 3


def test_forward_intermediates_keeps_only_the_requested_outputs():
    import weakref

    model = tiny(depth=4).eval()
    outputs = []
    for block in model.blocks:
        block.register_forward_hook(lambda _m, _i, out: outputs.append(weakref.ref(out)))
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(torch.randn(1, 3, 32, 32), indices=[1], output_fmt="NLC")
        alive = [ref() is not None for ref in outputs]
    assert alive == [False, True, False, False]  # block 3's output was normalised into `final`, then dropped
    assert intermediates[0].shape == (1, 16, 64) and final.shape == (1, 17, 64)
