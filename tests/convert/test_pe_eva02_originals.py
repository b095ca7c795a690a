"""Perception Encoder and EVA02 from their authors' files, against timm's own importer and open_clip's own model.

Meta's and BAAI's files are written from a tiny timm ``Eva`` with random weights by the inverse of timm's importer
(tests/support/eva_originals.py). Each case checks (a) that timm's ``checkpoint_filter_fn`` loads the file into
timm's model with the same outputs (the file is what timm reads as the original), and (b) that our conversion of
the same file, and our loader reading it directly, give timm's outputs. open_clip's EVA02-B-16 is open_clip's own
``CLIP``, at its true image-tower size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from timm.models.eva import checkpoint_filter_fn
from torch import nn

from tests.support.eva_originals import (
    EVA02_SIZE,
    PE_SIZE,
    TINY,
    baai_eva_state_dict,
    meta_pe_state_dict,
    open_clip_trunk_state_dict,
    randomized,
    timm_model,
)
from timm_vitscratch.convert import ConversionError, convert

pytestmark = pytest.mark.slow  # each file converted and verified by timm's importer

HEADS = TINY["num_heads"]  # neither Meta's nor BAAI's files record the head count


def images(size: tuple[int, int], seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def diff(a: nn.Module, b: nn.Module, size: tuple[int, int], features: bool = False) -> float:
    """max-abs-diff of two models' outputs (the head's, or the pooled features without one), or of every token
    after the last block (``features``)."""
    x = images(size)
    if features:
        return (a.forward_features(x) - b.forward_features(x)).abs().max().item()
    return (a(x) - b(x)).abs().max().item()


def timm_reads(original: dict[str, torch.Tensor], timm_name: str, **kwargs: Any) -> nn.Module:
    """A fresh timm model of that name, loaded strict through timm's own importer of the original file."""
    model = timm.create_model(timm_name, **{**TINY, **kwargs}).eval()
    model.load_state_dict(checkpoint_filter_fn(original, model), strict=True)
    return model


def ours_from(directory: Path) -> nn.Module:
    return timm.create_model(f"local-dir:{directory}", pretrained=True).eval()


Writer = Callable[[nn.Module], dict[str, torch.Tensor]]
# (timm's model, its arguments beyond TINY, how the original file is written, our variant, the licence)
CASES: list[tuple[str, dict[str, Any], Writer, str, str]] = [
    ("vit_pe_core_tiny_patch16_384", PE_SIZE, meta_pe_state_dict, "scratch_pe_core_t16", "apache-2.0"),
    (
        "vit_pe_core_tiny_patch16_384",
        PE_SIZE,
        lambda m: meta_pe_state_dict(m, clip=True),  # a whole CLIP model: the tower under visual.
        "scratch_pe_core_t16",
        "apache-2.0",
    ),
    (
        "vit_pe_core_gigantic_patch14_448",  # no class token, rotary grid offset 0
        dict(img_size=56, ref_feat_shape=(4, 4)),
        meta_pe_state_dict,
        "scratch_pe_core_g14",
        "apache-2.0",
    ),
    ("vit_pe_spatial_tiny_patch16_512", PE_SIZE, meta_pe_state_dict, "scratch_pe_spatial_t16", "apache-2.0"),
    (
        "vit_pe_lang_large_patch14_448",  # layer scale
        dict(img_size=56, ref_feat_shape=(4, 4)),
        meta_pe_state_dict,
        "scratch_pe_lang_l14",
        "apache-2.0",
    ),
    (
        "eva02_base_patch14_224",  # a MIM pretraining file: norm -> fc_norm, mask token and lm_head dropped
        dict(EVA02_SIZE, num_classes=0),
        lambda m: baai_eva_state_dict(m, mim=True),
        "scratch_eva02_b14",
        "mit",
    ),
    (
        "eva02_tiny_patch14_224",  # fine-tuned, packed SwiGLU (w12), a classifier
        dict(EVA02_SIZE, num_classes=10),
        baai_eva_state_dict,
        "scratch_eva02_t14",
        "mit",
    ),
    (
        "eva02_base_patch16_clip_224",  # EVA-CLIP's whole model: the tower under visual.
        dict(img_size=64),
        lambda m: baai_eva_state_dict(m, clip=True),
        "scratch_eva02_b16_clip",
        "mit",
    ),
    (
        "eva02_base_patch16_clip_224",  # open_clip's EVA02-CLIP: timm's names under visual.trunk.
        dict(img_size=64),
        open_clip_trunk_state_dict,
        "scratch_eva02_b16_clip",
        "mit",
    ),
]
IDS = ["pe_core", "pe_core_clip", "pe_core_g", "pe_spatial", "pe_lang", "eva02_mim", "eva02_t", "eva_clip", "oc_trunk"]


@pytest.mark.parametrize(("timm_name", "kwargs", "write", "variant", "license"), CASES, ids=IDS)
def test_original_file_is_what_timm_reads_and_converts_to_timms_outputs(
    tmp_path, timm_name, kwargs, write, variant, license
):
    source = timm_model(timm_name, **kwargs)
    original = write(source)
    size = (kwargs["img_size"], kwargs["img_size"])
    read_by_timm = diff(timm_reads(original, timm_name, **kwargs), source, size)
    assert read_by_timm == 0  # (a) timm's importer reads the file as this model
    torch.save(original, tmp_path / "original.pth")
    result = convert(tmp_path / "original.pth", tmp_path / "out", num_heads=HEADS, verify=True, strict=True)
    assert result.model_name == variant and result.detected
    assert result.verification.passed and result.verification.max_abs_diff == 0
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["pretrained_cfg"]["license"] == license
    converted = diff(ours_from(tmp_path / "out"), source, size)
    loaded = timm.create_model(
        variant, pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "original.pth")), **TINY, **kwargs
    ).eval()
    direct = diff(loaded, source, size, features=True)  # timm's loader drops a classifier of another size
    print(
        f"{result.source_format} -> {variant}: timm's importer {read_by_timm:.1e}, converted {converted:.1e}, "
        f"loaded directly {direct:.1e} (max-abs-diff against timm's {timm_name}); license {license}"
    )
    assert converted == 0 and direct == 0  # (b) ours is timm's, bit for bit


