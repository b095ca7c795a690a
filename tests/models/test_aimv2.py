"""AIMv2, which timm builds with its classic ``VisionTransformer`` (RmsNorm everywhere, the patch tokens' too; timm's
``SwiGLU``; no biases in the attention or the MLP; no class token, the tokens' mean): every row against timm's model.

Per row, at its real width and two blocks (the 1B and 3B rows narrowed, and fed a small image): timm's model
(parameters perturbed off their init) gives its state dict, ours loads it strict and unchanged, and forward,
forward_features and forward_intermediates are timm's bit for bit, at the row's size (or a small one) and with
``dynamic_img_size`` at a non-square one. ``features_only`` gives timm's feature maps; a NaFlex batch gives each
image's own output (the patch tokens' norm on the packed path too). The full-size large row (slow) is timm's too.
Same seed, same draws: tests/models/test_same_seed.py; counts on ``meta`` for every row: tests/inspect/test_counts.py.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import pytest
import timm
import torch

import timm_vitscratch  # noqa: F401  (registers the models)
from tests.models.test_dinov2_siglip import output_diffs, pair
from tests.support.naflex_batches import images, naflex_batch
from timm_vitscratch import choices
from timm_vitscratch.models.layers import NORM_KINDS, RmsNorm
from timm_vitscratch.models.variants import AIMV2

ROWS = list(AIMV2.names)
#: two blocks at the row's own width; the 1B and 3B rows narrowed to 12 heads of 64 (their MLP ratio kept)
SMALL = {name: dict(depth=2) for name in ROWS if "_l14" in name or "_h14" in name}
SMALL |= {name: dict(depth=2, embed_dim=768, num_heads=12) for name in ROWS if name not in SMALL}


@pytest.mark.parametrize("name", ROWS)
def test_row_loads_timms_state_dict_strict_and_gives_its_outputs_bit_for_bit(name: str) -> None:
    for size, args in (((112, 112), dict(img_size=112)), ((70, 126), dict(img_size=112, dynamic_img_size=True))):
        reference, ours = pair(name, **SMALL[name], **args)
        assert [n for n, _ in ours.named_modules() if n != "pre_logits"] == [n for n, _ in reference.named_modules()]
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
        diffs = output_diffs(reference, ours, x)
        print(f"{name} vs {AIMV2.timm_names[name]} {SMALL[name]} at {size}: {diffs}")
        assert diffs == dict.fromkeys(diffs, 0.0), diffs


def test_the_large_row_at_its_size_and_width_two_blocks() -> None:
    reference, ours = pair("scratch_aimv2_l14", depth=2)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    diffs = output_diffs(reference, ours, x)
    assert diffs == dict.fromkeys(diffs, 0.0), diffs


@pytest.mark.slow  # two 309M-parameter models on the CPU
def test_the_full_size_large_row_is_timms() -> None:
    reference, ours = pair("scratch_aimv2_l14")
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(ours(x), reference(x))


def test_features_only_gives_timms_feature_maps() -> None:
    options = dict(depth=3, img_size=112, features_only=True, out_indices=(0, 2))
    reference, ours = pair("scratch_aimv2_l14", **options)
    x = torch.randn(2, 3, 112, 112, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs, mine = reference(x), ours(x)
    assert len(mine) == len(theirs) == 2
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert cast(Any, ours).feature_info.channels() == cast(Any, reference).feature_info.channels()


def test_a_naflex_batch_gives_each_image_its_own_output() -> None:
    """Packed patches take the patch tokens' RmsNorm as the image path does: each image as alone at its size."""
    model = timm.create_model("scratch_aimv2_l14", depth=2, embed_dim=96, num_heads=4, dynamic_img_size=True).eval()
    sizes = [(56, 84), (98, 42)]
    pictures = images(sizes)
    batch = naflex_batch(pictures, 14, max_seq_len=48)
    with torch.no_grad():
        pooled = model(batch)
        for i, picture in enumerate(pictures):
            alone = model(picture.unsqueeze(0))
            assert torch.allclose(pooled[i], alone[0], atol=1e-5), (i, (pooled[i] - alone[0]).abs().max())


def test_rmsnorm_is_timms_and_its_names_are_the_files() -> None:
    """Our RmsNorm computes timm's (torch's ``rms_norm``) with its parameter; a file names the kinds NORM_KINDS builds."""
    assert choices.NORM_NAMES == tuple(NORM_KINDS)
    ours, theirs = RmsNorm(32, eps=1e-5), timm.layers.RmsNorm(32, eps=1e-5)
    with torch.no_grad():
        theirs.weight.normal_()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(3, 5, 32)
    assert torch.equal(ours(x), theirs(x))


@pytest.mark.parametrize(
    "norm_layer, norm_eps",
    [("rmsnorm", 1e-5), (functools.partial(timm.layers.RmsNorm, eps=1e-5), 1e-6), (timm.layers.RmsNorm, 1e-6)],
)
def test_every_norm_is_an_rmsnorm_with_the_one_eps(norm_layer: object, norm_eps: float) -> None:
    """timm's ``norm_layer`` forms of an RmsNorm (a name takes ``norm_eps``; a partial states its own eps), as every
    norm of the model, the patch tokens' too (``embed_norm_layer``) and those inside the blocks."""
    model = timm.create_model(
        "scratch_vit_ti16", depth=1, norm_layer=norm_layer, norm_eps=norm_eps, embed_norm_layer="rmsnorm"
    )
    expected = 1e-6 if norm_layer is timm.layers.RmsNorm else 1e-5
    norms = [m for m in model.modules() if isinstance(m, RmsNorm)]
    assert len(norms) == 4 and {m.eps for m in norms} == {expected}  # patch tokens, norm1, norm2, final
    assert not [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
