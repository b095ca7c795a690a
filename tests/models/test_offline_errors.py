"""Pretrained weights that cannot be fetched: one clear error naming the tag, the source (the files tried),
the cache path and how to provide the file, raised alone (no chain of tracebacks) and without huggingface_hub's
retries; no real network (a closed loopback port, a port that never answers, a name that does not resolve,
HF_HUB_OFFLINE=1)."""

import contextlib
import logging
import socket
import traceback
from collections.abc import Iterator

import pytest
import timm
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

from tests.support.hub_fixtures import refused_endpoint, use_hub
from tests.support.pretrained_caches import REVISION, lay_in_hf_cache, offline_caches, save_safetensors
from tests.support.sources import randomized
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import PretrainedWeightsUnavailable
from timm_vitscratch.models.registry import register_hub_weights, unregister_hub_weights

pytestmark = pytest.mark.slow  # loads of every tag with the Hub unreachable

HUB_TAGS = {  # tag -> (repo, file the tag's weights are)
    "scratch_vit_b16.augreg2_in21k_ft_in1k": ("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "model.safetensors"),
    "scratch_vit_b16_in21k.google_in21k": ("google/vit-base-patch16-224-in21k", "model.safetensors"),
    "scratch_vit_h14_in21k.google_in21k": ("google/vit-huge-patch14-224-in21k", "pytorch_model.bin"),
}
TV_TAG, TV_FILE = "scratch_vit_b16.tv_in1k", "vit_b_16-c867db91.pth"
FILES = {
    "model.safetensors": "model.safetensors, else pytorch_model.bin",
    "pytorch_model.bin": "model.safetensors, else pytorch_model.bin",
}


@contextlib.contextmanager
def silent_endpoint() -> Iterator[str]:
    """An endpoint on 127.0.0.1 that takes connections (the kernel completes them) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@contextlib.contextmanager
def unresolvable_endpoint() -> Iterator[str]:
    yield "http://hub.invalid"  # RFC 6761: never resolves


NO_NETWORK = {"refused": refused_endpoint, "silent": silent_endpoint, "unresolvable": unresolvable_endpoint}
WHY = {
    "refused": "cannot be reached (ConnectError: ",
    "silent": "did not answer within 3 s (ReadTimeout: ",
    "unresolvable": "cannot be reached (ConnectError: ",
}


def no_network(endpoint, tmp_path, monkeypatch):
    """This process's huggingface_hub pointed at ``endpoint`` with an empty cache, HF_HUB_OFFLINE unset."""
    use_hub(monkeypatch, endpoint, tmp_path / "hf")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))


def assert_one_exception(error: BaseException) -> None:
    """Shown alone: one traceback, no chained causes, and nothing huggingface_hub logged (no retries)."""
    shown = "".join(traceback.format_exception(error))
    assert shown.count("Traceback (most recent call last)") == 1, shown
    assert "The above exception" not in shown and "During handling" not in shown, shown


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
        f"(files: {FILES[file]}): HF_HUB_OFFLINE=1 is set, so nothing is downloaded, and the Hugging "
        f"Face cache has no copy in {cache}."
    ), message
    assert f"`hf download {repo} {file}`" in message and "HF_HUB_OFFLINE=1 nothing is asked" not in message
    _common_advice(message, file)
    assert isinstance(caught.value, OSError)  # callers catching download failures still catch it
    assert_one_exception(caught.value)
    assert isinstance(caught.value.__context__, (LocalEntryNotFoundError, OfflineModeIsEnabled))  # nothing lost


