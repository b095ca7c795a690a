"""--verify proves that the weights matter, for backbones too, from every source of every family.

A match with the source library's model proves the weights only where the outputs depend on them. Each source
is written here twice: as its library has it (random weights: verified), and degenerate, with its patch
embedding zeroed so that every image gives the same tokens and so the same features (refused, saying why; a
backbone has no logits to show it). A source that is the untrained initialisation of the architecture is
refused too: its features are a fresh model's, so nothing shows that the written weights were ever loaded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

from tests.convert.test_dinov3_sources import meta_state_dict
from tests.support import tiny
from tests.support.eva_originals import EVA02_SIZE, PE_SIZE, baai_eva_state_dict, meta_pe_state_dict, timm_model
from tests.support.eva_originals import randomized as randomize
from tests.support.sources import TINY_HF_VIT, google_npz, hf_config, timm_vit, torchvision_vit
from timm_vitscratch.convert import VerificationError, convert
from timm_vitscratch.convert.verify import FRESH_SEED
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # every source converted and verified by its own library, twice

#: the patch embedding of each layout: a convolution, a dense kernel (JAX) or a linear on patches (SigLIP 2)
PATCH_EMBEDDING = re.compile(r"(patch_embed|patch_embedding|conv_proj|^conv1\.|^embedding/kernel$)")
TINY_HF = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def zero_patch_embedding(tensors: dict) -> dict:
    """The same weights with the patch embedding's weight zeroed (its bias kept): every image, the same tokens."""
    hits = [k for k in tensors if PATCH_EMBEDDING.search(k) and not k.endswith("bias") and tensors[k].ndim >= 2]
    assert hits, sorted(tensors)
    return {k: (v * 0 if k in hits else v) for k, v in tensors.items()}


def safetensors_file(state: Callable[[], dict]) -> Callable[[Path, bool], Path]:
    def write(path: Path, degenerate: bool) -> Path:
        tensors = {k: v.detach().contiguous() for k, v in state().items()}
        save_file(zero_patch_embedding(tensors) if degenerate else tensors, str(path / "model.safetensors"))
        return path / "model.safetensors"

    return write


def torch_file(state: Callable[[], dict]) -> Callable[[Path, bool], Path]:
    def write(path: Path, degenerate: bool) -> Path:
        tensors = {k: v.detach().clone() for k, v in state().items()}
        torch.save(zero_patch_embedding(tensors) if degenerate else tensors, path / "model.pth")
        return path / "model.pth"

    return write


def transformers_folder(build: Callable[[], nn.Module]) -> Callable[[Path, bool], Path]:
    def write(path: Path, degenerate: bool) -> Path:
        build().save_pretrained(path / "hf")
        if degenerate:
            weights = path / "hf" / "model.safetensors"
            save_file(zero_patch_embedding(load_file(str(weights))), str(weights), metadata={"format": "pt"})
        return path / "hf"

    return write


def jax_npz(path: Path, degenerate: bool) -> Path:
    google_npz(timm_vit(), path / "vit.npz")
    if degenerate:
        with np.load(path / "vit.npz") as arrays:
            kept = {k: arrays[k] for k in arrays.files}
        np.savez(path / "vit.npz", **zero_patch_embedding({k: torch.from_numpy(v) for k, v in kept.items()}))
    return path / "vit.npz"


def tiny_dinov3() -> nn.Module:
    return randomize(timm.create_model("vit_small_patch16_dinov3_qkvb", depth=2, embed_dim=64, num_heads=4))


#: source (as `convert --from` names it) and family -> writer of the source's file or folder
SOURCES: dict[str, Callable[[Path, bool], Path]] = {
    "timm vit": safetensors_file(lambda: timm_vit().state_dict()),
    "timm dinov3 (Eva)": safetensors_file(lambda: tiny_dinov3().state_dict()),
    "timm eva02": safetensors_file(lambda: timm_model("eva02_tiny_patch14_224.mim_in22k", **EVA02_SIZE).state_dict()),
    "torchvision vit": torch_file(lambda: torchvision_vit().state_dict()),
    "jax vit": jax_npz,
    "transformers vit": transformers_folder(lambda: randomize(transformers.ViTModel(hf_config(**TINY_HF_VIT)))),
    "transformers dinov3": transformers_folder(
        lambda: randomize(
            transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(**TINY_HF, patch_size=16, num_register_tokens=4))
        )
    ),
    "transformers dinov2": transformers_folder(
        lambda: randomize(transformers.Dinov2Model(transformers.Dinov2Config(**TINY_HF, image_size=56, patch_size=14)))
    ),
    "transformers siglip": transformers_folder(
        lambda: randomize(
            transformers.SiglipVisionModel(transformers.SiglipVisionConfig(**TINY_HF, image_size=64, patch_size=16))
        )
    ),
    "transformers siglip2": transformers_folder(
        lambda: randomize(
            transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(**TINY_HF, num_patches=16, patch_size=16))
        )
    ),
    "meta_dinov3": torch_file(lambda: meta_state_dict(tiny_dinov3())),
    "meta_pe": torch_file(lambda: meta_pe_state_dict(timm_model("vit_pe_core_tiny_patch16_384", **PE_SIZE))),
    "baai_eva": torch_file(lambda: baai_eva_state_dict(timm_model("eva02_tiny_patch14_224.mim_in22k", **EVA02_SIZE))),
}
#: sources that record no head count (torchvision's files): said, as convert would be told
HEADS = {"torchvision vit": 3}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_degenerate_source_is_refused_and_the_real_one_verified(tmp_path, source):
    heads = HEADS.get(source)
    good = SOURCES[source](tmp_path, False)
    result = convert(good, tmp_path / "good", verify=True, num_heads=heads)
    assert result.verification is not None and result.verification.passed, result.verification
    assert result.verification.features_spread is not None and result.verification.features_spread > 1e-3
    assert result.verification.fresh_diff is not None and result.verification.fresh_diff > 1e-3

    (tmp_path / "bad").mkdir()
    bad = SOURCES[source](tmp_path / "bad", True)
    with pytest.raises(VerificationError, match=r"same for every input .* cannot tell the weights apart"):
        convert(bad, tmp_path / "bad_out", verify=True, num_heads=heads)
    assert not (tmp_path / "bad_out").exists()
    # without --verify the same file converts: the check belongs to verification, not to reading
    assert convert(bad, tmp_path / "bad_unverified", num_heads=heads).verification is None


@pytest.mark.parametrize(
    "name, kwargs",
    [("scratch_vit_ti16", {}), ("scratch_dinov3_s16_plus_qkvb", {"img_size": 32, "patch_size": 8})],
)
def test_a_source_that_is_the_untrained_initialisation_is_refused(tmp_path, name, kwargs):
    """The weights of a fresh model of the architecture, drawn as --verify draws its fresh model: the features
    cannot show that anything was loaded, and --verify says so; any other draw is verified."""
    for seed, directory in ((FRESH_SEED, "fresh"), (FRESH_SEED + 1, "other_draw")):
        torch.manual_seed(seed)
        save_model_directory(tiny(name, **kwargs), tmp_path / directory)
    before = torch.random.get_rng_state()
    with pytest.raises(VerificationError, match=r"freshly initialised model .* the weights make no difference"):
        convert(tmp_path / "fresh", tmp_path / "out", verify=True)
    assert torch.equal(torch.random.get_rng_state(), before)  # restored after the models --verify builds
    assert not (tmp_path / "out").exists()
    result = convert(tmp_path / "other_draw", tmp_path / "out", verify=True)
    assert result.verification is not None and result.verification.passed
