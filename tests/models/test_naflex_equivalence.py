"""NaFlex batches: each image's output equals that image alone (dynamic_img_size) and timm's NaFlexVit on the batch.

Batches are made by timm's ``Patchify`` and ``NaFlexCollator``; the reference is timm's ``NaFlexVit`` built
from the classic ViT with ``use_naflex=True`` and loaded with our weights through timm's NaFlex filter.
"""

import pytest
import timm
import torch

from tests.support import TINY, tiny
from tests.support.naflex_batches import MIXED_SIZES, images, naflex_batch, timm_naflexvit

TOL = 1e-5
#: the families the issue names: a plain ViT, DeiT distilled, DINOv2-like (registers + no_embed_class +
#: LayerScale) and an average-pooled ViT without class token
FAMILIES = {
    "plain": dict(),
    "distilled": dict(name="scratch_deit_ti16_distilled"),
    "dinov2": dict(reg_tokens=4, no_embed_class=True, init_values=0.1),
    "avg": dict(global_pool="avg", class_token=False),
}


def _perturbed(model):
    """Every parameter moved off its init (zero tokens, unit norms would hide a dropped or swapped tensor)."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    return model.eval()


def _pair(name="scratch_vit_ti16", **kwargs):
    """Our model and the same weights with dynamic_img_size=True (the single-image reference)."""
    model = _perturbed(tiny(name, num_classes=5, **kwargs))
    single = tiny(name, num_classes=5, dynamic_img_size=True, **kwargs).eval()
    single.load_state_dict(model.state_dict())
    return model, single


def _timm_reference(model, **kwargs):
    arch = {k: v for k, v in TINY.items()}
    return timm_naflexvit(model, num_classes=5, **arch, **kwargs)


def _diff(a, b):
    return (a - b).abs().max().item()


@pytest.mark.parametrize("family", FAMILIES)
def test_each_image_equals_itself_alone_and_timms_naflexvit(family):
    options = dict(FAMILIES[family])
    name = options.pop("name", "scratch_vit_ti16")
    model, single = _pair(name, **options)
    pictures = images(MIXED_SIZES)
    batch = naflex_batch(pictures, patch_size=8, max_seq_len=96)
    with torch.no_grad():
        logits = model(batch)
        alone = torch.cat([single(picture[None]) for picture in pictures])
        assert logits.shape == (len(pictures), 5)
        assert _diff(logits, alone) <= TOL, family
        if family == "distilled":
            # timm's NaFlexVit has no distillation token: the same token as its one register, positions
            # folded into both tokens; the heads read its first two output tokens
            state = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("head")}
            pos = state.pop("pos_embed")
            state["cls_token"] = state["cls_token"] + pos[:, :1]
            state["reg_token"] = state.pop("dist_token") + pos[:, 1:2]
            state["pos_embed"] = pos[:, 2:]
            reference = timm.create_model(
                "vit_tiny_patch16_224", use_naflex=True, reg_tokens=1, global_pool="", num_classes=0, **TINY
            ).eval()
            from timm.models.naflexvit import checkpoint_filter_fn

            reference.load_state_dict(checkpoint_filter_fn(state, reference))
            tokens = reference.forward_features(**batch_args(batch))["patches"]
            expected = (model.head(tokens[:, 0]) + model.head_dist(tokens[:, 1])) / 2
        else:
            reference = _timm_reference(model, **{k: v for k, v in options.items() if k != "no_embed_class"})
            expected = reference(batch)
            tokens = reference.forward_features(**batch_args(batch))["patches"]
        assert _diff(logits, expected) <= TOL, family
        # the features in timm's padded layout: equal at every real token (ours are zero at padding)
        features = model.forward_features(batch)
        keep = torch.cat(
            [torch.ones(len(pictures), model.num_prefix_tokens, dtype=torch.bool), batch["patch_valid"]], dim=1
        )
        assert _diff(features["patches"][keep], tokens[keep]) <= TOL
        assert not features["patches"][~keep].any()
        assert torch.equal(features["patch_valid"], batch["patch_valid"])
        assert _diff(model.forward_head(features), logits) <= TOL


def batch_args(batch):
    return dict(patches=batch["patches"], patch_coord=batch["patch_coord"], patch_valid=batch["patch_valid"])


@pytest.mark.parametrize(
    "pool,options",
    [
        ("token", {}),
        ("avg", {}),
        ("avgmax", {}),
        ("max", {}),
        ("map", dict(class_token=False)),
        ("map", {}),
        ("avg", dict(reg_tokens=2, no_embed_class=True, pool_include_prefix=True)),
        ("", {}),
    ],
)
def test_every_global_pool_over_valid_tokens_only(pool, options):
    model, single = _pair(global_pool=pool, **options)
    pictures = images(MIXED_SIZES[:4])
    batch = naflex_batch(pictures, patch_size=8, max_seq_len=64)
    # timm's NaFlexVit has no no_embed_class option: its positions are always for patches only
    reference = _timm_reference(model, global_pool=pool, **{k: v for k, v in options.items() if k != "no_embed_class"})
    with torch.no_grad():
        logits = model(batch)
        expected = reference(batch)
        if pool == "":  # per-token outputs in the batch's padded layout: compare the real tokens
            prefix = model.num_prefix_tokens
            for index, picture in enumerate(pictures):
                count = int(batch["patch_valid"][index].sum())
                alone = single(picture[None])[0]
                assert _diff(logits[index, : prefix + count], alone) <= TOL
                assert _diff(expected[index, : prefix + count], alone) <= TOL
            return
        alone = torch.cat([single(picture[None]) for picture in pictures])
    assert _diff(logits, alone) <= TOL
    assert _diff(logits, expected) <= TOL


@pytest.mark.parametrize(
    "options",
    [dict(pos_embed="sincos"), dict(pos_embed="sincos", no_embed_class=True, reg_tokens=1), dict(pos_embed="none")],
)
def test_sincos_and_no_position_tables_equal_the_image_alone(options):
    model, single = _pair(**options)
    pictures = images(MIXED_SIZES)
    with torch.no_grad():
        logits = model(naflex_batch(pictures, patch_size=8, max_seq_len=96))
        alone = torch.cat([single(picture[None]) for picture in pictures])
    assert _diff(logits, alone) <= TOL


def test_eager_attention_and_representation_layer_equal_the_image_alone():
    model, single = _pair("scratch_vit_b16_in21k", representation_size=48, qk_norm=True)
    model.set_attn_impl("eager")
    pictures = images(MIXED_SIZES)
    with torch.no_grad():
        logits = model(naflex_batch(pictures, patch_size=8, max_seq_len=96))
        assert _diff(logits, torch.cat([single(picture[None]) for picture in pictures])) <= TOL


def test_the_ways_in_agree_positional_keywords_and_patch_size():
    model, _ = _pair()
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=80)
    args = batch_args(batch)
    with torch.no_grad():
        expected = model(batch)
        assert model.get_patch_size() == (8, 8)
        assert torch.equal(
            model(args["patches"], args["patch_coord"], args["patch_valid"]), expected
        )  # NaFlexVit order
        patches, where = args.pop("patches"), args
        assert torch.equal(model(patches, **where), expected)
        assert torch.equal(model.forward_head(model.forward_features(patches, **where)), expected)
        features = model.forward_features(batch)
        pre = model.forward_head(features["patches"], pre_logits=True, patch_valid=batch["patch_valid"])
        assert pre.shape == (len(MIXED_SIZES), 64)
        # a longer collation (more padding) changes nothing
        assert _diff(model(naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=320)), expected) <= TOL


def test_channels_first_patches_with_the_flag():
    model, _ = _pair()
    flipped = tiny(num_classes=5, patchify_channels_last=False).eval()
    flipped.load_state_dict(model.state_dict())
    pictures = images(MIXED_SIZES)
    with torch.no_grad():
        expected = model(naflex_batch(pictures, patch_size=8, max_seq_len=96))
        got = flipped(naflex_batch(pictures, patch_size=8, max_seq_len=96, channels_last=False))
    assert _diff(got, expected) <= TOL


@pytest.mark.parametrize("channels_last", [True, False])
def test_variable_patch_size_resamples_the_projection_like_timm(channels_last):
    """timm's loader with --naflex-patch-sizes gives (B, N, Ph, Pw, C) patches; the kernel is resampled per size."""
    model, _ = _pair(patchify_channels_last=channels_last)
    reference = _timm_reference(model, enable_patch_interpolator=True, patchify_channels_last=channels_last)
    if not channels_last:  # timm's filter lays the conv kernel out channels-last whatever the flag says
        with torch.no_grad():
            reference.embeds.proj.weight.copy_(model.patch_embed.proj.weight.flatten(1))
    pictures = images([(32, 32), (16, 48), (8, 64)])
    with torch.no_grad():
        for patch in (4, 8, 16):
            batch = naflex_batch(
                pictures, patch_size=patch, max_seq_len=128, channels_last=channels_last, flatten=False
            )
            assert _diff(model(batch), reference(batch)) <= TOL, patch
        # the model's own size needs no resampling: 5-D equals flattened
        flat = naflex_batch(pictures, patch_size=8, max_seq_len=128, channels_last=channels_last)
        unflat = naflex_batch(pictures, patch_size=8, max_seq_len=128, channels_last=channels_last, flatten=False)
        assert torch.equal(model(flat), model(unflat))


