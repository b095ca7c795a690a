"""Bad input and a misbehaving Hub: clear errors, and nothing half-written locally."""

import json

import pytest
import safetensors.torch
import timm
from huggingface_hub import constants
from huggingface_hub.errors import (
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, refused_endpoint, repo_for, upload_raw, use_hub
from tests.support.local_hub.store import HubError
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import ModelDirectoryError


def _ours(path):
    """What is in ``path`` besides the client's cache (hf-home), which a failed pull may have started."""
    return sorted(p.name for p in path.iterdir() if p.name != "hf-home")


@pytest.fixture
def pushed(hub_env, tmp_path, request):
    """A repo holding a good tiny model; returns (repo id, its model directory)."""
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    hub.push(directory, repo)
    return repo, directory


@pytest.fixture
def fault(local_hub):
    """Inject faults into the session's Hub for this test only."""
    added = []

    def inject(*args, **kwargs):
        added.append(local_hub.inject_error(*args, **kwargs))
        return added[-1]

    yield inject
    for f in added:
        local_hub.faults.remove(f)


def test_repo_not_found(hub_env, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(RepositoryNotFoundError):
        hub.pull("tests/no-such-repo", out)
    assert cli_main(["pull", "tests/no-such-repo", str(out)]) == 2
    assert f"repository 'tests/no-such-repo' not found at {constants.ENDPOINT}" in capsys.readouterr().err
    with pytest.raises(RepositoryNotFoundError):
        timm.create_model("hf-hub:tests/no-such-repo", pretrained=True)
    assert _ours(tmp_path) == []


def test_revision_not_found(pushed, tmp_path, capsys):
    repo, _ = pushed
    out = tmp_path / "out"
    for revision in ("no-such-branch", "0" * 40):
        with pytest.raises(RevisionNotFoundError):
            hub.pull(repo, out, revision=revision)
    assert cli_main(["pull", repo, "--revision", "no-such-branch", str(out)]) == 2
    assert f"revision 'no-such-branch' not found in {repo}" in capsys.readouterr().err
    with pytest.raises(RevisionNotFoundError):
        timm.create_model(f"hf-hub:{repo}@no-such-branch", pretrained=True)
    assert _ours(tmp_path) == ["src"]


def test_server_down_connection_refused(tmp_path, monkeypatch, capsys):
    directory = model_dir(tmp_path / "src", tiny())
    with refused_endpoint() as endpoint:
        use_hub(monkeypatch, endpoint, tmp_path / "hf-home")
        with pytest.raises(LocalEntryNotFoundError, match="cannot find the appropriate snapshot"):
            hub.pull("tests/anything", tmp_path / "out")
        assert cli_main(["pull", "tests/anything", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert f"cannot get tests/anything@main from {endpoint}: ConnectError" in err
        assert cli_main(["push", str(directory), "tests/anything"]) == 2
        assert f"cannot reach the Hub at {endpoint}: ConnectError" in capsys.readouterr().err
    assert _ours(tmp_path) == ["src"]


def test_500_while_downloading_weights_leaves_nothing(pushed, fault, tmp_path, capsys):
    repo, directory = pushed
    sha256 = json.loads((directory / "config.json").read_text())["vitscratch"]["sha256"]
    injected = fault(500, origin="storage", method="GET", path=sha256)
    out = tmp_path / "out"
    with pytest.raises(HfHubHTTPError) as raised:
        hub.pull(repo, out)
    assert raised.value.response.status_code == 500
    assert cli_main(["pull", repo, str(out)]) == 2
    assert f"the Hub at {constants.ENDPOINT} answered HTTP 500 for {repo}: Internal Error" in capsys.readouterr().err
    assert injected.hits == 2 and _ours(tmp_path) == ["src"]


def test_500_from_the_api_is_reported(pushed, fault, tmp_path, capsys):
    repo, _ = pushed
    fault(500, method="GET", path=f"^/api/models/{repo}/revision/")
    with pytest.raises(LocalEntryNotFoundError) as raised:
        hub.pull(repo, tmp_path / "out")
    assert isinstance(raised.value.__cause__, HfHubHTTPError) and raised.value.__cause__.response.status_code == 500
    assert cli_main(["pull", repo, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"answered HTTP 500 for {repo}: Internal Error - injected" in err and "not in the local cache" in err
    assert _ours(tmp_path) == ["src"]


def test_500_on_commit_leaves_the_repo_unchanged(pushed, fault, local_hub, tmp_path):
    repo, _ = pushed
    head = local_hub.store.resolve(repo, "main")["id"]
    fault(500, method="POST", path=f"^/api/models/{repo}/commit/")
    with pytest.raises(HfHubHTTPError) as raised:
        hub.push(model_dir(tmp_path / "v2", tiny()), repo)
    assert raised.value.response.status_code == 500
    assert local_hub.store.resolve(repo, "main")["id"] == head


def test_architecture_the_plugin_does_not_register(hub_env, local_hub, tmp_path, request, capsys):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    config = json.loads((directory / "config.json").read_text())
    config["architecture"] = "scratch_vit_zz99"
    (directory / "config.json").write_text(json.dumps(config))
    requests_before = len(local_hub.requests)
    with pytest.raises(ModelDirectoryError, match="names architecture 'scratch_vit_zz99', which timm_vitscratch"):
        hub.push(directory, repo)  # refused before any request
    assert len(local_hub.requests) == requests_before
    upload_raw(directory, repo)
    with pytest.raises(ModelDirectoryError, match="does not register"):
        hub.pull(repo, tmp_path / "out")
    assert cli_main(["pull", repo, str(tmp_path / "out")]) == 2
    assert "names architecture 'scratch_vit_zz99'" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match=r"Unknown model \(scratch_vit_zz99\)"):  # timm's own check
        timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert _ours(tmp_path) == ["src"]


def test_weights_whose_sha256_does_not_match_config(hub_env, local_hub, tmp_path, request):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    other = model_dir(tmp_path / "other", tiny())  # same architecture, other weights
    (directory / "model.safetensors").write_bytes((other / "model.safetensors").read_bytes())
    requests_before = len(local_hub.requests)
    with pytest.raises(ModelDirectoryError, match="not the weights the config describes"):
        hub.push(directory, repo)
    assert len(local_hub.requests) == requests_before
    upload_raw(directory, repo)
    expected = json.loads((directory / "config.json").read_text())["vitscratch"]["sha256"]
    with pytest.raises(ModelDirectoryError, match=f"but config.json says {expected}"):
        hub.pull(repo, tmp_path / "out")
    assert _ours(tmp_path) == ["other", "src"]


def test_weights_that_do_not_fit_the_architecture(hub_env, tmp_path, request):
    directory = model_dir(tmp_path / "src", tiny())
    wrong = model_dir(tmp_path / "wrong", tiny(embed_dim=32))
    (directory / "model.safetensors").write_bytes((wrong / "model.safetensors").read_bytes())
    # told before anything is built: the config's width against the weights' patch projection
    with pytest.raises(
        ModelDirectoryError,
        match=r"does not describe the weights: embed_dim 64, but "
        r"patch_embed.proj.weight is \(32, 3, 8, 8\)",
    ):
        hub.push(directory, repo_for(request))
    # weights whose names fit but one tensor does not: the built model's exact shapes
    fits = model_dir(tmp_path / "fits", tiny())
    state = safetensors.torch.load_file(str(fits / "model.safetensors"))
    state["blocks.0.norm1.weight"] = safetensors.torch.load_file(str(wrong / "model.safetensors"))[
        "blocks.0.norm1.weight"
    ]
    safetensors.torch.save_file(state, str(directory / "model.safetensors"))
    with pytest.raises(ModelDirectoryError, match=r"does not fit the architecture.*\(32,\) where the archi"):
        hub.push(directory, repo_for(request))


def test_push_needs_the_token_and_private_repos_need_it_to_read(local_hub, tmp_path, monkeypatch, request, capsys):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    use_hub(monkeypatch, local_hub.url, tmp_path / "hf-home", token=None)
    assert cli_main(["push", str(directory), repo]) == 2
    err = capsys.readouterr().err
    assert "answered HTTP 401" in err and "Invalid credentials" in err
    with pytest.raises(HfHubHTTPError, match="Invalid credentials"):
        hub.push(directory, repo)
    with pytest.raises(HubError, match="Repository not found"):  # nothing was created
        local_hub.store.repo(repo)
    hub.push(directory, repo, private=True, token="hf_local_test_token")
    with pytest.raises(RepositoryNotFoundError):
        hub.pull(repo, tmp_path / "out")
    assert hub.pull(repo, tmp_path / "out", token="hf_local_test_token").is_dir()


def test_client_without_hf_hub_disable_xet_gets_told_to_set_it(hub_env, tmp_path, monkeypatch, request, capsys):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    assert cli_main(["push", str(model_dir(tmp_path / "src", tiny())), repo_for(request)]) == 2
    assert "set HF_HUB_DISABLE_XET=1" in capsys.readouterr().err


def test_placement_args_in_config_are_refused(hub_env, tmp_path, request):
    """model_args saying where to build (device, dtype) are not model options: a config never decides where
    a model is built, and the directory is refused by name before anything is built or sent."""
    directory = model_dir(tmp_path / "src", tiny())
    config = json.loads((directory / "config.json").read_text())
    config["model_args"].update(device="cuda:7", dtype="float64")  # no GPU here; a dtype given as a string
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match="'device' is not a model option a file may set"):
        hub.check_model_directory(directory)
    with pytest.raises(ModelDirectoryError, match="'device' is not a model option"):
        hub.push(directory, repo_for(request))
