"""The pretrained table names a mean/std pair by comparing each with timm's own constant of the same kind."""

import timm.data

from timm_vitscratch.inspect.render import _norm_name


def test_imagenet_and_inception_pairs_are_named():
    assert _norm_name(timm.data.IMAGENET_DEFAULT_MEAN, timm.data.IMAGENET_DEFAULT_STD) == "imagenet"
    assert _norm_name(timm.data.IMAGENET_INCEPTION_MEAN, timm.data.IMAGENET_INCEPTION_STD) == "0.5/0.5"


def test_std_is_compared_with_the_inception_std_not_its_mean(monkeypatch):
    # timm's inception mean and std are both 0.5, which hid a comparison of std against the mean:
    # give the std constant another value and only the right comparison still names the pair
    monkeypatch.setattr(timm.data, "IMAGENET_INCEPTION_STD", (0.25, 0.25, 0.25))
    mean = timm.data.IMAGENET_INCEPTION_MEAN
    assert _norm_name(mean, (0.25, 0.25, 0.25)) == "0.5/0.5"
    assert _norm_name(mean, mean) == f"{mean}/{mean}"
