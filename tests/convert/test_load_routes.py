"""One loader for every route in: torchvision, transformers and JAX state dicts load their real weights through
timm's pretrained loading (``pretrained_cfg_overlay`` file / state dict, as train.py's ``--pretrained-path`` does)
and through ``load_checkpoint`` (train.py's ``--initial-checkpoint``); unknown state dicts are refused by name."""

import logging
import re

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import load_file, save_file
from timm.models import load_checkpoint

from tests.support.sources import google_npz, hf_config, hf_legacy_state_dict, randomized, timm_vit
from timm_vitscratch import ARCHITECTURES, VisionTransformer, checkpoint_filter_fn
from timm_vitscratch.errors import ConversionError

# a 2-block ViT-Ti at 64 px: every source library builds the same architecture
SMALL = dict(depth=2, img_size=64)


def tv_model():
    import torchvision

    return randomized(
        lambda: torchvision.models.VisionTransformer(
            image_size=64, patch_size=16, num_layers=2, num_heads=3, hidden_dim=192, mlp_dim=768, num_classes=10
        )
    )


def hf_model():
    import transformers

    config = hf_config(num_hidden_layers=2, image_size=64)
    return randomized(lambda: transformers.ViTForImageClassification(config))


def timm_reference(**kwargs):
    return timm_vit(**SMALL, **kwargs)


def body(state_dict):
    return {k: v for k, v in state_dict.items() if not k.startswith(("head.", "head_dist.", "pre_logits."))}


def sources(tmp_path):
    """(name, file, state dict in our names) for each foreign format, all holding the same weights."""
    reference = timm_reference()
    ours = {k: v.clone() for k, v in reference.state_dict().items()}
    tv = tv_model()
    tv_sd = tv.state_dict()
    # fill the torchvision model from the reference, by torchvision's own names
    mapping = {
        "class_token": "cls_token",
        "encoder.pos_embedding": "pos_embed",
        "conv_proj.weight": "patch_embed.proj.weight",
        "conv_proj.bias": "patch_embed.proj.bias",
        "encoder.ln.weight": "norm.weight",
        "encoder.ln.bias": "norm.bias",
        "heads.head.weight": "head.weight",
        "heads.head.bias": "head.bias",
    }
    for i in range(2):
        src, dst = f"encoder.layers.encoder_layer_{i}.", f"blocks.{i}."
        for a, b in (
            ("ln_1", "norm1"),
            ("ln_2", "norm2"),
            ("self_attention.out_proj", "attn.proj"),
            ("mlp.0", "mlp.fc1"),
            ("mlp.3", "mlp.fc2"),
        ):
            for part in ("weight", "bias"):
                mapping[f"{src}{a}.{part}"] = f"{dst}{b}.{part}"
        mapping[src + "self_attention.in_proj_weight"] = dst + "attn.qkv.weight"
        mapping[src + "self_attention.in_proj_bias"] = dst + "attn.qkv.bias"
    assert set(mapping) == set(tv_sd)
    tv.load_state_dict({k: ours[v] for k, v in mapping.items()})
    hf = hf_model()
    hf_sd = {}
    for key, value in hf.state_dict().items():
        hf_sd[key] = value
    dim = 192
    hf_map = {
        "vit.embeddings.cls_token": "cls_token",
        "vit.embeddings.position_embeddings": "pos_embed",
        "vit.embeddings.patch_embeddings.projection.weight": "patch_embed.proj.weight",
        "vit.embeddings.patch_embeddings.projection.bias": "patch_embed.proj.bias",
        "vit.layernorm.weight": "norm.weight",
        "vit.layernorm.bias": "norm.bias",
        "classifier.weight": "head.weight",
        "classifier.bias": "head.bias",
    }
    filled = {hf_key: ours[k] for hf_key, k in hf_map.items()}
    for i in range(2):
        src, dst = f"vit.layers.{i}.", f"blocks.{i}."
        for a, b in (
            ("layernorm_before", "norm1"),
            ("layernorm_after", "norm2"),
            ("attention.o_proj", "attn.proj"),
            ("mlp.fc1", "mlp.fc1"),
            ("mlp.fc2", "mlp.fc2"),
        ):
            for part in ("weight", "bias"):
                filled[f"{src}{a}.{part}"] = ours[f"{dst}{b}.{part}"]
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            filled[f"{src}attention.{name}.weight"] = ours[dst + "attn.qkv.weight"][j * dim : (j + 1) * dim]
            filled[f"{src}attention.{name}.bias"] = ours[dst + "attn.qkv.bias"][j * dim : (j + 1) * dim]
    assert set(filled) == set(hf_sd), set(hf_sd) ^ set(filled)
    hf.load_state_dict(filled)
    torch.save(tv.state_dict(), tmp_path / "tv.pth")
    save_file({k: v.contiguous() for k, v in hf_legacy_state_dict(hf).items()}, str(tmp_path / "hf_legacy.safetensors"))
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(tmp_path / "hf_v5.safetensors"))
    google_npz(reference, tmp_path / "jax.npz")
    return (
        ours,
        {
            "torchvision": tmp_path / "tv.pth",
            "transformers-legacy": tmp_path / "hf_legacy.safetensors",
            "transformers-v5": tmp_path / "hf_v5.safetensors",
        },
        tmp_path / "jax.npz",
    )


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory):
    return sources(tmp_path_factory.mktemp("sources"))


