"""A push sends the model and nothing else: config.json, model.safetensors and README.md, each a regular file
of the directory (a symlink or a FIFO among them is refused by name, before any request). A model card already
on the Hub is kept unless the push is asked to replace it. A pull into ``.`` is told apart from its parent."""

import os
from pathlib import Path

import pytest
import torch
from huggingface_hub import hf_hub_download

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import ModelDirectoryError
from timm_vitscratch.files import sha256_file

pytestmark = pytest.mark.slow  # push through the local Hub server

SECRET = "[default]\nsecret_access_key = NOT-A-REAL-KEY\n"


def hub_files(local_hub, repo, revision="main"):
    return sorted(local_hub.store.resolve(repo, revision)["files"])


def card_on_hub(repo, revision=None):
    return Path(hf_hub_download(repo, "README.md", revision=revision, force_download=True)).read_text()


@pytest.mark.parametrize(
    "name,kind",
    [
        ("README.md", "a symbolic link"),
        ("config.json", "a symbolic link"),
        ("model.safetensors", "a symbolic link"),
        ("README.md", "a FIFO"),
    ],
)
def test_push_refuses_what_is_not_a_regular_file_by_name_and_sends_nothing(
    name, kind, hub_env, local_hub, tmp_path, request, capsys
):
    """Probe f8: a README.md symlinked to a credentials file was uploaded as the model card."""
    repo = repo_for(request)
    (tmp_path / "secret").write_text(SECRET)
    directory = model_dir(tmp_path / "model", tiny())
    if kind == "a FIFO":
        (directory / name).unlink(missing_ok=True)
        os.mkfifo(directory / name)
    else:  # to a secret, or to the file's own bytes moved elsewhere: a link is refused either way
        target = tmp_path / "secret"
        if name != "README.md":
            target = tmp_path / name
            (directory / name).rename(target)
        os.symlink(target, directory / name)
    requests = len(local_hub.requests)
    with pytest.raises(ModelDirectoryError, match=f"{name} is {kind}, not a regular file"):
        hub.push(directory, repo)
    capsys.readouterr()
    assert cli_main(["push", str(directory), repo]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"vitscratch: error: {directory}: {name} is {kind}, not a regular file; push sends only the "
        "regular files config.json, model.safetensors, README.md of the directory (copy the file in instead)\n"
    )
    assert local_hub.requests[requests:] == []  # not one request: no repo created, nothing uploaded


def test_push_sends_the_three_model_files_and_nothing_else_of_the_directory(hub_env, local_hub, tmp_path, request):
    repo = repo_for(request)
    torch.manual_seed(9137)  # weights no other test pushes: the Hub cannot already hold them
    directory = model_dir(tmp_path / "model", tiny(num_classes=7))
    (directory / "secret.txt").write_text(SECRET)
    (directory / ".env").write_text("HF_TOKEN=hf_not_a_token\n")
    (directory / "optimizer.pth").write_bytes(os.urandom(2048))
    (directory / "runs").mkdir()
    (directory / "runs" / "log.txt").write_text("epoch 1\n")
    requests = len(local_hub.requests)
    hub.push(directory, repo)
    assert hub_files(local_hub, repo) == [".gitattributes", "README.md", "config.json", "model.safetensors"]
    uploads = [(origin, path) for origin, method, path, _ in local_hub.requests[requests:] if method == "PUT"]
    assert uploads == [("storage", f"/upload/{sha256_file(directory / 'model.safetensors')}")]


def test_an_existing_model_card_is_kept_unless_the_push_replaces_it(hub_env, local_hub, tmp_path, request):
    repo = repo_for(request)
    torch.manual_seed(1)
    first = model_dir(tmp_path / "v1", tiny())
    (first / "README.md").write_text("# My model\nhand-written card\n")
    hub.push(first, repo)  # a README in the directory is pushed as it is
    assert card_on_hub(repo) == "# My model\nhand-written card\n"

    torch.manual_seed(2)
    second = model_dir(tmp_path / "v2", tiny())  # no README.md: the card on the Hub stays
    hub.push(second, repo)
    assert card_on_hub(repo) == "# My model\nhand-written card\n"
    assert Path(hf_hub_download(repo, "model.safetensors")).read_bytes() == (second / "model.safetensors").read_bytes()
    hub.push(second, repo, revision="experiment")  # a new branch starts from main's card, and keeps it
    assert card_on_hub(repo, "experiment") == "# My model\nhand-written card\n"

    assert cli_main(["push", str(second), repo, "--replace-card"]) == 0
    generated = card_on_hub(repo)
    assert "library_name: timm" in generated and sha256_file(second / "model.safetensors") in generated
    assert card_on_hub(repo, "experiment") == "# My model\nhand-written card\n"
    hub.push(second, repo, revision="experiment", replace_card=True)
    assert card_on_hub(repo, "experiment") == generated
    assert hub_files(local_hub, repo) == [".gitattributes", "README.md", "config.json", "model.safetensors"]


def test_pull_into_dot_names_the_directory_and_installs_there(hub_env, tmp_path, request, monkeypatch, capsys):
    """``pull REPO .`` said ``. is not empty (it was filled while this pull ran)``: "." was taken for a name."""
    repo = repo_for(request)
    hub.push(model_dir(tmp_path / "src", tiny()), repo)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert cli_main(["pull", repo, "."]) == 0
    assert sorted(os.listdir(here)) == ["README.md", "config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["here", "hf-home", "src"]  # staged beside it, nothing left behind
    monkeypatch.chdir(here)  # the pull put a new directory in place of the one this process was in
    capsys.readouterr()
    assert cli_main(["pull", repo, "."]) == 2
    assert capsys.readouterr().err == (
        f"vitscratch: error: {here} is not empty; pull into a new directory or pass --force\n"
    )
    assert cli_main(["pull", repo, ".", "--force"]) == 0
    hub.check_model_directory(here)
    assert sorted(os.listdir(tmp_path)) == ["here", "hf-home", "src"]