@pytest.mark.parametrize("network", list(NO_NETWORK))
@pytest.mark.parametrize("tag", list(HUB_TAGS))
def test_hub_tag_without_network_fails_at_once_with_one_error(tag, network, tmp_path, monkeypatch, caplog):
    """No HF_HUB_OFFLINE: one short request finds the Hub unreachable; huggingface_hub's retries never start."""
    repo, file = HUB_TAGS[tag]
    with NO_NETWORK[network]() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        with caplog.at_level(logging.INFO), pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(tag, pretrained=True)
    message = str(caught.value)
    cache = tmp_path / "hf" / "hub" / ("models--" + repo.replace("/", "--"))
    assert message.startswith(
        f"cannot load the pretrained weights of {tag!r} from the Hugging Face Hub repo {repo} "
        f"(files: {FILES[file]}): the Hub at {endpoint} {WHY[network]}"
    ), message
    assert f"), and the Hugging Face cache has no copy in {cache}." in message
    assert f"`hf download {repo} {file}`" in message and message.endswith(
        "With HF_HUB_OFFLINE=1 nothing is asked of the network."
    )
    _common_advice(message, file)
    assert_one_exception(caught.value)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_cached_weights_load_without_asking_again_when_the_hub_cannot_be_reached(tmp_path, monkeypatch, caplog):
    tag, timm_name = "scratch_vit_ti16.augreg_in21k_ft_in1k", "vit_tiny_patch16_224"
    source = randomized(lambda: timm.create_model(timm_name))
    with silent_endpoint() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        weights = {"model.safetensors": save_safetensors(source.state_dict())}
        lay_in_hf_cache(tmp_path, f"timm/{timm_name}.augreg_in21k_ft_in1k", weights)
        with caplog.at_level(logging.INFO):
            model = timm.create_model(tag, pretrained=True)
    loaded = model.state_dict()
    assert all(loaded[name].equal(tensor) for name, tensor in source.state_dict().items())
    assert model.pretrained_cfg["hf_hub_id"] == f"timm/{timm_name}.augreg_in21k_ft_in1k"  # as asked, not pinned
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_cached_pytorch_bin_without_network_says_to_go_offline(tmp_path, monkeypatch):
    """timm would ask the Hub for model.safetensors first, with retries: said at once instead, with the fix."""
    tag, (repo, _) = "scratch_vit_h14_in21k.google_in21k", HUB_TAGS["scratch_vit_h14_in21k.google_in21k"]
    with refused_endpoint() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        lay_in_hf_cache(tmp_path, repo, {"pytorch_model.bin": lambda path: path.write_bytes(b"not read")})
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(tag, pretrained=True)
    assert (
        f"cannot be reached (ConnectError: [Errno 111] Connection refused), and the Hugging "
        f"Face cache holds only pytorch_model.bin (commit {REVISION}); set HF_HUB_OFFLINE=1 to load it from there."
    ) in str(caught.value)
    assert_one_exception(caught.value)


def test_url_tag_from_a_server_that_never_answers_fails_at_once(tmp_path, monkeypatch):
    """torch.hub's download has no timeout: without the short request first, this load would wait forever."""
    with silent_endpoint() as endpoint:
        no_network("http://127.0.0.1:9", tmp_path, monkeypatch)
        url = f"{endpoint}/models/{TV_FILE}"
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(TV_TAG, pretrained=True, pretrained_cfg_overlay=dict(url=url))
    assert str(caught.value).startswith(
        f"cannot load the pretrained weights of {TV_TAG!r} from {url}: {endpoint} did not answer within 3 s (ReadTimeout"
    ), str(caught.value)
    assert_one_exception(caught.value)