def assert_body_equal(model, ours):
    state = model.state_dict()
    for key, value in body(ours).items():
        assert torch.equal(state[key], value), key


@pytest.mark.parametrize("kind", ["torchvision", "transformers-legacy", "transformers-v5"])
def test_pretrained_path_route_loads_the_real_weights(laid_out, kind, caplog):
    """train.py --pretrained-path FILE --num-classes 3: the create_model call train.py makes."""
    ours, files, _ = laid_out
    with caplog.at_level(logging.WARNING):
        model = timm.create_model(
            "scratch_vit_ti16",
            pretrained=True,
            num_classes=3,
            **SMALL,
            pretrained_cfg_overlay=dict(file=str(files[kind]), num_classes=-1),
        )
    assert_body_equal(model, ours)
    assert model.head.weight.shape == (3, 192)
    said = [r.getMessage() for r in caplog.records if "freshly initialised" in r.getMessage()]
    assert len(said) == 1 and "head" in said[0]


@pytest.mark.parametrize("kind", ["torchvision", "transformers-legacy", "transformers-v5"])
def test_file_overlay_with_matching_classes_loads_head_too(laid_out, kind):
    ours, files, _ = laid_out
    model = timm.create_model(
        "scratch_vit_ti16",
        pretrained=True,
        num_classes=10,
        **SMALL,
        pretrained_cfg_overlay=dict(file=str(files[kind]), num_classes=10),
    )
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ours.items())


@pytest.mark.parametrize("kind", ["torchvision", "transformers-legacy", "transformers-v5"])
def test_load_checkpoint_route(laid_out, kind, tmp_path):
    """timm's load_checkpoint (train.py --initial-checkpoint): model.load_state_dict(strict=True) remaps."""
    ours, files, _ = laid_out
    model = timm.create_model("scratch_vit_ti16", num_classes=10, **SMALL)
    load_checkpoint(model, str(files[kind]))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ours.items())
    # train.py's own call: checkpoint_path= in create_model
    model = timm.create_model("scratch_vit_ti16", num_classes=10, checkpoint_path=str(files[kind]), **SMALL)
    assert_body_equal(model, ours)


@pytest.mark.parametrize("kind", ["torchvision", "transformers-legacy", "transformers-v5"])
def test_checkpoint_filter_fn_is_the_named_path_and_load_state_dict_says_when_it_remaps(laid_out, kind, caplog):
    """docs/conversion.md: ``model.load_state_dict(checkpoint_filter_fn(sd, model))`` loads a foreign state dict
    in the model's own names; handed the foreign state dict itself, load_state_dict's pre-hook remaps it and
    logs that it did (timm's load_checkpoint route)."""
    ours, files, _ = laid_out
    path = files[kind]
    foreign = torch.load(path, weights_only=True) if path.suffix == ".pth" else load_file(str(path))
    model = timm.create_model("scratch_vit_ti16", num_classes=10, **SMALL)
    with caplog.at_level(logging.INFO, logger="timm_vitscratch.models.checkpoint_filter"):
        state_dict = checkpoint_filter_fn(foreign, model)
        assert set(state_dict) == set(model.state_dict())
        model.load_state_dict(state_dict, strict=True)
        assert not [r for r in caplog.records if "remapped" in r.getMessage()]  # already the model's names
        assert all(torch.equal(model.state_dict()[k], v) for k, v in ours.items())
        timm.create_model("scratch_vit_ti16", num_classes=10, **SMALL).load_state_dict(foreign)
    said = [r.getMessage() for r in caplog.records if "remapped" in r.getMessage()]
    assert said == [
        f"load_state_dict: a {kind.split('-')[0]} state dict, remapped to the model's names by checkpoint_filter_fn"
    ]


