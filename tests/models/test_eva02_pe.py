"""DINOv2, SigLIP, EVA02 and the Perception Encoder, which timm builds with its classic ``VisionTransformer``
(DINOv2, its giant with a packed SwiGLU, SigLIP) and its ``Eva`` (EVA02, PE): every row against timm's model.

Per row, at a small width and depth (the row's own patch size, input size, rotary reference grid and options):
timm's model (parameters perturbed off their init) gives its state dict, ours loads it strict and unchanged, the
module trees hold the same names, and forward / forward_features / forward_intermediates agree at the row's
default size and at a non-square size (both models with ``dynamic_img_size``, so that the position table is
resampled and the rotary coordinates rescaled onto the reference grid). One tiny model of each layout runs the
module-tree hook test. The tags: one per weight timm lists, with its license; a tag loads timm's file from the
offline cache. Run with ``-s`` for the figures.
"""

from __future__ import annotations

from typing import Any

import pytest
import timm
import torch
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg
from timm.models.naflexvit import checkpoint_filter_fn as naflex_checkpoint_filter

from tests.models.test_dinov2_siglip import output_diffs, pair
from tests.models.test_module_tree_timm import NOTHING_UNEQUAL, hooked_pass, unequal
from tests.support import pretrained_caches
from tests.support.dinov3_pairs import max_diff, perturbed
from tests.support.naflex_batches import images, naflex_batch
from tests.support.pretrained_caches import lay_in_hf_cache, save_safetensors
from timm_vitscratch.models.pretrained import TIMM_TAGS
from timm_vitscratch.models.variants import (
    DINOV2_TIMM_NAMES,
    EVA02_VARIANTS,
    PE_VARIANTS,
    SIGLIP_TIMM_NAMES,
    TIMM_NAMES,
)

TOL = 1e-5
#: every row of the families timm builds with its classic ViT or its Eva (DINOv3's rows have their own tests;
#: SigLIP 2's NaFlex towers load NaFlexVit's names: tests/models/test_siglip2_naflex.py)
ROWS = [*DINOV2_TIMM_NAMES, *SIGLIP_TIMM_NAMES, *EVA02_VARIANTS, *PE_VARIANTS]
#: small enough for every row: 4 heads of width 24 (rotary needs a multiple of 4), the packed SwiGLU's hidden even
SMALL = dict(depth=2, embed_dim=96, num_heads=4)


def _non_square(model: Any) -> tuple[int, int]:
    patch = model.patch_embed.patch_size[0]
    return 7 * patch, 12 * patch


@pytest.mark.parametrize("name", ROWS)
def test_row_loads_timms_state_dict_strict_and_gives_its_outputs_at_two_sizes(name: str) -> None:
    reference, ours = pair(name, **SMALL)
    timm_modules = [n for n, _ in reference.named_modules()]
    our_modules = [n for n, _ in ours.named_modules()]
    assert our_modules == timm_modules
    default = tuple(reference.patch_embed.img_size)
    x = torch.randn(2, 3, *default, generator=torch.Generator().manual_seed(0))
    diffs = {"default": output_diffs(reference, ours, x)}
    reference, ours = pair(name, **SMALL, dynamic_img_size=True)
    size = _non_square(ours)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    diffs["non-square"] = output_diffs(reference, ours, x)
    worst = {where: max(d.values()) for where, d in diffs.items()}
    print(
        f"{name} vs {TIMM_NAMES[name]}: strict load, {len(our_modules)} modules ({len(timm_modules)} in timm's), "
        f"max diff {worst['default']:.1e} at {default[0]}x{default[1]}, {worst['non-square']:.1e} at "
        f"{size[0]}x{size[1]}"
    )
    assert all(d <= TOL for d in worst.values()), diffs


#: one tiny model per layout: packed SwiGLU + Eva's q/v biases (EVA02-T), separate q/k/v + an MLP norm (EVA02-B),
#: the attention's inner norm + class-token pooling (EVA02-CLIP), the MAP pool over every token + AttentionRope's
#: fused bias + norm_pre (PE core), no final norm (PE spatial), DINOv2 giant's classic names with the packed SwiGLU
HOOKED = [
    "scratch_eva02_t14",
    "scratch_eva02_b14",
    "scratch_eva02_b16_clip",
    "scratch_pe_core_t16",
    "scratch_pe_spatial_t16",
    "scratch_dinov2_g14_reg4",
]


@pytest.mark.parametrize("name", HOOKED)
def test_every_timm_module_fires_with_timms_tensors(name: str) -> None:
    reference, ours = pair(name, **SMALL, num_classes=5, dynamic_img_size=True)
    size = _non_square(ours)
    names = [n for n, _ in reference.named_modules()]
    our_names = {n for n, _ in ours.named_modules()}
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, 5, generator=torch.Generator().manual_seed(2))
    theirs = hooked_pass(reference, names, x, weights)
    mine = hooked_pass(ours, names, x, weights)
    assert sorted(set(names) - our_names) == []
    bad = unequal(theirs, mine, TOL)
    assert bad == NOTHING_UNEQUAL, bad
    assert sorted(theirs[0]) == sorted(mine[0])  # the same modules fire, no more, no fewer
    print(
        f"{name} (tiny, {size[0]}x{size[1]}): {len(theirs[0])}/{len(names)} timm modules fire with equal outputs and "
        f"output gradients, {len(theirs[2])} equal parameter gradients"
    )