def test_url_tag_without_network_names_the_url_and_torch_cache_path(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with refused_endpoint() as endpoint:
        url = f"{endpoint}/models/{TV_FILE}"
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(TV_TAG, pretrained=True, pretrained_cfg_overlay=dict(url=url))
    message = str(caught.value)
    cached = tmp_path / "torch" / "hub" / "checkpoints" / TV_FILE
    assert message.startswith(
        f"cannot load the pretrained weights of {TV_TAG!r} from {url}: {endpoint} cannot be reached (ConnectError: "
    ), message
    assert f"torch's cache has no copy at {cached}" in message and f"put the file at {cached}" in message
    assert message.endswith("With HF_HUB_OFFLINE=1 nothing is asked of the network.")
    assert_one_exception(caught.value)
    _common_advice(message, TV_FILE)
    assert not cached.exists()


def test_url_tag_with_hf_hub_offline_fails_before_any_request(tmp_path, monkeypatch):
    """torch.hub does not read HF_HUB_OFFLINE; the tag does, as the Hub's own tags do."""
    offline_caches(tmp_path, monkeypatch)
    with refused_endpoint() as endpoint:
        with pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model(TV_TAG, pretrained=True, pretrained_cfg_overlay=dict(url=f"{endpoint}/{TV_FILE}"))
    assert caught.value.__cause__ is None and caught.value.__context__ is None  # no download was tried
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
    assert isinstance(caught.value.__context__, HfHubHTTPError)
    assert_one_exception(caught.value)


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


def test_summary_of_hf_hub_without_network_answers_in_one_request(tmp_path, monkeypatch, capsys):
    """No huggingface_hub retries (about 25 s): one short request, then the cached config.json, or one line."""
    from tests.support import tiny
    from timm_vitscratch.model_dir import save_model_directory

    with refused_endpoint() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        assert cli_main(["summary", "hf-hub:org/not-cached"]) == 2
        err = capsys.readouterr().err
        assert "cannot read config.json of hf-hub:org/not-cached:" in err and "cannot be reached" in err
        assert "Retrying" not in err and "vitscratch pull org/not-cached DIR" in err
        save_model_directory(tiny(), tmp_path / "model")
        config = (tmp_path / "model" / "config.json").read_bytes()
        lay_in_hf_cache(tmp_path, "org/cached", {"config.json": lambda path: path.write_bytes(config)})
        assert cli_main(["summary", "hf-hub:org/cached"]) == 0
        assert capsys.readouterr().out.startswith("hf-hub:org/cached: image 32x32, patch 8")


@pytest.mark.parametrize("network", ["refused", "silent"])
def test_hf_hub_model_from_python_without_network_fails_at_once_with_one_error(network, tmp_path, monkeypatch, caplog):
    """``timm.create_model("hf-hub:...")`` from Python: timm's own config fetch, one short request instead of
    huggingface_hub's retries, and the package's message (still the LocalEntryNotFoundError callers catch)."""
    with NO_NETWORK[network]() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        with caplog.at_level(logging.INFO), pytest.raises(PretrainedWeightsUnavailable) as caught:
            timm.create_model("hf-hub:org/not-cached")
    message = str(caught.value)
    cache = tmp_path / "hf" / "hub" / "models--org--not-cached"
    assert message.startswith(
        f"cannot read config.json of hf-hub:org/not-cached: the Hub at {endpoint} {WHY[network]}"
    ), message
    assert (
        f"the Hugging Face cache has no copy in {cache}" in message
        and "`vitscratch pull org/not-cached DIR`" in message
    )
    assert isinstance(caught.value, LocalEntryNotFoundError)
    assert_one_exception(caught.value)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_hf_hub_model_from_python_offline_says_so(tmp_path, monkeypatch):
    offline_caches(tmp_path, monkeypatch)
    with pytest.raises(LocalEntryNotFoundError) as caught:
        timm.create_model("hf-hub:org/not-cached@v1")
    assert str(caught.value).startswith(
        "cannot read config.json of hf-hub:org/not-cached@v1: HF_HUB_OFFLINE=1 is set, so nothing is downloaded"
    ), str(caught.value)
    assert_one_exception(caught.value)


def test_hf_hub_model_from_python_takes_the_cached_config_when_the_hub_cannot_be_reached(tmp_path, monkeypatch):
    from tests.support import tiny
    from timm_vitscratch.model_dir import save_model_directory

    source = tiny()
    save_model_directory(source, tmp_path / "model")
    config = (tmp_path / "model" / "config.json").read_bytes()
    with refused_endpoint() as endpoint:
        no_network(endpoint, tmp_path, monkeypatch)
        lay_in_hf_cache(tmp_path, "org/cached", {"config.json": lambda path: path.write_bytes(config)})
        model = timm.create_model("hf-hub:org/cached")
    assert type(model) is type(source) and model.patch_embed.patch_size == source.patch_embed.patch_size
