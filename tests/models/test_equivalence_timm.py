"""Same state dict, same logits as timm's own ViT and DeiT-distilled models."""

import pytest
import timm
import torch

pytestmark = pytest.mark.slow  # our models against timm's, ViT-B included

PAIRS = [
    ("vit_tiny_patch16_224", "scratch_vit_ti16"),
    ("vit_base_patch16_224", "scratch_vit_b16"),
    ("deit_tiny_distilled_patch16_224", "scratch_deit_ti16_distilled"),
]


@pytest.mark.parametrize("timm_name,ours_name", PAIRS)
def test_logits_equal_timm(timm_name, ours_name):
    reference = timm.create_model(timm_name).eval()
    ours = timm.create_model(ours_name).eval()
    state = reference.state_dict()
    assert set(state) == set(ours.state_dict())  # no renames needed
    ours.load_state_dict(state, strict=True)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(x)
        for impl in ("sdpa", "eager"):
            ours.set_attn_impl(impl)
            diff = (ours(x) - expected).abs().max().item()
            assert diff <= 1e-5, f"{impl}: max-abs-diff {diff}"
        features = ours.forward_features(x)
        assert (features - reference.forward_features(x)).abs().max().item() <= 1e-5
        pooled = ours.forward_head(features, pre_logits=True)
        assert (pooled - reference.forward_head(reference.forward_features(x), pre_logits=True)).abs().max() <= 1e-5


def test_distilled_training_pair_matches_timm():
    reference = timm.create_model("deit_tiny_distilled_patch16_224", img_size=32).train()
    ours = timm.create_model("scratch_deit_ti16_distilled", img_size=32).train()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(2, 3, 32, 32)
    assert not ours.distilled_training and not reference.distilled_training  # timm's default
    with torch.no_grad():  # both switched on: the pair of both heads' logits
        reference.set_distilled_training(True)
        ours.set_distilled_training(True)
        a, a_dist = reference(x)
        b, b_dist = ours(x)
    assert (a - b).abs().max() <= 1e-5 and (a_dist - b_dist).abs().max() <= 1e-5
    with torch.no_grad():  # both switched off: one tensor, the mean of both heads
        reference.set_distilled_training(False)
        ours.set_distilled_training(False)
        assert (reference(x) - ours(x)).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "ours_name,timm_name,pool",
    [
        ("scratch_vit_ti16", "vit_tiny_patch16_224", "token"),
        ("scratch_vit_ti16", "vit_tiny_patch16_224", "avg"),
        ("scratch_deit_ti16_distilled", "deit_tiny_distilled_patch16_224", "token"),
    ],
)
@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
@pytest.mark.parametrize("pooled_forward", [False, True], ids=["default", "pooled"])
def test_training_step_gradients_equal_timm(ours_name, timm_name, pool, attn_impl, pooled_forward):
    """Loss and every parameter's gradient match timm's model in training mode, for both attention paths.

    With the opt-in pooled forward and 'token' pooling, the last block runs for the pooled tokens
    only; the gradients prove that skipping the other tokens' outputs changes nothing that is learned.
    """
    small = dict(img_size=32, depth=2, num_classes=7)
    reference = timm.create_model(timm_name, global_pool=pool, **small).train()
    ours = timm.create_model(
        ours_name, global_pool=pool, attn_impl=attn_impl, pooled_forward=pooled_forward, **small
    ).train()
    ours.load_state_dict(reference.state_dict())
    x, y = torch.randn(3, 3, 32, 32), torch.randint(0, 7, (3,))
    ours_loss = torch.nn.functional.cross_entropy(ours(x), y)
    reference_loss = torch.nn.functional.cross_entropy(reference(x), y)
    ours_loss.backward()
    reference_loss.backward()
    assert (ours_loss - reference_loss).abs().item() <= 1e-5
    theirs = dict(reference.named_parameters())
    for name, param in ours.named_parameters():
        assert torch.allclose(param.grad, theirs[name].grad, atol=1e-6, rtol=1e-4), name


