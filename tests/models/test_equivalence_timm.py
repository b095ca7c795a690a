"""Same state dict, same logits as timm's own ViT and DeiT-distilled models."""
import pytest
import timm
import torch

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
    with torch.no_grad():
        # ours returns the pair by default; timm's DeiT once switched on
        reference.set_distilled_training(True)
        a, a_dist = reference(x)
        b, b_dist = ours(x)
    assert (a - b).abs().max() <= 1e-5 and (a_dist - b_dist).abs().max() <= 1e-5
    with torch.no_grad():  # both switched off: one tensor, the mean of both heads
        reference.set_distilled_training(False)
        ours.set_distilled_training(False)
        assert (reference(x) - ours(x)).abs().max() <= 1e-5


@pytest.mark.parametrize("ours_name,timm_name,pool", [
    ("scratch_vit_ti16", "vit_tiny_patch16_224", "token"),
    ("scratch_vit_ti16", "vit_tiny_patch16_224", "avg"),
    ("scratch_deit_ti16_distilled", "deit_tiny_distilled_patch16_224", "token"),
])
@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_training_step_gradients_equal_timm(ours_name, timm_name, pool, attn_impl):
    """Loss and every parameter's gradient match timm's model in training mode, for both attention paths.

    With 'token' pooling our forward runs the last block for the pooled tokens only; the
    gradients prove that skipping the other tokens' outputs changes nothing that is learned.
    """
    small = dict(img_size=32, depth=2, num_classes=7)
    # fc_norm=False: timm otherwise moves the final norm after the pooling for 'avg' (ours norms first)
    reference = timm.create_model(timm_name, global_pool=pool, fc_norm=False, **small).train()
    ours = timm.create_model(ours_name, global_pool=pool, attn_impl=attn_impl, **small).train()
    ours.load_state_dict(reference.state_dict())
    if ours.distilled:
        ours.set_distilled_training(False)  # timm's DeiT trains on the mean of both heads by default
    x, y = torch.randn(3, 3, 32, 32), torch.randint(0, 7, (3,))
    ours_loss = torch.nn.functional.cross_entropy(ours(x), y)
    reference_loss = torch.nn.functional.cross_entropy(reference(x), y)
    ours_loss.backward()
    reference_loss.backward()
    assert (ours_loss - reference_loss).abs().item() <= 1e-5
    theirs = dict(reference.named_parameters())
    for name, param in ours.named_parameters():
        assert torch.allclose(param.grad, theirs[name].grad, atol=1e-6, rtol=1e-4), name
