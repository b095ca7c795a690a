"""DINOv3 pretrained tags: every DINOv3 ViT weight timm lists has a tag, and a tag loads timm's published file.

As tests/models/test_pretrained_loading.py does for the classic tags: timm's own model (random weights) is
saved as timm publishes it (``model.safetensors`` in its Hub repo) and laid where a download would put it;
offline, ``timm.create_model(TAG, pretrained=True)`` gives the outputs of timm's model built from the same
cached file, and timm's preprocessing.
"""

from __future__ import annotations

import pytest
import timm
import torch
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg

from tests.support import pretrained_caches
from tests.support.dinov3_pairs import max_diff, perturbed
from tests.support.pretrained_caches import lay_in_hf_cache, save_safetensors
from timm_vitscratch.models.pretrained import TIMM_TAGS
from timm_vitscratch.models.variants import DINOV3_TIMM_NAMES

TOL = 1e-5


def test_every_dinov3_weight_timm_lists_has_a_tag() -> None:
    ours = {tag: timm_tag for tag, timm_tag in TIMM_TAGS.items() if tag.startswith("scratch_dinov3_")}
    assert sorted(ours.values()) == sorted(timm.list_pretrained("vit_*dinov3*"))
    for tag, timm_tag in ours.items():  # each tag on the variant of timm's architecture, with timm's tag
        variant, name = tag.split("."), timm_tag.split(".")
        assert DINOV3_TIMM_NAMES[variant[0]] == name[0] and variant[1] == name[1], tag
    assert set(tag.split(".")[0] for tag in ours) == set(DINOV3_TIMM_NAMES)
    print(f"{len(ours)} DINOv3 tags, one per weight in timm.list_pretrained('vit_*dinov3*')")


@pytest.mark.slow  # full-size ViT-S, saved and loaded through the laid-out cache
@pytest.mark.parametrize(
    "tag", ["scratch_dinov3_s16.lvd1689m", "scratch_dinov3_s16_qkvb.lvd1689m", "scratch_dinov3_t16_qkvb.eupe_lvd1689m"]
)
def test_tag_loads_timms_file_offline_and_equals_timms_model(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    timm_tag = TIMM_TAGS[tag]
    caches = pretrained_caches.offline_caches(tmp_path, monkeypatch)  # type: ignore[arg-type]
    source = perturbed(timm.create_model(timm_tag.split(".")[0]))
    repo_id = get_pretrained_cfg(timm_tag).hf_hub_id
    lay_in_hf_cache(caches, repo_id, {"model.safetensors": save_safetensors(source.state_dict())})
    ours = timm.create_model(tag, pretrained=True).eval()
    reference = timm.create_model(timm_tag, pretrained=True).eval()  # timm's model from the same cached file
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=reference)
    assert ours.num_classes == reference.num_classes == 0 and ours.global_pool == reference.global_pool
    for size in ((256, 256), (224, 320)):
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            diff = max_diff(ours(x), reference(x))
            features = max_diff(ours.forward_features(x), source.forward_features(x))
        print(f"{tag} from timm's cached file ({repo_id}), {size[0]}x{size[1]}: vs timm's {timm_tag} {diff:.1e}")
        assert diff <= TOL and features <= TOL
