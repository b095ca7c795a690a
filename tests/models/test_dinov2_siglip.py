"""DINOv2 and SigLIP, which timm builds with its classic ``VisionTransformer``: ours against timm's model.

For one row of each family, timm's model (parameters perturbed off their init) gives its state dict, ours
loads it strict and unchanged, and forward / forward_features / forward_intermediates agree at the default
size and a non-square one. The module tree: every module of timm's tiny model fires in ours with timm's
tensors and gradients. The tags: every weight timm lists for the rows has one, and a tag loads timm's
published file from the offline cache. Run with ``-s`` for the figures.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
import timm
import torch
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg
from torch import nn

from tests.models.test_module_tree_timm import NOTHING_UNEQUAL, hooked_pass, unequal
from tests.support import pretrained_caches
from tests.support.dinov3_pairs import max_diff, perturbed
from tests.support.pretrained_caches import lay_in_hf_cache, save_safetensors
from timm_vitscratch import VisionTransformer
from timm_vitscratch.models.pretrained import TIMM_TAGS
from timm_vitscratch.models.variants import DINOV2_TIMM_NAMES, SIGLIP_TIMM_NAMES, TIMM_NAMES

TOL = 1e-5
#: per family: the row compared, what makes it cheap (true width for DINOv2 ViT-S, tiny SigLIP), the default
#: input and a non-square one (DINOv2 through dynamic_img_size, SigLIP built at that size)
ROWS: dict[str, tuple[str, dict[str, Any], tuple[int, int], tuple[tuple[int, int], dict[str, Any]]]] = {
    "dinov2": ("scratch_dinov2_s14_reg4", dict(depth=2), (518, 518), ((126, 210), dict(dynamic_img_size=True))),
    "siglip": (
        "scratch_siglip_b16",
        dict(depth=2, embed_dim=64, num_heads=4),
        (224, 224),
        ((160, 256), dict(img_size=(160, 256))),
    ),
}


def pair(name: str, **overrides: Any) -> tuple[nn.Module, VisionTransformer]:
    """timm's model of ``name``'s architecture (perturbed) and ours loaded strict from its state dict, in eval."""
    reference = perturbed(timm.create_model(TIMM_NAMES[name], **overrides))
    ours = cast(VisionTransformer, timm.create_model(name, **overrides)).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    return reference, ours


def output_diffs(reference: nn.Module, ours: nn.Module, x: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        final_t, inter_t = reference.forward_intermediates(x)
        final_o, inter_o = ours.forward_intermediates(x)
        return {
            "forward": max_diff(reference(x), ours(x)),
            "forward_features": max_diff(reference.forward_features(x), ours.forward_features(x)),
            "forward_intermediates": max(
                max_diff(a, b) for a, b in zip([final_t, *inter_t], [final_o, *inter_o], strict=True)
            ),
        }


@pytest.mark.parametrize("family", list(ROWS))
def test_timms_state_dict_loads_strict_and_gives_timms_outputs(family: str) -> None:
    name, small, default, (other, other_args) = ROWS[family]
    for size, args in ((default, {}), (other, other_args)):
        reference, ours = pair(name, **small, **args)
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
        diffs = output_diffs(reference, ours, x)
        print(
            f"{name} vs {TIMM_NAMES[name]} {small} at {size[0]}x{size[1]}: "
            + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
        )
        assert all(d <= TOL for d in diffs.values()), diffs


#: tiny models of each family for the module tree (the DINOv2 registers and SigLIP's MAP pool included)
TINY = dict(img_size=56, patch_size=14, embed_dim=64, depth=2, num_heads=4, num_classes=5)


@pytest.mark.parametrize("name", ["scratch_dinov2_s14_reg4", "scratch_siglip_so400m14"])
def test_every_timm_module_fires_with_timms_tensors(name: str) -> None:
    reference, ours = pair(name, **TINY)
    names = [n for n, _ in reference.named_modules()]
    our_names = {n for n, _ in ours.named_modules()}
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, TINY["num_classes"], generator=torch.Generator().manual_seed(2))
    theirs = hooked_pass(reference, names, x, weights)
    mine = hooked_pass(ours, [n for n in names if n in our_names], x, weights)
    assert sorted(set(names) - our_names) == []
    assert sorted(n for n in mine[0] if n not in theirs[0]) == []
    bad = unequal(theirs, mine, TOL)
    assert bad == NOTHING_UNEQUAL, bad
    # timm calls every module but attn_drop on the fused path (no attention matrix is formed)
    silent = sorted(n for n in set(names) - set(theirs[0]) if not n.endswith("attn_drop"))
    assert silent == [], silent
    assert len(theirs[1]) == len(theirs[0])
    print(
        f"{name} (tiny): {len(theirs[0])}/{len(names)} timm modules fire with equal outputs and output gradients, "
        f"{len(theirs[2])} equal parameter gradients"
    )


@pytest.mark.parametrize(
    ("names", "pattern"),
    [(DINOV2_TIMM_NAMES, "vit_*_dinov2*"), (SIGLIP_TIMM_NAMES, "vit_*_siglip_*")],
    ids=["dinov2", "siglip"],
)
def test_every_weight_timm_lists_for_the_rows_has_a_tag(names: dict[str, str], pattern: str) -> None:
    ours = {tag: timm_tag for tag, timm_tag in TIMM_TAGS.items() if tag.split(".")[0] in names}
    listed = [t for t in timm.list_pretrained(pattern) if t.split(".")[0] in names.values()]
    assert sorted(ours.values()) == sorted(listed) and set(tag.split(".")[0] for tag in ours) == set(names)
    for tag, timm_tag in ours.items():  # each tag on the variant of timm's architecture, with timm's tag
        variant, name = tag.split("."), timm_tag.split(".")
        assert names[variant[0]] == name[0] and variant[1] == name[1], tag
        assert timm.models.get_pretrained_cfg(tag).license == get_pretrained_cfg(timm_tag).license == "apache-2.0"
    print(f"{len(ours)} tags, one per weight timm lists for {len(names)} variants ({pattern})")


@pytest.mark.parametrize("tag", ["scratch_dinov2_s14_reg4.lvd142m", "scratch_siglip_b16.v2_webli"])
def test_tag_loads_timms_file_offline_and_equals_timms_model(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    """timm's model saved as timm publishes it, laid in the offline cache: our tag loads it and gives the outputs
    of timm's model built from the same cached file, with timm's preprocessing (depth 2 to keep it small)."""
    timm_tag = TIMM_TAGS[tag]
    caches = pretrained_caches.offline_caches(tmp_path, monkeypatch)  # type: ignore[arg-type]
    source = perturbed(timm.create_model(timm_tag.split(".")[0], depth=2))
    repo_id = get_pretrained_cfg(timm_tag).hf_hub_id
    lay_in_hf_cache(caches, repo_id, {"model.safetensors": save_safetensors(source.state_dict())})
    ours = timm.create_model(tag, pretrained=True, depth=2).eval()
    reference = timm.create_model(timm_tag, pretrained=True, depth=2).eval()
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=reference)
    assert ours.num_classes == reference.num_classes == 0 and ours.pretrained_cfg["license"] == "apache-2.0"
    x = torch.randn(1, 3, *ours.pretrained_cfg["input_size"][1:])
    with torch.no_grad():
        diff = max_diff(ours(x), reference(x))
    print(f"{tag} from timm's cached file ({repo_id}): vs timm's {timm_tag} {diff:.1e}")
    assert diff <= TOL