#: Option combinations of the checkpoint families in the wild, on timm's class and ours alike.
FAMILIES = {
    "deit3": dict(init_values=1e-4, no_embed_class=True),
    "dinov2": dict(reg_tokens=4, init_values=1e-4, no_embed_class=True, dynamic_img_size=True),
    "mae_beit": dict(global_pool="avg", fc_norm=True),
    "clip": dict(pre_norm=True, final_norm=False),
    "map": dict(global_pool="map"),
    "qk_norm_no_cls": dict(qk_norm=True, proj_bias=False, class_token=False, global_pool="avgmax"),
    "padded_max": dict(global_pool="max", dynamic_img_size=True, dynamic_img_pad=True),
}
TI_WIDTH = dict(img_size=64, patch_size=16, embed_dim=192, depth=4, num_heads=3, num_classes=10)


def _pair(options):
    """timm's VisionTransformer with perturbed weights (no tensor at its init value), and ours loaded from it."""
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    from timm_vitscratch import VisionTransformer

    reference = TimmViT(**TI_WIDTH, **options).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    ours = VisionTransformer(**TI_WIDTH, **options).eval()
    assert ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def _max_diff(a, b):
    return (a - b).abs().max().item()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_option_families_load_strict_and_match_timm(family):
    reference, ours = _pair(FAMILIES[family])
    sizes = [(64, 64)] + ([(80, 96)] if FAMILIES[family].get("dynamic_img_size") else [])
    if FAMILIES[family].get("dynamic_img_pad"):
        sizes.append((70, 90))
    for height, width in sizes:
        x = torch.randn(2, 3, height, width)
        with torch.no_grad():
            assert _max_diff(ours(x), reference(x)) <= 1e-5, (family, height, width)
            assert _max_diff(ours.forward_features(x), reference.forward_features(x)) <= 1e-5
            assert (
                _max_diff(
                    ours.forward_head(ours.forward_features(x), pre_logits=True),
                    reference.forward_head(reference.forward_features(x), pre_logits=True),
                )
                <= 1e-5
            )


@pytest.mark.parametrize("family", ["deit3", "dinov2", "map"])
def test_set_input_size_and_intermediates_match_timm(family):
    reference, ours = _pair(FAMILIES[family])
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        theirs = reference.get_intermediate_layers(x, n=2, reshape=True)
        mine = ours.get_intermediate_layers(x, n=2, reshape=True)
        assert len(mine) == len(theirs) == 2
        for a, b in zip(mine, theirs, strict=False):
            assert a.shape == b.shape == (2, 192, 4, 4) and _max_diff(a, b) <= 1e-5
        theirs = reference.forward_intermediates(x, indices=[0, 2], output_dict=True, return_prefix_tokens=True)
        mine = ours.forward_intermediates(x, indices=[0, 2], output_dict=True, return_prefix_tokens=True)
        assert set(mine) == set(theirs)
        for key in theirs:
            pairs = (
                zip(mine[key], theirs[key], strict=False)
                if isinstance(theirs[key], list)
                else [(mine[key], theirs[key])]
            )
            assert all(_max_diff(a, b) <= 1e-5 for a, b in pairs), key
    reference.set_input_size(img_size=96)
    ours.set_input_size(img_size=96)
    assert ours.pos_embed.shape == reference.pos_embed.shape
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        assert _max_diff(ours(x), reference(x)) <= 1e-5
    reference.set_input_size(img_size=(64, 80), patch_size=8)
    ours.set_input_size(img_size=(64, 80), patch_size=8)
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        assert _max_diff(ours(x), reference(x)) <= 1e-5


def test_attention_mask_matches_timm():
    reference, ours = _pair(FAMILIES["deit3"])
    x = torch.randn(2, 3, 64, 64)
    mask = torch.rand(2, 1, 17, 17) > 0.3
    mask[..., 0] = True  # every query attends to something
    with torch.no_grad():
        for impl in ("sdpa", "eager"):
            ours.set_attn_impl(impl)
            assert (
                _max_diff(ours.forward_features(x, attn_mask=mask), reference.forward_features(x, attn_mask=mask))
                <= 1e-5
            )
            assert _max_diff(ours(x, attn_mask=mask), reference(x, attn_mask=mask)) <= 1e-5
