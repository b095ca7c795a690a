"""Each source format, from a model built by its own library: our converted model gives the same logits.

The reference logits are computed here with the source library's model; ``--verify`` (also run) builds
its own reference separately.
"""

import json

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file

from tests.support.sources import (
    NUM_CLASSES,
    TOL,
    batch,
    google_npz,
    hf_config,
    hf_legacy_state_dict,
    load_converted,
    logits,
    max_diff,
    randomized,
    timm_deit_distilled,
    timm_vit,
    torchvision_vit,
)
from timm_vitscratch.convert import convert
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import METADATA_KEY

pytestmark = pytest.mark.slow  # every source format converted and verified by its own library


def check(src, out, reference, x=None, **kwargs):
    """Convert (with --verify), load through timm local-dir, compare with the reference logits."""
    result = convert(src, out, verify=True, **kwargs)
    x = batch() if x is None else x
    ours = load_converted(out)
    diff = max_diff(logits(ours, x), logits(reference, x))
    assert diff <= TOL, diff
    assert result.verification.max_abs_diff <= TOL
    print(
        f"{result.source_format}: {result.model_name} max-abs-diff {diff:.2e} (verify {result.verification.max_abs_diff:.2e})"
    )
    return result, ours


def test_timm_vit(tmp_path):
    source = timm_vit()
    torch.save(source.state_dict(), tmp_path / "vit.pth")
    result, _ = check(tmp_path / "vit.pth", tmp_path / "out", source)
    assert (result.source_format, result.detected, result.model_name) == ("timm", True, "scratch_vit_ti16")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architecture"] == "scratch_vit_ti16" and config["num_classes"] == NUM_CLASSES
    assert config[METADATA_KEY]["sha256"] == sha256_file(tmp_path / "out" / "model.safetensors")
    assert config[METADATA_KEY]["source"]["format"] == "timm"


def test_timm_deit_distilled(tmp_path):
    source = timm_deit_distilled()
    save_file(source.state_dict(), str(tmp_path / "deit.safetensors"))
    result, ours = check(tmp_path / "deit.safetensors", tmp_path / "out", source)
    assert result.model_name == "scratch_deit_ti16_distilled" and ours.distilled


def test_torchvision_vit(tmp_path):
    source = torchvision_vit()
    torch.save(source.state_dict(), tmp_path / "tv.pth")
    result, _ = check(tmp_path / "tv.pth", tmp_path / "out", source)
    assert (result.source_format, result.model_name) == ("torchvision", "scratch_vit_ti16")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["pretrained_cfg"]["mean"] == list(timm.data.IMAGENET_DEFAULT_MEAN)  # torchvision's preprocessing
    # the variant's cfg is its default pretrained tag's; converted weights claim none of that tag's provenance
    tag_cfg = timm.models.get_pretrained_cfg("scratch_vit_ti16").to_dict()
    assert tag_cfg["tag"] and tag_cfg["origin_url"]
    assert not {"tag", "description", "origin_url", "paper_name", "paper_ids"} & set(config["pretrained_cfg"])
    assert config["pretrained_cfg"]["license"] == "unknown"  # a torchvision file names none: said, never a default


def test_torchvision_legacy_mlp_names(tmp_path):
    source = torchvision_vit()
    old = {
        k.replace("mlp.0.", "mlp.linear_1.").replace("mlp.3.", "mlp.linear_2."): v
        for k, v in source.state_dict().items()
    }
    assert any(".mlp.linear_1." in k for k in old)
    # torchvision itself still loads the old names (its MLPBlock renames them): same model
    reloaded = torchvision_vit()
    reloaded.load_state_dict(old)
    assert max_diff(logits(reloaded, batch()), logits(source, batch())) == 0
    torch.save(old, tmp_path / "old.pth")
    check(tmp_path / "old.pth", tmp_path / "out", source)


def test_torchvision_has_logits(tmp_path):
    source = torchvision_vit(representation_size=192)
    torch.save(source.state_dict(), tmp_path / "tv21k.pth")
    result, ours = check(tmp_path / "tv21k.pth", tmp_path / "out", source)
    assert result.model_name == "scratch_vit_ti16" and result.model_args["representation_size"] == 192
    assert isinstance(ours.pre_logits.act, torch.nn.Tanh)


def test_torchvision_vit_b_16_at_full_size(tmp_path):
    source = randomized(lambda: torchvision.models.vit_b_16(num_classes=NUM_CLASSES))
    torch.save(source.state_dict(), tmp_path / "vit_b_16.pth")
    result, _ = check(tmp_path / "vit_b_16.pth", tmp_path / "out", source, x=batch(n=1))
    assert result.model_name == "scratch_vit_b16"


