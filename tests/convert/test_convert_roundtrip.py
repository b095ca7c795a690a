"""Export back out (timm, torchvision, JAX) and round trips: the weights come back bit for bit."""

import numpy as np
import pytest
import timm
import torch
import torchvision
from safetensors.torch import load_file, save_file

from tests.support import tiny
from tests.support.sources import NUM_CLASSES, TOL, batch, logits, max_diff, randomized, timm_deit_distilled
from timm_vitscratch.convert import ConversionError, convert, export
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import model_config, save_model_directory, write_config

pytestmark = pytest.mark.slow  # import and export through every format


def scratch_dir(tmp_path, name="scratch_vit_ti16", **kwargs):
    """A scratch model directory made from a random scratch model (our own layout = timm's names)."""
    model = randomized(lambda: timm.create_model(name, num_classes=NUM_CLASSES, **kwargs))
    save_file(model.state_dict(), str(tmp_path / "scratch.safetensors"))
    convert(tmp_path / "scratch.safetensors", tmp_path / "scratch", model=name)
    return tmp_path / "scratch", model


def assert_same_weights(dir_a, dir_b):
    a, b = load_file(str(dir_a / "model.safetensors")), load_file(str(dir_b / "model.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
    assert sha256_file(dir_a / "model.safetensors") == sha256_file(dir_b / "model.safetensors")


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_scratch_timm_scratch_is_bit_exact(tmp_path, suffix):
    model_dir, ours = scratch_dir(tmp_path)
    exported = tmp_path / f"timm{suffix}"
    export(model_dir, "timm", exported)
    state_dict = load_file(str(exported)) if suffix == ".safetensors" else torch.load(exported, weights_only=True)
    stock = timm.create_model("vit_tiny_patch16_224", num_classes=NUM_CLASSES, pretrained=False).eval()
    stock.load_state_dict(state_dict, strict=True)  # a stock timm state dict
    assert max_diff(logits(stock, batch()), logits(ours, batch())) <= TOL
    convert(exported, tmp_path / "back", source="timm")
    assert_same_weights(model_dir, tmp_path / "back")


def test_distilled_scratch_timm_scratch_is_bit_exact(tmp_path):
    source = timm_deit_distilled()
    save_file(source.state_dict(), str(tmp_path / "deit.safetensors"))
    convert(tmp_path / "deit.safetensors", tmp_path / "scratch")
    export(tmp_path / "scratch", "timm", tmp_path / "timm.safetensors")
    assert load_file(str(tmp_path / "timm.safetensors")).keys() == source.state_dict().keys()
    convert(tmp_path / "timm.safetensors", tmp_path / "back")
    assert_same_weights(tmp_path / "scratch", tmp_path / "back")


@pytest.mark.parametrize("representation", [False, True])
def test_scratch_torchvision_scratch_is_bit_exact(tmp_path, representation):
    kwargs = dict(representation_size=192) if representation else {}
    model_dir, ours = scratch_dir(tmp_path, **kwargs)
    export(model_dir, "torchvision", tmp_path / "tv.pth")
    stock = torchvision.models.VisionTransformer(
        image_size=224,
        patch_size=16,
        num_layers=12,
        num_heads=3,
        hidden_dim=192,
        mlp_dim=768,
        num_classes=NUM_CLASSES,
        representation_size=192 if representation else None,
    ).eval()
    stock.load_state_dict(torch.load(tmp_path / "tv.pth", weights_only=True), strict=True)
    assert max_diff(logits(stock, batch()), logits(ours, batch())) <= TOL
    convert(tmp_path / "tv.pth", tmp_path / "back")
    assert_same_weights(model_dir, tmp_path / "back")


def test_jax_export_loads_in_timms_npz_loader_and_imports_bit_exact(tmp_path):
    model_dir, ours = scratch_dir(tmp_path)
    export(model_dir, "jax", tmp_path / "ViT-Ti_16.npz")
    stock = timm.create_model("vit_tiny_patch16_224", num_classes=NUM_CLASSES, pretrained=False).eval()
    stock.load_pretrained(str(tmp_path / "ViT-Ti_16.npz"))  # timm's own loader for Google's .npz files
    diff = max_diff(logits(stock, batch()), logits(ours, batch()))
    print(f"timm npz loader vs ours: max-abs-diff {diff:.2e}")
    assert diff <= 1e-5
    convert(tmp_path / "ViT-Ti_16.npz", tmp_path / "back", verify=True)
    assert_same_weights(model_dir, tmp_path / "back")


def test_jax_has_logits_round_trip(tmp_path):
    model_dir, _ = scratch_dir(tmp_path, representation_size=192)
    export(model_dir, "jax", tmp_path / "in21k.npz")
    convert(tmp_path / "in21k.npz", tmp_path / "back", verify=True)
    assert_same_weights(model_dir, tmp_path / "back")


def test_export_refuses_what_the_target_cannot_hold(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    in21k_dir, _ = scratch_dir(tmp_path / "a", representation_size=192)
    with pytest.raises(ConversionError, match="no representation layer"):
        export(in21k_dir, "timm", tmp_path / "x.safetensors")
    deit_dir, _ = scratch_dir(tmp_path / "b", name="scratch_deit_ti16_distilled")
    for target, suffix in (("torchvision", ".pth"), ("jax", ".npz")):
        with pytest.raises(ConversionError, match="distillation token"):
            export(deit_dir, target, tmp_path / f"x{suffix}")
    with pytest.raises(ConversionError, match=r"jax export writes \.npz"):
        export(deit_dir, "jax", tmp_path / "x.pth")
    with pytest.raises(ConversionError, match="unknown export target 'onnx'"):
        export(deit_dir, "onnx", tmp_path / "x.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_export_refuses_a_tampered_weights_file(tmp_path):
    model_dir, _ = scratch_dir(tmp_path)
    weights = model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ConversionError, match="these are not the weights the config describes"):
        export(model_dir, "timm", tmp_path / "x.safetensors")


def test_small_scratch_model_exports_to_jax_with_heads_axis(tmp_path):
    # any scratch model directory exports, whatever its model_args: heads come from the model (4 of 16 here)
    model = tiny(num_classes=3).eval()
    save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    write_config(tmp_path, model_config(model))
    export(tmp_path, "jax", tmp_path / "tiny.npz")
    with np.load(tmp_path / "tiny.npz") as npz:
        assert npz["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"].shape == (64, 4, 16)
        assert npz["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/out/kernel"].shape == (4, 16, 64)
        assert npz["embedding/kernel"].shape == (8, 8, 3, 64)


@pytest.mark.parametrize(
    "options, refused",
    [
        (dict(init_values=1e-5), r"no place for 'blocks\.0\.ls1\.gamma'"),
        (dict(reg_tokens=2), r"no place for 'reg_token'; "),
        (dict(qk_norm=True), r"no place for 'blocks\.0\.attn\.k_norm\.bias'"),
        (dict(act_layer="quick_gelu"), "exact GELU; this model's MLP activation is QuickGELU"),
        (dict(no_embed_class=True), "no_embed_class=True"),
    ],
)
def test_export_never_drops_an_option_the_target_cannot_hold(tmp_path, options, refused):
    model = randomized(lambda: timm.create_model("scratch_vit_ti16", num_classes=NUM_CLASSES, **options))
    model_dir = save_model_directory(model, tmp_path / "scratch")  # config.json records the options
    for target, suffix in (("torchvision", ".pth"), ("jax", ".npz")):
        with pytest.raises(ConversionError, match=refused):
            export(model_dir, target, tmp_path / f"x{suffix}")
        assert not (tmp_path / f"x{suffix}").exists()
    # timm's VisionTransformer takes every option: the same directory exports to timm's layout
    result = export(model_dir, "timm", tmp_path / "x.safetensors")
    reference = timm.create_model("vit_tiny_patch16_224", num_classes=NUM_CLASSES, **options).eval()
    reference.load_state_dict(load_file(str(result.out)), strict=True)
