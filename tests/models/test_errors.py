"""Bad input gets a ValueError that says what was wrong and what was expected."""

import pytest
import torch

from tests.support import tiny


@pytest.mark.parametrize("shape", [(1, 3, 30, 32), (1, 1, 32, 32), (3, 32, 32)])
def test_wrong_image_shape_names_both_shapes(shape):
    model = tiny().eval()
    with pytest.raises(ValueError) as err:
        model(torch.randn(*shape))
    assert "(batch, 3, 32, 32)" in str(err.value) and str(tuple(shape)) in str(err.value)


def test_img_size_not_divisible_by_patch():
    with pytest.raises(ValueError, match=r"img_size \(30, 30\) is not divisible by patch_size \(8, 8\)"):
        tiny(img_size=30)


def test_embed_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match="embed_dim 64 must be divisible by num_heads 5"):
        tiny(num_heads=5)


def test_unknown_global_pool():
    with pytest.raises(ValueError, match=r"global_pool must be one of .*'avgmax'"):
        tiny(global_pool="gem")
    model = tiny()
    with pytest.raises(ValueError, match="global_pool"):
        model.reset_classifier(3, global_pool="gem")


def test_distilled_needs_token_pool():
    with pytest.raises(ValueError, match="must be 'token'"):
        tiny("scratch_deit_ti16_distilled", global_pool="avg")


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="pos_embed must be one of"):
        tiny(pos_embed="rope")
    with pytest.raises(ValueError, match="attn_impl must be one of"):
        tiny(attn_impl="flash")
    with pytest.raises(ValueError, match="num_classes must be >= 0"):
        tiny(num_classes=-1)
    with pytest.raises(ValueError, match="representation_size"):
        tiny("scratch_deit_ti16_distilled", representation_size=64)
