"""The tag table against the sources' own registries: every variant has weights, every id / URL is real,
and each tag's architecture matches the weights it points at (checked on the meta device)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import timm
import torch
import torchvision
from timm.models import get_pretrained_cfg

import timm_vitscratch  # noqa: F401  (registers the zoo)
from tests.support import sweep
from timm_vitscratch.models.pretrained import (
    TIMM_TAGS,
    TORCHVISION_TAGS,
    TRANSFORMERS_REPOS,
    pretrained_tags,
    source_of,
)
from timm_vitscratch.models.variants import ARCHITECTURES

#: Google's transformers-format ImageNet-21k repos, checked on the Hub (repo trees of main): the
#: documented list the transformers tags may point at, with the weight file each holds.
GOOGLE_REPOS = {
    "google/vit-base-patch16-224-in21k": "model.safetensors",
    "google/vit-base-patch32-224-in21k": "model.safetensors",
    "google/vit-large-patch16-224-in21k": "model.safetensors",
    "google/vit-large-patch32-224-in21k": "pytorch_model.bin",
    "google/vit-huge-patch14-224-in21k": "pytorch_model.bin",
}


def test_every_variant_has_a_tag_and_timm_lists_them_all():
    listed = set(timm.list_pretrained("scratch_*"))
    assert set(pretrained_tags()) <= listed
    assert {tag.split(".")[0] for tag in pretrained_tags()} == set(ARCHITECTURES)


@pytest.mark.parametrize("tag", [t for t in sorted(TIMM_TAGS) if t.split(".")[0] in sweep.rows([t.split(".")[0]])])
def test_timm_tag_is_timms_repo_and_preprocessing(tag):
    ours, theirs = get_pretrained_cfg(tag), get_pretrained_cfg(TIMM_TAGS[tag])
    assert ours.hf_hub_id == theirs.hf_hub_id == "timm/" + TIMM_TAGS[tag]
    for field in ("input_size", "interpolation", "crop_pct", "crop_mode", "mean", "std", "num_classes", "license"):
        assert getattr(ours, field) == getattr(theirs, field), field
    # the architecture the weights were saved from: timm's model and ours hold the same tensor shapes
    with torch.device("meta"):
        reference = timm.create_model(TIMM_TAGS[tag])
        model = timm.create_model(tag)
    state = reference.state_dict()  # timm's NaFlexVit too: the SigLIP 2 NaFlex rows hold its names (naflex_embeds)
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in state.items()}


@pytest.mark.slow  # torchvision's weights enums
@pytest.mark.parametrize("tag", sorted(TORCHVISION_TAGS))
def test_torchvision_tag_is_the_weights_enum(tag):
    enum_name, member = TORCHVISION_TAGS[tag]
    weights = getattr(torchvision.models, enum_name)[member]
    cfg = get_pretrained_cfg(tag)
    assert cfg.url == weights.url and cfg.hf_hub_id is None
    assert cfg.num_classes == len(weights.meta["categories"])
    assert cfg.input_size[1:] == weights.meta["min_size"]  # built at the resolution it was trained at
    assert f"{weights.meta['_metrics']['ImageNet-1K']['acc@1']}" in cfg.notes[0]
    with torch.device("meta"):
        model = timm.create_model(tag)
        reference = getattr(torchvision.models, enum_name.replace("_Weights", "").lower())(
            image_size=cfg.input_size[-1]
        )
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())


@pytest.mark.parametrize("tag", sorted(TRANSFORMERS_REPOS))
def test_transformers_tag_is_a_documented_google_repo(tag):
    import transformers

    repo_id, file = TRANSFORMERS_REPOS[tag]
    assert GOOGLE_REPOS[repo_id] == file
    cfg = get_pretrained_cfg(tag)
    assert cfg.hf_hub_id == repo_id and cfg.num_classes == 0
    size = repo_id.split("-")[1]
    width, depth, heads = {"base": (768, 12, 12), "large": (1024, 24, 16), "huge": (1280, 32, 16)}[size]
    config = transformers.ViTConfig(
        hidden_size=width,
        num_hidden_layers=depth,
        num_attention_heads=heads,
        intermediate_size=4 * width,
        patch_size=int(repo_id.split("patch")[1][:2]),
    )
    with torch.device("meta"):
        model = timm.create_model(tag)
        reference = transformers.ViTModel(config, add_pooling_layer=True)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    assert model.norm.eps == config.layer_norm_eps


def test_source_of_names_each_tags_library():
    assert {source_of(tag) for tag in pretrained_tags()} == {"timm", "torchvision", "transformers"}
    with pytest.raises(KeyError, match="not a pretrained tag"):
        source_of("scratch_vit_b16.nope")


@pytest.mark.slow  # the CLI in a process
def test_list_pretrained_shows_every_tag_with_its_facts():
    out = subprocess.run(
        [sys.executable, "-m", "timm_vitscratch.cli", "list", "--pretrained"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert set(rows) == set(pretrained_tags())
    tv = rows["scratch_vit_h14.tv_swag_e2e_in1k"]
    weights = torchvision.models.ViT_H_14_Weights.IMAGENET1K_SWAG_E2E_V1
    assert tv[1] == weights.url.rsplit("/", 1)[-1] and tv[3] == "518"
    assert tv[-1] == f"{weights.meta['_metrics']['ImageNet-1K']['acc@1']:.2f}"
    assert rows["scratch_vit_b16_in21k.google_in21k"][1] == "hf-hub:google/vit-base-patch16-224-in21k"


def test_model_card_shows_the_tags_published_facts():
    from timm_vitscratch.hub.model_card import model_card
    from timm_vitscratch.model_dir import model_config

    weights = torchvision.models.ViT_L_16_Weights.IMAGENET1K_SWAG_E2E_V1
    model = timm.create_model("scratch_vit_l16.tv_swag_e2e_in1k", device="meta")
    card = model_card(model_config(model), model, "org/scratch_vit_l16.tv_swag_e2e_in1k")
    assert f"**Published ImageNet-1k top-1:** {weights.meta['_metrics']['ImageNet-1K']['acc@1']}" in card
    assert "input 512x512, bicubic resize, crop_pct 1.0" in card
    assert "arXiv:2201.08371" in card and "**License:** cc-by-nc-4.0" in card


def _tags_of(variant):
    return [t.split(".", 1)[1] for t in pretrained_tags() if t.split(".")[0] == variant]


@pytest.mark.parametrize("variant", sorted(ARCHITECTURES))
def test_timm_tags_keep_timms_order_and_the_bare_name_is_the_default_tags(variant):
    timm_tags = [t for t in pretrained_tags() if t.split(".")[0] == variant and t in TIMM_TAGS]
    theirs = list(timm.models.get_arch_pretrained_cfgs(TIMM_TAGS[timm_tags[0]])) if timm_tags else []
    assert [TIMM_TAGS[t] for t in timm_tags] == [n for n in theirs if n in TIMM_TAGS.values()]
    default = timm.models.get_pretrained_cfg(variant)
    if default.tag is None:  # no tag keeps the variant's architecture: the bare name has no weights
        assert not default.has_weights
        assert all(get_pretrained_cfg(f"{variant}.{t}").num_classes != default.num_classes for t in _tags_of(variant))
        return
    assert default == get_pretrained_cfg(f"{variant}.{default.tag}")  # timm's rule: the bare name is the first tag
    with torch.device("meta"):
        assert timm.create_model(variant).pretrained_cfg["tag"] == default.tag
    timm_default = get_pretrained_cfg(theirs[0]) if theirs else None
    if timm_default is not None and timm_default.num_classes == default.num_classes:
        assert TIMM_TAGS[f"{variant}.{default.tag}"] == theirs[0]  # where timm's default fits, it is ours


def test_default_tags_follow_timm_and_keep_the_architecture():
    defaults = {v: get_pretrained_cfg(v).tag for v in ARCHITECTURES}
    assert defaults["scratch_vit_b16"] == "augreg2_in21k_ft_in1k" == get_pretrained_cfg("vit_base_patch16_224").tag
    assert defaults["scratch_deit_b16_distilled"] == "fb_in1k"
    # timm's default for ViT-L/32 and H/14 is orig_in21k, headless: ours keeps the 1000-class, 224 px model
    assert get_pretrained_cfg("vit_large_patch32_224").num_classes == 0
    assert (defaults["scratch_vit_l32"], defaults["scratch_vit_h14"]) == ("tv_in1k", "tv_swag_lin_in1k")
    assert all(defaults[v] is None for v in ARCHITECTURES if v.endswith("_in21k"))


def test_bare_in21k_name_with_pretrained_is_refused_naming_a_tag():
    with pytest.raises(ValueError, match=r"no default weights.*scratch_vit_b16_in21k\.google_in21k"):
        timm.create_model("scratch_vit_b16_in21k", pretrained=True)
