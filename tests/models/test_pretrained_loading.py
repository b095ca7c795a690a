"""Pretrained tags load the sources' real files, offline, from the caches a download fills.

For one tag of each source kind the source library's own model (random weights) is saved in the format
and under the key names the source publishes, laid where a download would put it (the Hugging Face
cache with ``HF_HUB_OFFLINE=1``; ``$TORCH_HOME/hub/checkpoints/<file from the URL>``), and
``timm.create_model(TAG, pretrained=True)`` must give the source model's outputs and preprocessing.
"""

from __future__ import annotations

import json
import math

import pytest
import timm
import torch
import torchvision
from timm.data import ImageNetInfo, resolve_data_config
from timm.models import get_pretrained_cfg

import timm_vitscratch  # noqa: F401  (registers the zoo)
from tests.support import pretrained_caches
from tests.support.pretrained_caches import lay_in_hf_cache, lay_in_torch_cache, save_safetensors
from tests.support.sources import TOL, batch, hf_legacy_state_dict, logits, max_diff, randomized

pytestmark = pytest.mark.slow  # pretrained tags loaded at full size from laid-out caches

#: google/vit-*-in21k's preprocessor_config.json, byte for byte as the repos hold it
GOOGLE_PREPROCESSOR = (
    '{"do_normalize": true, "do_resize": true, "image_mean": [0.5, 0.5, 0.5], '
    '"image_std": [0.5, 0.5, 0.5], "size": 224}'
)


@pytest.fixture
def offline_caches(tmp_path, monkeypatch):
    return pretrained_caches.offline_caches(tmp_path, monkeypatch)


def assert_timm_preprocessing(ours, timm_name: str):
    with torch.device("meta"):
        reference = timm.create_model(timm_name)
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=reference)


@pytest.mark.parametrize(
    "tag, timm_name",
    [
        ("scratch_vit_ti16.augreg_in21k_ft_in1k", "vit_tiny_patch16_224.augreg_in21k_ft_in1k"),
        ("scratch_deit_ti16_distilled.fb_in1k", "deit_tiny_distilled_patch16_224.fb_in1k"),
    ],
)
def test_timm_repo_tag_loads_timm_weights(offline_caches, tag, timm_name):
    source = randomized(lambda: timm.create_model(timm_name.split(".")[0]))
    lay_in_hf_cache(
        offline_caches,
        get_pretrained_cfg(timm_name).hf_hub_id,
        {"model.safetensors": save_safetensors(source.state_dict())},
    )
    model = timm.create_model(tag, pretrained=True).eval()
    x = batch(224, n=1)
    assert max_diff(logits(model, x), logits(source, x)) <= TOL
    assert_timm_preprocessing(model, timm_name)
    assert model.pretrained_cfg["label_names"] == tuple(ImageNetInfo("imagenet-1k").label_names())
    variant = tag.split(".")[0]
    bare = timm.create_model(variant, pretrained=True).eval()  # the default tag, as timm's bare names
    assert max_diff(logits(bare, x), logits(source, x)) <= TOL
    assert bare.pretrained_cfg["tag"] == tag.split(".")[1]


def test_torchvision_url_tag_loads_torchvision_weights(offline_caches):
    tag, weights = "scratch_vit_b32.tv_in1k", torchvision.models.ViT_B_32_Weights.IMAGENET1K_V1
    source = randomized(lambda: torchvision.models.vit_b_32())
    torch.save(source.state_dict(), lay_in_torch_cache(offline_caches, weights.url))
    model = timm.create_model(tag, pretrained=True).eval()
    x = batch(224, n=1)
    assert max_diff(logits(model, x), logits(source, x)) <= TOL

    transform, config = weights.transforms(), resolve_data_config({}, model=model)
    assert config["input_size"] == (3, *transform.crop_size * 2)
    assert math.floor(config["input_size"][-1] / config["crop_pct"]) == transform.resize_size[0]
    assert config["interpolation"] == transform.interpolation.value
    assert (config["mean"], config["std"]) == (tuple(transform.mean), tuple(transform.std))


def test_google_in21k_repo_tag_loads_the_pooler(offline_caches):
    import transformers

    tag, repo_id = "scratch_vit_b32_in21k.google_in21k", "google/vit-base-patch32-224-in21k"
    config = transformers.ViTConfig(patch_size=32)  # Google's base config: 768 wide, 12 layers and heads
    source = randomized(lambda: transformers.ViTModel(config, add_pooling_layer=True))
    lay_in_hf_cache(
        offline_caches,
        repo_id,
        {
            "model.safetensors": save_safetensors(hf_legacy_state_dict(source)),
            "config.json": lambda p: p.write_text(json.dumps({**config.to_dict(), "architectures": ["ViTModel"]})),
            "preprocessor_config.json": lambda p: p.write_text(GOOGLE_PREPROCESSOR),
        },
    )
    model = timm.create_model(tag, pretrained=True).eval()
    x = batch(224, n=1)
    with torch.no_grad():
        pooled = source(pixel_values=x).pooler_output
    assert model.num_classes == 0
    assert max_diff(logits(model, x), pooled) <= TOL

    processor = transformers.ViTImageProcessor.from_pretrained(repo_id)
    data = resolve_data_config({}, model=model)
    assert data["input_size"][1:] == (processor.size["height"], processor.size["width"])
    assert data["crop_pct"] == 1.0 and not getattr(processor, "do_center_crop", False)
    assert data["interpolation"] == processor.resample.name.lower()
    assert (data["mean"], data["std"]) == (tuple(processor.image_mean), tuple(processor.image_std))
