"""What a pull and a push say they did: a pull that used the local cache because the Hub could not be asked says
so (which commit, cached when), or refuses with ``online``; a push with nothing to commit says that, commits
nothing and shows no progress bar. huggingface_hub's own output (its bars, its log lines) stays out of the CLI's
when stderr is not a terminal, and its settings are as they were afterwards."""

import pytest
from huggingface_hub import constants
from huggingface_hub.utils import are_progress_bars_disabled
from huggingface_hub.utils import logging as hf_logging

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, refused_endpoint, repo_for, use_hub
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.hub.client import HubUnreachableWarning, NothingToPush, cached_at


@pytest.fixture
def cached_repo(hub_env, tmp_path, request):
    """A repo pushed and pulled once (the cache holds its snapshot); returns (repo id, commit, snapshot)."""
    repo = repo_for(request)
    commit = hub.push(model_dir(tmp_path / "src", tiny()), repo).oid
    hub.pull(repo, tmp_path / "first")
    snapshot = tmp_path / "hf-home" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots" / commit
    assert snapshot.is_dir()
    return repo, commit, snapshot


def test_a_pull_from_the_cache_says_the_hub_was_not_asked_which_commit_and_when(
    cached_repo, tmp_path, monkeypatch, capsys
):
    repo, commit, snapshot = cached_repo
    with refused_endpoint() as endpoint:
        use_hub(monkeypatch, endpoint, tmp_path / "hf-home")
        with pytest.warns(HubUnreachableWarning) as caught:
            hub.pull(repo, tmp_path / "out")
        assert [str(w.message) for w in caught] == [
            f"{repo}@main: the Hub at {endpoint} could not be asked (ConnectError: [Errno 111] Connection refused); "
            f"installing the local cache's copy instead: commit {commit}, cached {cached_at(snapshot)}"
        ]
        assert (tmp_path / "out" / "model.safetensors").is_file()
        assert cli_main(["pull", repo, str(tmp_path / "cli")]) == 0
    out, err = capsys.readouterr()
    assert err == f"vitscratch: warning: {caught[0].message}\n"
    assert out == f"installed {repo}@main into {tmp_path / 'cli'} (sha256 verified)\n"


def test_with_online_a_pull_refuses_the_cache_when_the_hub_cannot_be_asked(cached_repo, tmp_path, monkeypatch, capsys):
    repo, _, _ = cached_repo
    with refused_endpoint() as endpoint:
        use_hub(monkeypatch, endpoint, tmp_path / "hf-home")
        with pytest.raises(ConnectionError) as caught:
            hub.pull(repo, tmp_path / "out", online=True)
        assert cli_main(["pull", "--online", repo, str(tmp_path / "cli")]) == 2
    assert str(caught.value) == (
        f"{repo}@main: the Hub at {endpoint} could not be asked (ConnectError: [Errno 111] Connection refused), and "
        "online=True asks for the Hub itself: the local cache was not used, nothing was installed"
    )
    cli_words = str(caught.value).replace("online=True", "--online")
    assert capsys.readouterr().err == f"vitscratch: error: {cli_words}\n"
    assert not (tmp_path / "out").exists() and not (tmp_path / "cli").exists()


def test_offline_mode_pull_names_the_cached_commit(cached_repo, tmp_path, monkeypatch):
    repo, commit, _ = cached_repo
    use_hub(monkeypatch, "http://127.0.0.1:9", tmp_path / "hf-home", offline=True)
    with pytest.warns(HubUnreachableWarning, match=f"HF_HUB_OFFLINE=1 is set; installing .* commit {commit}, cached "):
        hub.pull(repo, tmp_path / "out")
    with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE=1 is set, and online=True asks for the Hub itself"):
        hub.pull(repo, tmp_path / "refused", online=True)


def test_a_push_with_nothing_to_commit_says_so_and_commits_nothing(hub_env, local_hub, tmp_path, request, capsys):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    assert cli_main(["push", str(directory), repo]) == 0
    out, err = capsys.readouterr()
    head = local_hub.store.resolve(repo, "main")["id"]
    assert (out, err) == (f"pushed {directory} to {repo}@main: commit {head}\n", "")  # no bar into a non-terminal
    first = len(local_hub.requests)
    again = hub.push(directory, repo)
    assert isinstance(again, NothingToPush) and again.oid == head
    writes = [path for _, method, path, _ in local_hub.requests[first:] if method in ("POST", "PUT")]
    assert writes == ["/api/repos/create"]  # the repo exists already (409); no upload, no commit
    assert cli_main(["push", str(directory), repo]) == 0
    assert capsys.readouterr() == (f"nothing to push: the Hub already has these files at {head} ({repo}@main)\n", "")
    assert local_hub.store.resolve(repo, "main")["id"] == head
    assert not isinstance(hub.push(model_dir(tmp_path / "other", tiny(num_classes=7)), repo), NothingToPush)
    assert local_hub.store.resolve(repo, "main")["id"] != head


def test_the_cli_puts_huggingface_hubs_settings_back(hub_env, tmp_path, request, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", None)  # the user chose nothing
    bars, verbosity = are_progress_bars_disabled(), hf_logging.get_verbosity()
    assert cli_main(["push", str(model_dir(tmp_path / "src", tiny())), repo_for(request)]) == 0
    assert cli_main(["pull", repo_for(request), str(tmp_path / "out")]) == 0
    assert (are_progress_bars_disabled(), hf_logging.get_verbosity()) == (bars, verbosity)
