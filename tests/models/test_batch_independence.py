"""NaFlex batches, for every family: an image's output never depends on which other images share its batch.

The same image goes into NaFlex batches (timm's ``Patchify`` + ``NaFlexCollator``) with different companions,
in different places and with different padding; its output in each equals its output alone in a batch of one
and its output as a plain image (``dynamic_img_size``), both packed (the default) and in timm's padded layout.
Families with rotary position on a reference grid (EVA02, PE) rescale each image's coordinates by its own grid,
so a companion of another shape changes nothing. Run with ``-s`` for the figures.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import timm
import torch

from tests.support.dinov3_pairs import perturbed
from tests.support.naflex_batches import images, naflex_batch
from timm_vitscratch import VisionTransformer

TOL = 1e-5
#: per family: one of its variants and what makes it small (its own patch size, layout and position encoding)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "vit": ("scratch_vit_s16", dict(embed_dim=64, num_heads=4)),
    "deit_distilled": ("scratch_deit_ti16_distilled", dict(embed_dim=64, num_heads=4)),
    "dinov2_reg4": ("scratch_dinov2_s14_reg4", dict(embed_dim=64, num_heads=4)),
    "dinov2_giant": ("scratch_dinov2_g14", dict(embed_dim=96, num_heads=4)),
    "dinov3": ("scratch_dinov3_s16_plus_qkvb", dict(embed_dim=64, num_heads=4)),
    "siglip": ("scratch_siglip_so400m14", dict(embed_dim=64, num_heads=4)),
    "siglip2_naflex": ("scratch_siglip2_b16_naflex", dict(embed_dim=64, num_heads=4)),
    "eva02": ("scratch_eva02_t14", dict(embed_dim=96, num_heads=4)),
    "eva02_separate": ("scratch_eva02_b14", dict(embed_dim=96, num_heads=4)),
    "eva02_clip": ("scratch_eva02_b16_clip", dict(embed_dim=96, num_heads=4)),
    "pe_core": ("scratch_pe_core_t16", dict(embed_dim=96, num_heads=4)),
    "pe_spatial": ("scratch_pe_spatial_t16", dict(embed_dim=96, num_heads=4, num_classes=7)),
}
#: the image followed (in grid cells) and the companions it meets: none, one of another shape, several, and
#: the same batch with the image last and more padding
TARGET = (3, 5)
BATCHES = [
    ([], 0, 16),
    ([(4, 4)], 0, 16),
    ([(2, 7), (5, 3), (1, 1)], 1, 40),
    ([(6, 2), (3, 3)], 2, 64),
]


def _model(name: str, options: dict[str, Any]) -> VisionTransformer:
    model = timm.create_model(name, depth=2, dynamic_img_size=True, **options)
    return cast(VisionTransformer, perturbed(model, scale=0.05))


def _outputs(model: VisionTransformer, patch: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The target image's output alone (a plain image) and in each NaFlex batch of :data:`BATCHES`."""
    target = images([(TARGET[0] * patch, TARGET[1] * patch)], seed=7)[0]
    outputs = []
    with torch.no_grad():
        alone = model(target[None])[0]
        for companions, place, max_seq_len in BATCHES:
            others = images([(h * patch, w * patch) for h, w in companions], seed=len(companions))
            pictures = [*others[:place], target, *others[place:]]
            outputs.append(model(naflex_batch(pictures, patch_size=patch, max_seq_len=max_seq_len))[place])
    return alone, outputs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_images_output_is_the_same_whatever_shares_its_batch(family: str) -> None:
    name, options = FAMILIES[family]
    model = _model(name, options)
    patch = model.patch_embed.patch_size[0]
    figures = {}
    for layout, packed in (("packed", True), ("padded", False)):
        model.naflex_packed = packed
        alone, outputs = _outputs(model, patch)
        across = max((out - outputs[0]).abs().max().item() for out in outputs)
        to_image = max((out - alone).abs().max().item() for out in outputs)
        figures[layout] = (across, to_image)
    print(
        f"{family} ({name}): the image's output across {len(BATCHES)} batches of other companions "
        + ", ".join(f"{k} {a:.1e} (vs the plain image {b:.1e})" for k, (a, b) in figures.items())
    )
    assert all(a <= TOL and b <= TOL for a, b in figures.values()), figures
