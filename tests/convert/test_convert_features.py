"""Checkpoints as people have them (training checkpoints, EMA, DDP / torch.compile prefixes, old formats),
dtypes, position-embedding resampling, the streaming writer and the CLI."""

import argparse
import json
import re
import subprocess
import sys

import pytest
import timm
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tests.support.sources import (
    NUM_CLASSES,
    TOL,
    batch,
    google_npz,
    hf_config,
    load_converted,
    logits,
    max_diff,
    randomized,
    timm_vit,
    torchvision_vit,
)
from timm_vitscratch.convert import ConversionError, convert
from timm_vitscratch.files import sha256_file
from timm_vitscratch.layouts import open_checkpoint
from timm_vitscratch.model_dir import METADATA_KEY
from timm_vitscratch.tensor_writer import TensorSpec, write_safetensors

pytestmark = pytest.mark.slow  # conversions with resampling, dtypes and training checkpoints, verified


def converted_weights(out_dir):
    return load_file(str(out_dir / "model.safetensors"))


def test_train_py_checkpoint_and_its_ema_weights(tmp_path):
    """A checkpoint written by timm's own CheckpointSaver (what train.py uses), with model EMA."""
    from timm.utils import CheckpointSaver, ModelEmaV3

    model = timm_vit()
    ema = ModelEmaV3(model)
    with torch.no_grad():
        for param in ema.module.parameters():
            param.mul_(0.5)  # make the EMA weights differ from the live ones
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    args = argparse.Namespace(model="vit_tiny_patch16_224", lr=0.1)
    saver = CheckpointSaver(model, optimizer, args=args, model_ema=ema, checkpoint_dir=str(tmp_path))
    saver.save_checkpoint(epoch=0)
    checkpoint = tmp_path / "last.pth.tar"
    raw = torch.load(checkpoint, weights_only=False)
    assert {"state_dict", "state_dict_ema", "optimizer", "args"} <= set(raw)

    live = convert(checkpoint, tmp_path / "live")
    assert live.wrapper == "state_dict"
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in converted_weights(tmp_path / "live").items())
    averaged = convert(checkpoint, tmp_path / "ema", ema=True, verify=True)
    assert averaged.wrapper == "state_dict_ema"
    assert all(torch.equal(v, ema.module.state_dict()[k]) for k, v in converted_weights(tmp_path / "ema").items())
    config = json.loads((tmp_path / "ema" / "config.json").read_text())
    assert config[METADATA_KEY]["source"]["wrapper"] == "state_dict_ema"