def test_jax_npz_routes(laid_out):
    ours, _, npz = laid_out
    with np.load(npz) as arrays:
        state_dict = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    model = timm.create_model(
        "scratch_vit_ti16",
        pretrained=True,
        num_classes=3,
        **SMALL,
        pretrained_cfg_overlay=dict(state_dict=state_dict, num_classes=-1),
    )
    assert_body_equal(model, ours)
    model = timm.create_model("scratch_vit_ti16", num_classes=10, **SMALL)
    model.load_state_dict(state_dict)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ours.items())
    model = timm.create_model("scratch_vit_ti16", num_classes=10, **SMALL)
    load_checkpoint(model, str(npz))  # timm hands a .npz to model.load_pretrained
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ours.items())
    # a model built by the class itself (not through the registry) takes foreign state dicts too
    direct = VisionTransformer(**{**ARCHITECTURES["scratch_vit_ti16"], "num_classes": 10, **SMALL})
    direct.load_state_dict(state_dict)
    assert all(torch.equal(direct.state_dict()[k], v) for k, v in ours.items())


def test_unknown_state_dict_is_refused_naming_its_keys(tmp_path):
    save_file({"encoder.weight": torch.zeros(2), "decoder.bias": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ConversionError, match=re.escape("keys not recognised: 'decoder.bias', 'encoder.weight'")):
        timm.create_model(
            "scratch_vit_ti16",
            pretrained=True,
            num_classes=3,
            **SMALL,
            pretrained_cfg_overlay=dict(file=str(tmp_path / "other.safetensors"), num_classes=-1),
        )
    model = timm.create_model("scratch_vit_ti16", num_classes=3, **SMALL)
    with pytest.raises(ConversionError, match="keys not recognised"):
        load_checkpoint(model, str(tmp_path / "other.safetensors"))


def test_missing_body_tensor_is_refused_not_left_random(laid_out):
    _, files, _ = laid_out
    state = torch.load(files["torchvision"], weights_only=True)
    del state["encoder.layers.encoder_layer_1.mlp.3.weight"]
    with pytest.raises(ConversionError, match=r"lacks 'blocks\.1\.mlp\.fc2\.weight'"):
        timm.create_model(
            "scratch_vit_ti16",
            pretrained=True,
            num_classes=3,
            **SMALL,
            pretrained_cfg_overlay=dict(state_dict=state, num_classes=-1),
        )


def test_timm_checkpoint_with_features_the_model_lacks_is_refused():
    source = randomized(lambda: timm.create_model("vit_tiny_patch16_224", num_classes=10, reg_tokens=4, **SMALL))
    with pytest.raises(ConversionError, match="'reg_token'"):
        timm.create_model(
            "scratch_vit_ti16",
            pretrained=True,
            num_classes=3,
            **SMALL,
            pretrained_cfg_overlay=dict(state_dict=source.state_dict(), num_classes=-1),
        )


def test_our_own_state_dict_loads_untouched():
    model = timm.create_model("scratch_vit_ti16", num_classes=3, **SMALL)
    other = timm.create_model("scratch_vit_ti16", num_classes=3, **SMALL)
    other.load_state_dict(model.state_dict())
    assert all(torch.equal(other.state_dict()[k], v) for k, v in model.state_dict().items())
    result = other.load_state_dict({**model.state_dict(), "extra": torch.zeros(1)}, strict=False)
    assert result.unexpected_keys == ["extra"]
