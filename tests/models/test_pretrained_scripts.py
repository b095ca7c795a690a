"""timm's train.py and validate.py on a pretrained tag, as the scripts call timm.

The timm sdist holds neither script (only the ``timm`` package), so the test makes the calls each script
makes, with the arguments it passes, on an image folder of generated PNGs: ``train.py --model TAG
--pretrained --num-classes 2 --no-prefetcher`` (model, data config, dataset, loader, one optimiser step)
and ``validate.py --model TAG --pretrained --no-prefetcher``. The tag's weights are a real timm
``vit_tiny_patch16_224`` laid into an offline Hugging Face cache; timm's own model for the same tag,
through the same calls, is the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.models import get_pretrained_cfg
from timm.optim import create_optimizer_v2

import timm_vitscratch  # noqa: F401  (registers the zoo)
from tests.support.pretrained_caches import lay_in_hf_cache, offline_caches, save_safetensors
from tests.support.sources import TOL, max_diff, randomized

pytestmark = pytest.mark.slow  # timm's train.py / validate.py on pretrained tags

TAG, TIMM_TAG = "scratch_vit_ti16.augreg_in21k_ft_in1k", "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
CLASSES = ("ant", "bee")


@pytest.fixture
def source(tmp_path, monkeypatch):
    """timm's ViT-Ti (random weights) published under the tag's repo, offline."""
    offline_caches(tmp_path, monkeypatch)
    model = randomized(lambda: timm.create_model("vit_tiny_patch16_224"))
    lay_in_hf_cache(
        tmp_path, get_pretrained_cfg(TIMM_TAG).hf_hub_id, {"model.safetensors": save_safetensors(model.state_dict())}
    )
    return model.eval()


@pytest.fixture
def image_root(tmp_path):
    """root/{train,validation}/<class>/*.png: 2 classes x 2 images of 48x40 noise per split."""
    rng = np.random.default_rng(0)
    for split in ("train", "validation"):
        for name in CLASSES:
            folder = tmp_path / "images" / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return tmp_path / "images"


def script_model(name: str, **args):
    """``create_model`` with the keywords train.py / validate.py pass (None = the script's default)."""
    return timm.create_model(
        name,
        pretrained=True,
        in_chans=3,
        drop_rate=0.0,
        drop_path_rate=None,
        drop_block_rate=None,
        global_pool=None,
        bn_momentum=None,
        bn_eps=None,
        scriptable=False,
        checkpoint_path=None,
        **args,
    )


def script_loader(root, split: str, data_config, is_training: bool):
    dataset = create_dataset("", root=str(root), split=split, is_training=is_training, batch_size=4)
    return create_loader(
        dataset,
        input_size=data_config["input_size"],
        batch_size=4,
        is_training=is_training,
        use_prefetcher=False,
        interpolation=data_config["interpolation"],
        mean=data_config["mean"],
        std=data_config["std"],
        num_workers=0,
        crop_pct=data_config["crop_pct"],
        crop_mode=data_config["crop_mode"],
    )


def test_train_py_pretrained_fine_tunes_from_the_tags_weights(source, image_root):
    model = script_model(TAG, num_classes=len(CLASSES))
    reference = script_model(TIMM_TAG, num_classes=len(CLASSES))
    ours_config = resolve_data_config({"num_classes": len(CLASSES)}, model=model)
    assert ours_config == resolve_data_config({"num_classes": len(CLASSES)}, model=reference)
    body = {k: v for k, v in source.state_dict().items() if not k.startswith("head.")}
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in body.items())  # every body tensor is the tag's
    assert model.head.out_features == len(CLASSES)

    loader = script_loader(image_root, "train", ours_config, is_training=True)
    optimizer = create_optimizer_v2(model, "sgd", lr=0.1)
    model.train()
    images, targets = next(iter(loader))
    assert images.shape == (4, *ours_config["input_size"])
    loss = torch.nn.functional.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert not torch.equal(model.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)


def test_validate_py_pretrained_gives_timms_outputs_on_the_tags_preprocessing(source, image_root):
    models = [script_model(name, num_classes=None).eval() for name in (TAG, TIMM_TAG)]
    configs = [resolve_data_config({}, model=m, use_test_size=True) for m in models]
    assert configs[0] == configs[1]
    loader = script_loader(image_root, "validation", configs[0], is_training=False)
    with torch.no_grad():
        for images, _ in loader:
            ours, theirs = (m(images) for m in models)
            assert ours.shape == (len(images), 1000)
            assert max_diff(ours, theirs) <= TOL
            assert torch.equal(ours.argmax(1), theirs.argmax(1))
