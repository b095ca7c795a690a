"""A model card states a license, paper, origin or top-1 only where the model's config records it."""

import pytest
import timm
import torchvision
from safetensors.torch import save_file

from tests.support.sources import randomized
from timm_vitscratch.convert import convert
from timm_vitscratch.hub.model_card import model_card
from timm_vitscratch.model_dir import model_config, read_config
from timm_vitscratch.models.pretrained import TORCHVISION_TAGS, torchvision_license


def _card(config, model, repo="org/name"):
    card = model_card(config, model, repo)
    return card, card.split("---")[1]  # the card and its YAML metadata


def test_converted_weights_whose_source_records_no_license_claim_none(tmp_path):
    """torchvision weights in a bare file: nothing records their license, paper or accuracy."""
    source = randomized(
        lambda: torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=256, num_classes=4
        )
    )
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "tv.safetensors"))
    convert(tmp_path / "tv.safetensors", tmp_path / "out", num_heads=4)
    config = read_config(tmp_path / "out")
    model = timm.create_model(f"local-dir:{tmp_path / 'out'}", pretrained=True)
    card, metadata = _card(config, model)
    assert config["pretrained_cfg"]["license"] == "unknown"  # recorded as unknown, never left out
    assert "license: unknown" in metadata and "apache" not in card.lower()
    assert "**License:** unknown: the weights' source names none" in card
    for fact in ("Paper", "Origin", "Published ImageNet-1k top-1"):
        assert f"**{fact}:**" not in card


def test_a_random_init_states_none_of_its_default_tags_facts():
    """timm gives a bare name its default tag's cfg; a random init's card must not inherit that tag's facts."""
    model = timm.create_model("scratch_vit_b16", device="meta")
    assert model.pretrained_cfg["license"] == "apache-2.0"  # the default tag's (timm's augreg2 weights)
    config = model_config(
        model, source={"format": "timm_vitscratch", "model": "scratch_vit_b16", "weights": "random init"}
    )
    card, metadata = _card(config, model)
    assert "license: unknown" in metadata
    for fact in ("Paper", "Origin", "Weights", "Published ImageNet-1k top-1"):
        assert f"**{fact}:**" not in card


@pytest.mark.parametrize("tag", ["scratch_vit_b16.tv_in1k", "scratch_vit_b16.tv_swag_lin_in1k"])
def test_a_torchvision_tag_states_the_license_its_weights_declare(tag):
    weights = getattr(torchvision.models, TORCHVISION_TAGS[tag][0])[TORCHVISION_TAGS[tag][1]]
    expected = "cc-by-nc-4.0" if "license" in weights.meta else "bsd-3-clause"  # SWAG's link, else torchvision's
    assert torchvision_license(weights) == expected
    model = timm.create_model(tag, device="meta")
    card, metadata = _card(model_config(model), model)
    assert f"license: {expected}" in metadata and f"**License:** {expected}" in card
    assert f"**Published ImageNet-1k top-1:** {weights.meta['_metrics']['ImageNet-1K']['acc@1']}" in card


def test_every_torchvision_tag_records_its_weights_license():
    for tag, (enum_name, member) in TORCHVISION_TAGS.items():
        weights = getattr(torchvision.models, enum_name)[member]
        assert timm.models.get_pretrained_cfg(tag).license == torchvision_license(weights), tag
