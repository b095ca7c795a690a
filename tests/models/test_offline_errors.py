"""Pretrained weights that cannot be fetched: one clear error naming the tag, the source, the cache path
and how to provide the file; no real network (a closed loopback port, HF_HUB_OFFLINE=1)."""

import pytest
import timm
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

from tests.support.hub_fixtures import refused_endpoint
from tests.support.pretrained_caches import offline_caches
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import PretrainedWeightsUnavailable
from timm_vitscratch.models.variants import register_hub_weights, unregister_hub_weights

pytestmark = pytest.mark.slow  # loads of every tag with the Hub unreachable

HUB_TAGS = {  # tag -> (repo, file the tag's weights are)
    "scratch_vit_b16.augreg2_in21k_ft_in1k": ("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors"),
    "scratch_vit_b16_in21k.google_in21k": ("google/vit-base-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_h14_in21k.google_in21k": ("google/vit-huge-patch14-224-in21k", "pytorch_model.bin"),
}
TV_TAG, TV_FILE = "scratch_vit_b16.tv_in1k", "vit_b_16-c867db91.pth"


def _common_advice(message: str, file: str) -> None:
    assert f"pretrained_cfg_overlay=dict(file='/path/to/{file}')" in message and "--pretrained-path" in message


@pytest.mark.parametrize("tag", list(HUB_TAGS))
def test_hub_tag_offline_names_tag_repo_cache_and_remedy(tag, tmp_path, monkeypatch):
    offline_caches(tmp_path, monkeypatch)  # HF_HUB_OFFLINE=1 and an endpoint nobody answers
    repo, file = HUB_TAGS[tag]
    with pytest.raises(PretrainedWeightsUnavailable) as caught:
        timm.create_model(tag, pretrained=True)
    message = str(caught.value)
    cache = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--"))
    assert message.startswith(
        f"cannot load the pretrained weights of {tag!r} from the Hugging Face Hub repo {repo} "
        f"(file {file}): HF_HUB_OFFLINE=1 is set, so nothing is downloaded, and the Hugging "
        f"Face cache has no copy in {cache}."
    ), message
    assert f"`hf download {repo} {file}`" in message and "Set HF_HUB_OFFLINE=1" not in message
    _common_advice(message, file)
    assert isinstance(caught.value, OSError)  # callers catching download failures still catch it
    assert isinstance(caught.value.__cause__, (LocalEntryNotFoundError, OfflineModeIsEnabled))  # nothing lost


def test_url_tag_without_network_names_the_url_and_torch_cache_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with refused_endpoint() as endpoint:
        url = f"{endpoint}/models/{TV_FILE}"
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(TV_TAG, pretrained=True, pretrained_cfg_overlay=dict(url=url))
    message = str(caught.value)
    cached = tmp_path / "torch" / "hub" / "checkpoints" / TV_FILE
    assert message.startswith(
        f"cannot load the pretrained weights of {TV_TAG!r} from {url}: the download failed (ConnectionRefusedError: "
    ), message
    assert f"torch's cache has no copy at {cached}" in message and f"put the file at {cached}" in message
    assert message.endswith("Set HF_HUB_OFFLINE=1 to fail at once instead of waiting for the network.")
    _common_advice(message, TV_FILE)
    assert not cached.exists()


def test_url_tag_with_hf_hub_offline_fails_before_any_request(tmp_path, monkeypatch):
    """torch.hub does not read HF_HUB_OFFLINE; the tag does, as the Hub's own tags do."""
    offline_caches(tmp_path, monkeypatch)
    with refused_endpoint() as endpoint:
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(TV_TAG, pretrained=True, pretrained_cfg_overlay=dict(url=f"{endpoint}/{TV_FILE}"))
    assert caught.value.__cause__ is None  # no download was tried
    assert "HF_HUB_OFFLINE=1 is set, so nothing is downloaded" in str(caught.value)
    assert str(tmp_path / "torch" / "hub" / "checkpoints" / TV_FILE) in str(caught.value)


def test_a_repo_the_hub_does_not_have_is_named_with_the_hubs_answer(hub_env):
    register_hub_weights("scratch_vit_ti16.gone", "tests/no-such-repo", num_classes=6)
    try:
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model("scratch_vit_ti16.gone", pretrained=True)
    finally:
        unregister_hub_weights("scratch_vit_ti16.gone")
    message = str(caught.value)
    assert "'scratch_vit_ti16.gone' from the Hugging Face Hub repo tests/no-such-repo" in message
    assert "the download failed (RepositoryNotFoundError" in message, message
    assert isinstance(caught.value.__cause__, HfHubHTTPError)


def test_cli_push_of_a_tag_names_the_tags_source_not_the_target_repo(tmp_path, monkeypatch, capsys):
    offline_caches(tmp_path, monkeypatch)
    assert cli_main(["push", "scratch_vit_ti16.augreg_in21k_ft_in1k", "me/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "vitscratch: error: cannot load the pretrained weights of "
        "'scratch_vit_ti16.augreg_in21k_ft_in1k' from the Hugging Face Hub repo "
        "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    ), err
    assert "me/x" not in err and len(err.strip().splitlines()) == 1
