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