def test_an_attention_mask_in_the_batch_is_applied_per_image():
    from timm.models.naflexvit import create_attention_mask

    model, _ = _pair()
    reference = _timm_reference(model)
    batch = naflex_batch(images(MIXED_SIZES[:3]), patch_size=8, max_seq_len=48)
    mask = create_attention_mask(batch["patch_valid"], num_prefix_tokens=1)
    mask[:, :, 1:, 0] = torch.finfo(mask.dtype).min  # besides timm's own mask, patches may not see the class token
    with torch.no_grad():
        plain = model(batch)
        masked = model(dict(batch, attn_mask=mask))
        assert _diff(masked, reference(dict(batch, attn_mask=mask))) <= TOL
        assert _diff(model(dict(batch, attn_mask=create_attention_mask(batch["patch_valid"], 1))), plain) <= TOL
    assert _diff(masked, plain) > 1e-3


def test_forward_intermediates_like_timms_naflexvit():
    model, _ = _pair(reg_tokens=2, no_embed_class=True)
    reference = _timm_reference(model, reg_tokens=2)
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=96)
    keep = batch["patch_valid"]
    with torch.no_grad():
        ours = model.forward_intermediates(
            batch, indices=[0, 1], output_fmt="NLC", output_dict=True, return_prefix_tokens=True, norm=True
        )
        theirs = reference.forward_intermediates(
            batch, indices=[0, 1], output_fmt="NLC", output_dict=True, return_prefix_tokens=True, norm=True
        )
        assert torch.equal(ours["patch_valid"], theirs["patch_valid"])
        for mine, timms in zip(ours["image_intermediates"], theirs["image_intermediates"], strict=False):
            assert mine.shape == timms.shape and _diff(mine[keep], timms[keep]) <= TOL
        for mine, timms in zip(ours["image_intermediates_prefix"], theirs["image_intermediates_prefix"], strict=False):
            assert _diff(mine, timms) <= TOL
        final, intermediates = model.forward_intermediates(batch, indices=1, output_fmt="NLC")
        assert len(intermediates) == 1 and final.shape == (len(MIXED_SIZES), 1 + 2 + 96, 64)
        with pytest.raises(ValueError, match="output_fmt='NLC'"):
            model.forward_intermediates(batch)


def test_blocks_and_norms_run_as_modules_on_the_packed_tokens():
    model, _ = _pair()
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=96)
    seen = {}
    for name in ("blocks.0", "blocks.1.attn", "blocks.1.mlp", "norm"):
        model.get_submodule(name).register_forward_hook(lambda m, i, o, name=name: seen.update({name: o.shape}))
    with torch.no_grad():
        model(batch)
    real = int(batch["patch_valid"].sum()) + len(MIXED_SIZES)  # valid patches + one class token per image
    assert seen == {name: (1, real, 64) for name in seen} and len(seen) == 4
