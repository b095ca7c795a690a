"""What shapes cannot tell (head count, MLP activation, LayerNorm eps) is read from the source, fixed by its
format, or assumed; --verify cannot confirm an assumption (its reference shares it) and says so instead of
"ok"; --strict refuses to assume."""

import subprocess
import sys

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file
from timm.models._hub import save_config_for_hf

from tests.support.sources import batch, google_npz, hf_config, load_converted, logits, max_diff, randomized
from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError

X = batch(32)
EPS = 1e-06


def _timm_source(num_heads: int):
    """384 wide (ViT-S's width, whose 6 heads would be assumed), 2 blocks, 32x32 images."""
    return randomized(
        lambda: timm.models.vision_transformer.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=384, depth=2, num_heads=num_heads, num_classes=4
        )
    )


def _save(model, path):
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


@pytest.mark.slow  # three verified conversions
def test_wrong_head_count_is_verified_only_under_the_assumption(tmp_path):
    """The issue's case: a bare timm state dict at width 384 with 12 heads converts with 6 assumed, and the
    reference, built under the same assumption, agrees; the real model does not."""
    source = _timm_source(num_heads=12)
    weights = _save(source, tmp_path / "w.safetensors")
    result = convert(weights, tmp_path / "out", verify=True)
    assert result.assumed == {"num_heads": 6, "act_layer": "gelu", "norm_eps": EPS}
    check = result.verification
    assert check.passed and not check.confirmed and check.assumed == result.assumed
    assert (
        "verified under the assumptions heads=6, act_layer=gelu, norm_eps=1e-06, which the reference shares; "
        "pass --num-heads or convert a directory" in check.summary()
    )
    assert not check.summary().endswith(": ok")
    assert max_diff(logits(load_converted(tmp_path / "out"), X), logits(source, X)) > 1e-3  # the assumption was wrong
    right = convert(weights, tmp_path / "right", verify=True, num_heads=12)
    assert right.assumed == {"act_layer": "gelu", "norm_eps": EPS}
    assert max_diff(logits(load_converted(tmp_path / "right"), X), logits(source, X)) <= 1e-4


@pytest.mark.slow  # the convert command in processes
def test_cli_says_what_it_assumed_and_strict_refuses(tmp_path):
    weights = _save(_timm_source(num_heads=12), tmp_path / "w.safetensors")
    cli = [sys.executable, "-m", "timm_vitscratch.cli", "convert", str(weights)]
    done = subprocess.run(cli + [str(tmp_path / "out"), "--verify"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "heads: 6, assumed from scratch_vit_s16 (the checkpoint does not say); pass --num-heads N if it used "
        "another count" in lines
    )
    assert any(line.startswith("act_layer=gelu, norm_eps=1e-06: assumed, timm's defaults") for line in lines)
    verify = lines[-1]
    assert verify.startswith("verify: max-abs-diff features ") and not verify.endswith("ok")
    assert "verified under the assumptions heads=6, act_layer=gelu, norm_eps=1e-06" in verify
    strict = subprocess.run(cli + [str(tmp_path / "strict"), "--verify", "--strict"], capture_output=True, text=True)
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr == (
        f"vitscratch: error: {weights}: --strict: nothing records heads=6, act_layer=gelu, "
        "norm_eps=1e-06, which would be assumed; pass --num-heads or convert a directory "
        "holding the weights and the source's config.json (or a train.py checkpoint with its "
        "args); nothing was written\n"
    )
    assert not (tmp_path / "strict").exists()


def test_a_timm_config_records_every_fact_and_verify_says_ok(tmp_path):
    """A folder as timm's save_for_hf writes it: config.json names the architecture and its arguments."""
    source = randomized(
        lambda: timm.create_model(
            "vit_small_patch16_224", img_size=32, patch_size=8, depth=2, num_heads=12, num_classes=4
        )
    )
    folder = tmp_path / "timm"
    folder.mkdir()
    _save(source, folder / "model.safetensors")
    save_config_for_hf(source, folder / "config.json")
    result = convert(folder, tmp_path / "out", verify=True, strict=True)
    assert result.assumed == {} and result.assumption_notes == []
    assert result.verification.confirmed and result.verification.summary().endswith(": ok")


def test_torchvision_fixes_activation_and_eps_but_not_the_head_count(tmp_path):
    source = randomized(
        lambda: torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=256, num_classes=4
        )
    )
    weights = _save(source, tmp_path / "tv.safetensors")
    assumed = convert(weights, tmp_path / "out", verify=True)
    assert assumed.assumed == {"num_heads": 1} and "heads=1" in assumed.verification.summary()
    stated = convert(weights, tmp_path / "stated", verify=True, num_heads=4, strict=True)
    assert stated.assumed == {} and stated.verification.summary().endswith(": ok")


def test_transformers_without_its_config_assumes_all_three(tmp_path):
    import transformers

    source = randomized(
        lambda: transformers.ViTForImageClassification(
            hf_config(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=256,
                image_size=32,
                patch_size=8,
                num_labels=4,
            )
        )
    )
    weights = _save(source, tmp_path / "vit.safetensors")
    with pytest.raises(ConversionError, match=r"--strict: nothing records heads=1, act_layer=gelu, norm_eps=1e-12"):
        convert(weights, tmp_path / "strict", strict=True)
    assert convert(weights, tmp_path / "out").assumed == {"num_heads": 1, "act_layer": "gelu", "norm_eps": 1e-12}


def test_a_jax_npz_records_every_fact(tmp_path):
    source = randomized(
        lambda: timm.models.vision_transformer.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=4
        )
    )
    result = convert(google_npz(source, tmp_path / "vit.npz"), tmp_path / "out", verify=True, strict=True)
    assert result.assumed == {} and result.verification.confirmed
    assert torch.allclose(logits(load_converted(tmp_path / "out"), X), logits(source, X), atol=1e-4)