def test_transformers_current_names(tmp_path):
    from transformers import ViTForImageClassification

    source = randomized(lambda: ViTForImageClassification(hf_config()))
    assert any(".attention.q_proj." in k for k in source.state_dict())  # transformers 5 module names
    save_file(source.state_dict(), str(tmp_path / "hf.safetensors"))
    result, _ = check(tmp_path / "hf.safetensors", tmp_path / "out", source)
    assert (result.source_format, result.model_name) == ("transformers", "scratch_vit_ti16")
    assert result.model_args["norm_eps"] == 1e-12  # transformers' default LayerNorm eps, kept exactly


def test_transformers_hub_directory_with_stored_names(tmp_path):
    from transformers import ViTForImageClassification

    source = randomized(lambda: ViTForImageClassification(hf_config(layer_norm_eps=1e-6)))
    source.save_pretrained(tmp_path / "hub")  # writes the names stored on the Hub
    result, _ = check(tmp_path / "hub", tmp_path / "out", source)
    assert result.model_name == "scratch_vit_ti16" and "norm_eps" not in result.model_args


def test_transformers_legacy_names_renamed_by_hand(tmp_path):
    from transformers import ViTForImageClassification

    source = randomized(lambda: ViTForImageClassification(hf_config()))
    legacy = hf_legacy_state_dict(source)
    assert "vit.encoder.layer.0.attention.attention.query.weight" in legacy
    torch.save(legacy, tmp_path / "pytorch_model.bin")
    # transformers itself reads these names (its own renaming on load): the file is a real legacy checkpoint
    hub = tmp_path / "hub"
    hub.mkdir()
    source.config.save_pretrained(hub)
    (hub / "pytorch_model.bin").symlink_to(tmp_path / "pytorch_model.bin")
    reloaded = ViTForImageClassification.from_pretrained(hub).eval()
    assert max_diff(logits(reloaded, batch()), logits(source, batch())) == 0
    check(tmp_path / "pytorch_model.bin", tmp_path / "out", source, source="transformers")


def test_transformers_vit_model_pooler_is_the_representation_layer(tmp_path):
    from transformers import ViTModel

    source = randomized(lambda: ViTModel(hf_config(), add_pooling_layer=True))
    source.save_pretrained(tmp_path / "hub")

    def reference(x):
        return source(pixel_values=x).pooler_output

    result, _ = check(tmp_path / "hub", tmp_path / "out", reference)
    assert result.model_args["num_classes"] == 0 and result.model_args["representation_size"] == 192


def test_transformers_deit_with_teacher(tmp_path):
    from transformers import DeiTForImageClassificationWithTeacher

    source = randomized(lambda: DeiTForImageClassificationWithTeacher(hf_config("DeiTConfig")))
    source.save_pretrained(tmp_path / "hub")
    result, _ = check(tmp_path / "hub", tmp_path / "out", source)
    assert result.model_name == "scratch_deit_ti16_distilled"


def test_jax_npz(tmp_path):
    source = timm_vit()
    npz = google_npz(source, tmp_path / "ViT-Ti_16.npz")
    # the fixture is Google's layout as timm's own npz loader reads it
    loaded = timm.create_model("vit_tiny_patch16_224", num_classes=NUM_CLASSES).eval()
    loaded.load_pretrained(str(npz))
    assert max_diff(logits(loaded, batch()), logits(source, batch())) == 0
    result, _ = check(npz, tmp_path / "out", source)
    assert (result.source_format, result.model_name) == ("jax", "scratch_vit_ti16")


def test_jax_has_logits(tmp_path):
    source = timm_vit(num_classes=0)  # timm's ViT has no representation layer: add Google's pre_logits arrays
    generator = torch.Generator().manual_seed(3)
    rep = {
        "pre_logits/kernel": 0.05 * torch.randn(192, 192, generator=generator),
        "pre_logits/bias": 0.05 * torch.randn(192, generator=generator),
        "head/kernel": 0.05 * torch.randn(192, NUM_CLASSES, generator=generator),
        "head/bias": 0.05 * torch.randn(NUM_CLASSES, generator=generator),
    }
    npz = google_npz(source, tmp_path / "ViT-Ti_16-21k.npz", representation=rep)

    def reference(x):  # has_logits: features -> Dense + tanh -> Dense, as in Google's ViT
        hidden = torch.tanh(source(x) @ rep["pre_logits/kernel"] + rep["pre_logits/bias"])
        return hidden @ rep["head/kernel"] + rep["head/bias"]

    result, _ = check(npz, tmp_path / "out", reference)
    assert result.model_args["representation_size"] == 192 and result.model_args["num_classes"] == NUM_CLASSES