def test_converted_at_another_size_equals_timms_loader_at_that_size(tmp_path):
    """--img-size resamples the position table as timm's loader does (bicubic, antialiased). timm's importer of
    Meta's files keeps the table's size, so timm's model at the new size reads timm's own state dict of it."""
    source = timm_model("vit_pe_core_tiny_patch16_384", **PE_SIZE)
    torch.save(meta_pe_state_dict(source), tmp_path / "pe.pth")
    convert(tmp_path / "pe.pth", tmp_path / "out", num_heads=HEADS, img_size=(48, 80))
    resized = timm_reads(source.state_dict(), "vit_pe_core_tiny_patch16_384", **{**PE_SIZE, "img_size": (48, 80)})
    max_diff = diff(ours_from(tmp_path / "out"), resized, (48, 80))
    print(f"meta_pe -> scratch_pe_core_t16 at 48x80: max-abs-diff {max_diff:.1e} against timm's loader at 48x80")
    assert max_diff <= 1e-6


def test_meta_pe_records_everything_but_the_heads(tmp_path):
    torch.save(meta_pe_state_dict(timm_model("vit_pe_core_tiny_patch16_384", **PE_SIZE)), tmp_path / "pe.pth")
    result = convert(tmp_path / "pe.pth", tmp_path / "out")
    assert (result.source_format, result.model_name) == ("meta_pe", "scratch_pe_core_t16")
    assert set(result.assumed) == {"num_heads"}  # eps 1e-5 and GELU are every PE's
    with pytest.raises(ConversionError, match="heads"):
        convert(tmp_path / "pe.pth", tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict").exists()


def test_openai_clip_tower_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    state = meta_pe_state_dict(timm_model("vit_pe_core_tiny_patch16_384", **PE_SIZE))
    state = {k: v for k, v in state.items() if not k.startswith("attn_pool.")}  # OpenAI CLIP: ln_post and proj
    torch.save(state, tmp_path / "clip.pth")
    with pytest.raises(ConversionError, match="OpenAI CLIP's image tower") as err:
        convert(tmp_path / "clip.pth", tmp_path / "out", num_heads=HEADS)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_open_clip_projection_after_the_trunk_is_refused(tmp_path):
    state = open_clip_trunk_state_dict(timm_model("eva02_base_patch16_clip_224", img_size=64))
    state["visual.head.proj.weight"] = torch.randn(32, 64)  # open_clip's timm_proj='linear'
    torch.save(state, tmp_path / "oc.pth")
    with pytest.raises(ConversionError, match=r"projection of open_clip's after the timm trunk"):
        convert(tmp_path / "oc.pth", tmp_path / "out", num_heads=HEADS)
    assert not (tmp_path / "out").exists()


def test_timm_eva02_file_is_not_taken_for_baai_names(tmp_path):
    """timm's own EVA02 state dict is timm's layout; the same weights in BAAI's names are baai_eva."""
    from timm_vitscratch.layouts import StateDictCheckpoint, detect_layout

    source = timm_model("eva02_base_patch16_clip_224", img_size=64)
    assert detect_layout(StateDictCheckpoint(source.state_dict()))[0] == "timm"
    assert detect_layout(StateDictCheckpoint(baai_eva_state_dict(source)))[0] == "baai_eva"


# --- open_clip's own model ------------------------------------------------------------------------------------------
def test_open_clip_eva02_b16_image_tower_converts_to_its_outputs(tmp_path):
    """open_clip's EVA02-B-16 (its CLIP class, the image tower timm's Eva at full size; a one-layer text tower), its
    state dict converted: our model's output is its ``visual`` tower's (the image embedding before normalising)."""
    import open_clip
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    config = open_clip.get_model_config("EVA02-B-16")
    clip = open_clip.CLIP(
        embed_dim=config["embed_dim"],
        vision_cfg=CLIPVisionCfg(**config["vision_cfg"]),
        text_cfg=CLIPTextCfg(context_length=8, vocab_size=100, width=32, heads=2, layers=1),
    )
    randomized(clip.visual, seed=5)
    torch.save(clip.state_dict(), tmp_path / "open_clip_pytorch_model.bin")
    result = convert(tmp_path / "open_clip_pytorch_model.bin", tmp_path / "out", verify=True)
    assert (result.source_format, result.model_name) == ("baai_eva", "scratch_eva02_b16_clip")
    assert result.assumed == {"num_heads": 12}  # the variant's (64-wide heads, as every EVA02); the rest is recorded
    x = images((224, 224))
    with torch.no_grad():
        theirs = clip.eval().encode_image(x)
        ours = ours_from(tmp_path / "out")(x)
    max_diff = (ours - theirs).abs().max().item()
    print(f"open_clip EVA02-B-16 -> scratch_eva02_b16_clip: encode_image max-abs-diff {max_diff:.1e}")
    assert max_diff <= 1e-5