FAMILIES = {
    "eva02": (EVA02_VARIANTS, "eva02_*", "mit"),
    "pe": (PE_VARIANTS, "vit_pe_*", "apache-2.0"),
    "dinov2_giant": (("scratch_dinov2_g14", "scratch_dinov2_g14_reg4"), "vit_giant_*_dinov2*", "apache-2.0"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_weight_timm_lists_for_the_rows_has_a_tag_with_its_license(family: str) -> None:
    rows, pattern, license_id = FAMILIES[family]
    archs = {TIMM_NAMES[name] for name in rows}
    ours = {tag: timm_tag for tag, timm_tag in TIMM_TAGS.items() if tag.split(".")[0] in rows}
    listed = [t for t in timm.list_pretrained(pattern) if t.split(".")[0] in archs]
    assert sorted(ours.values()) == sorted(listed)
    for tag, timm_tag in ours.items():  # each tag on the variant of timm's architecture, with timm's tag
        variant, tag_name = tag.split(".")
        assert TIMM_NAMES[variant] == timm_tag.split(".")[0] and tag_name == timm_tag.split(".")[1], tag
        assert timm.models.get_pretrained_cfg(tag).license == get_pretrained_cfg(timm_tag).license == license_id
    untagged = sorted(set(rows) - {tag.split(".")[0] for tag in ours})
    print(f"{family}: {len(ours)} tags for {len(listed)} weights timm lists, license {license_id}; untagged {untagged}")
    # the rows without weights in timm: none
    assert untagged == []


@pytest.mark.parametrize("tag", ["scratch_eva02_t14.mim_in22k", "scratch_pe_core_t16.fb", "scratch_pe_spatial_t16.fb"])
def test_tag_loads_timms_file_offline_and_equals_timms_model(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    """timm's model saved as timm publishes it, laid in the offline cache: our tag loads it and gives the outputs
    of timm's model built from the same cached file, with timm's preprocessing (depth 2 to keep it small)."""
    timm_tag = TIMM_TAGS[tag]
    caches = pretrained_caches.offline_caches(tmp_path, monkeypatch)  # type: ignore[arg-type]
    timm_cfg = get_pretrained_cfg(timm_tag)
    source = perturbed(timm.create_model(timm_tag.split(".")[0], depth=2, num_classes=timm_cfg.num_classes))
    lay_in_hf_cache(caches, timm_cfg.hf_hub_id, {"model.safetensors": save_safetensors(source.state_dict())})
    ours = timm.create_model(tag, pretrained=True, depth=2).eval()
    reference = timm.create_model(timm_tag, pretrained=True, depth=2).eval()
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=reference)
    assert ours.num_classes == reference.num_classes
    assert ours.pretrained_cfg["license"] == timm_cfg.license
    x = torch.randn(1, 3, *ours.pretrained_cfg["input_size"][1:])
    with torch.no_grad():
        diff = max_diff(ours(x), reference(x))
    print(f"{tag} from timm's cached file ({timm_cfg.hf_hub_id}): vs timm's {timm_tag} {diff:.1e}")
    assert diff <= TOL


@pytest.mark.parametrize("name", ["scratch_eva02_t14", "scratch_eva02_b14"])
def test_naflex_batch_gives_timms_naflexvit_outputs(name: str) -> None:
    """timm's NaFlexVit built from its EVA02 (``use_naflex=True``: axial rotary position on the reference grid,
    padded and masked) and ours on the same batch of mixed sizes, with the same weights through timm's filter."""
    ours = perturbed(timm.create_model(name, **SMALL))
    theirs = timm.create_model(TIMM_NAMES[name], use_naflex=True, **SMALL).eval()
    state = {k: v.clone() for k, v in ours.state_dict().items()}  # timm's filter edits the class token in place
    theirs.load_state_dict(naflex_checkpoint_filter(state, theirs), strict=True)
    patch = ours.patch_embed.patch_size[0]
    batch = naflex_batch(images([(3 * patch, 5 * patch), (4 * patch, 4 * patch), (2 * patch, 7 * patch)]), patch, 48)
    with torch.no_grad():
        diffs = {}
        for packed in (True, False):
            ours.naflex_packed = packed
            diffs["packed" if packed else "padded"] = max_diff(ours(batch), theirs(batch))
    print(f"{name} vs timm's NaFlexVit from {TIMM_NAMES[name]}: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    assert max(diffs.values()) <= TOL, diffs