def test_ema_requested_but_absent(tmp_path):
    torch.save({"state_dict": timm_vit().state_dict()}, tmp_path / "no_ema.pth.tar")
    with pytest.raises(ConversionError, match="no state_dict_ema or model_ema"):
        convert(tmp_path / "no_ema.pth.tar", tmp_path / "out", ema=True)
    save_file(timm_vit().state_dict(), str(tmp_path / "w.safetensors"))
    with pytest.raises(ConversionError, match=re.escape("EMA weights come from a train.py checkpoint")):
        convert(tmp_path / "w.safetensors", tmp_path / "out", ema=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("wrap", ["ddp", "compile", "compile+ddp", "model-key"])
def test_wrapped_and_prefixed_state_dicts(tmp_path, wrap):
    model = timm_vit()
    if wrap == "ddp":
        state = {"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}
    elif wrap == "compile":
        state = torch.compile(model).state_dict()  # torch.compile's wrapper adds _orig_mod.
        assert next(iter(state)).startswith("_orig_mod.")
    elif wrap == "compile+ddp":
        state = {f"_orig_mod.module.{k}": v for k, v in model.state_dict().items()}
    else:
        state = {"model": model.state_dict(), "epoch": 300}  # DeiT's released checkpoints
    torch.save(state, tmp_path / "wrapped.pth")
    convert(tmp_path / "wrapped.pth", tmp_path / "out")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in converted_weights(tmp_path / "out").items())


def test_legacy_torch_save_format(tmp_path):
    model = torchvision_vit()
    torch.save(model.state_dict(), tmp_path / "old.pth", _use_new_zipfile_serialization=False)
    result = convert(tmp_path / "old.pth", tmp_path / "out", verify=True)
    assert result.source_format == "torchvision"


def test_opt_target_prefix_of_older_jax_checkpoints(tmp_path):
    import numpy as np

    npz = google_npz(timm_vit(), tmp_path / "plain.npz")
    with np.load(npz) as arrays:
        np.savez(tmp_path / "nested.npz", **{f"opt/target/{k}": arrays[k] for k in arrays.files})
    convert(tmp_path / "nested.npz", tmp_path / "out", verify=True)
    convert(npz, tmp_path / "plain")
    assert sha256_file(tmp_path / "out" / "model.safetensors") == sha256_file(tmp_path / "plain" / "model.safetensors")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dtype(tmp_path, dtype):
    source = timm_vit()
    save_file(source.state_dict(), str(tmp_path / "vit.safetensors"))
    result = convert(tmp_path / "vit.safetensors", tmp_path / "out", dtype=dtype, verify=True)
    weights = converted_weights(tmp_path / "out")
    assert {v.dtype for v in weights.values()} == {getattr(torch, dtype)}
    assert torch.equal(weights["head.weight"], source.head.weight.to(getattr(torch, dtype)))
    assert result.verification.passed  # against timm's model with the same rounding
    ours = load_converted(tmp_path / "out")  # timm loads the half-precision file into its fp32 model
    assert max_diff(logits(ours, batch()), logits(source, batch())) < 0.05


def test_resample_position_embedding_like_timm(tmp_path):
    source = timm_vit()
    save_file(source.state_dict(), str(tmp_path / "vit.safetensors"))
    result = convert(tmp_path / "vit.safetensors", tmp_path / "out", img_size=256, verify=True)
    assert result.resampled_from == (224, 224) and result.model_args["img_size"] == 256
    ours = load_converted(tmp_path / "out")
    assert ours.pos_embed.shape == (1, 1 + 16 * 16, 192)
    # timm itself, asked for the same model at 256, resamples the same table the same way
    stock = timm.create_model("vit_tiny_patch16_224", num_classes=NUM_CLASSES, img_size=256).eval()
    stock.load_state_dict(timm.models.vision_transformer.checkpoint_filter_fn(source.state_dict(), stock))
    assert max_diff(logits(ours, batch(256)), logits(stock, batch(256))) <= TOL
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["pretrained_cfg"]["input_size"] == [3, 256, 256]


def test_resample_position_embedding_like_torchvision(tmp_path):
    from torchvision.models.vision_transformer import interpolate_embeddings

    source = torchvision_vit()
    torch.save(source.state_dict(), tmp_path / "tv.pth")
    convert(tmp_path / "tv.pth", tmp_path / "out", img_size=160, verify=True)
    stock = torchvision_vit(image_size=160)
    stock.load_state_dict(interpolate_embeddings(160, 16, source.state_dict()))
    assert max_diff(logits(load_converted(tmp_path / "out"), batch(160)), logits(stock, batch(160))) <= TOL


def test_resample_position_embedding_like_transformers_and_timms_npz_loader(tmp_path):
    from transformers import ViTForImageClassification

    hf = randomized(lambda: ViTForImageClassification(hf_config()))
    hf.save_pretrained(tmp_path / "hub")
    result = convert(tmp_path / "hub", tmp_path / "hf_out", img_size=288, verify=True)  # HF's interpolation
    assert result.verification.passed
    npz = google_npz(timm_vit(), tmp_path / "vit.npz")
    result = convert(npz, tmp_path / "jax_out", img_size=288, verify=True)  # timm's npz loader resamples
    assert result.verification.passed


def test_streaming_writer_output_is_standard_safetensors(tmp_path):
    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.arange(7, dtype=torch.int64),
        "c": torch.randn(2).half(),
        "d": torch.randn(4, 1).bfloat16(),
        "e": torch.zeros(0, 3),
        "f": torch.tensor(True),
    }
    specs = [TensorSpec(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    sha = write_safetensors(tmp_path / "w.safetensors", specs, lambda spec: tensors[spec.name])
    assert sha == sha256_file(tmp_path / "w.safetensors")
    loaded = load_file(str(tmp_path / "w.safetensors"))  # the safetensors library reads it back exactly
    assert loaded.keys() == tensors.keys() and all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    with safe_open(str(tmp_path / "w.safetensors"), "pt") as handle:
        assert handle.metadata() == {"format": "pt"}
    with pytest.raises(ConversionError, match="came out as"):
        write_safetensors(tmp_path / "x.safetensors", specs, lambda spec: torch.zeros(1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]


def test_reader_reads_one_tensor_at_a_time(tmp_path):
    model = timm_vit()
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    torch.save(model.state_dict(), tmp_path / "w.pth")
    for path in (tmp_path / "w.safetensors", tmp_path / "w.pth"):
        with open_checkpoint(path) as checkpoint:
            assert checkpoint.shape("head.weight") == (NUM_CLASSES, 192)
            assert torch.equal(checkpoint.tensor("blocks.7.attn.qkv.weight"), model.blocks[7].attn.qkv.weight)
            checkpoint.release("blocks.7.attn.qkv.weight")  # pages given back; the data is still readable
            assert torch.equal(checkpoint.tensor("blocks.7.attn.qkv.weight"), model.blocks[7].attn.qkv.weight)


def test_cli_convert_says_what_it_found_and_export(tmp_path, capsys):
    from timm_vitscratch.cli import main

    torch.save(torchvision_vit().state_dict(), tmp_path / "vit_ti.pth")
    assert main(["convert", str(tmp_path / "vit_ti.pth"), str(tmp_path / "out"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "torchvision format, detected from its keys" in out
    assert "model: scratch_vit_ti16 (patch 16, embed_dim 192, depth 12, heads 3" in out
    assert "verify: max-abs-diff" in out and "against torchvision's VisionTransformer" in out
    assert main(["export", str(tmp_path / "out"), "--to", "jax", str(tmp_path / "vit.npz")]) == 0
    assert (tmp_path / "vit.npz").is_file()
    assert main(["convert", str(tmp_path / "vit_ti.pth"), str(tmp_path / "o3"), "--model", "scratch_vit_l16"]) == 2
    assert "does not match" in capsys.readouterr().err
    # the console script: an error is one line on stderr, exit status 2, no traceback
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{broken")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "timm_vitscratch.cli",
            "convert",
            str(tmp_path / "broken.safetensors"),
            str(tmp_path / "o2"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stderr.startswith("vitscratch: error: ")
    assert "broken.safetensors" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_cli_convert_says_which_tensors_it_left_out(tmp_path, capsys):
    """Meta's fused q/k/v biases that are all zero (and their masks) are not written: the command says so, with
    the count, instead of writing fewer tensors silently."""
    from tests.convert.test_dinov3_sources import meta_state_dict, timm_dinov3
    from timm_vitscratch.cli import main

    torch.save(meta_state_dict(timm_dinov3("vit_small_patch16_dinov3", embed_dim=64, num_heads=4)), tmp_path / "m.pth")
    assert main(["convert", str(tmp_path / "m.pth"), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    total = len(torch.load(tmp_path / "m.pth", weights_only=True))
    assert f"left out 6 of the checkpoint's {total} tensors, which the model computes without" in out
    assert "blocks.0.attn.qkv.bias, blocks.0.attn.qkv.bias_mask," in out
    assert len(converted_weights(tmp_path / "out")) == total - 6  # every other tensor is written
