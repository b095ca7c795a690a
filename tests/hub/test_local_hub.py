"""The local Hub answers the real huggingface_hub client as the Hub does (headers, errors, revisions)."""

import hashlib
import re
import signal
import subprocess
import sys

import pytest
from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
)
from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import get_session
from huggingface_hub.utils.sha import git_hash

from tests.support.hub_fixtures import repo_for, use_hub
from tests.support.local_hub import LocalHub

pytestmark = pytest.mark.slow  # the local Hub server as a process

WEIGHTS = bytes(range(256)) * 40  # binary: goes through LFS
CONFIG = b'{"architecture": "x"}\n'


@pytest.fixture
def repo(hub_env, request):
    repo_id = repo_for(request)
    api = HfApi()
    api.create_repo(repo_id)
    api.create_commit(
        repo_id,
        [
            CommitOperationAdd("model.safetensors", WEIGHTS),
            CommitOperationAdd("config.json", CONFIG),
            CommitOperationAdd("sub/dir/notes.txt", b"nested\n"),
        ],
        commit_message="files",
    )
    return repo_id


def test_resolve_headers_for_lfs_and_regular_files(repo, local_hub):
    head = HfApi().model_info(repo).sha
    lfs = get_hf_file_metadata(hf_hub_url(repo, "model.safetensors"))
    assert lfs.etag == hashlib.sha256(WEIGHTS).hexdigest()  # X-Linked-Etag
    assert lfs.size == len(WEIGHTS) and lfs.commit_hash == head  # X-Linked-Size, X-Repo-Commit
    assert lfs.location.startswith(local_hub.storage_url)  # a 302 to the storage origin, as to the Hub's CDN
    regular = get_hf_file_metadata(hf_hub_url(repo, "config.json"))
    assert regular.etag == git_hash(CONFIG) and regular.size == len(CONFIG) and regular.commit_hash == head
    assert open(hf_hub_download(repo, "model.safetensors"), "rb").read() == WEIGHTS
    assert ("api", "HEAD", f"/{repo}/resolve/main/model.safetensors", 302) in local_hub.requests


def test_missing_file_is_entry_not_found_with_the_commit(repo):
    with pytest.raises(RemoteEntryNotFoundError) as raised:
        hf_hub_download(repo, "nope.bin")
    assert raised.value.response.headers["X-Repo-Commit"] == HfApi().model_info(repo).sha
    assert not HfApi().file_exists(repo, "nope.bin") and HfApi().file_exists(repo, "config.json")


def test_uploads_use_the_classic_lfs_path(repo, local_hub):
    content = WEIGHTS + repo.encode()  # bytes no other test uploaded
    sha256 = hashlib.sha256(content).hexdigest()
    before = len(local_hub.requests)
    HfApi().upload_file(path_or_fileobj=content, path_in_repo="more.safetensors", repo_id=repo)
    writes = [
        (origin, method, path)
        for origin, method, path, status in local_hub.requests[before:]
        if method in ("POST", "PUT") and status == 200
    ]
    assert writes == [
        ("api", "POST", f"/api/models/{repo}/preupload/main"),
        ("api", "POST", f"/{repo}.git/info/lfs/objects/batch"),
        ("storage", "PUT", f"/upload/{sha256}"),
        ("api", "POST", f"/api/models/{repo}/commit/main"),
    ]


def test_tree_info_and_refs(repo):
    api = HfApi()
    files = {f.path: f for f in api.list_repo_tree(repo, recursive=True) if hasattr(f, "size")}
    assert sorted(files) == [".gitattributes", "config.json", "model.safetensors", "sub/dir/notes.txt"]
    assert files["model.safetensors"].lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert files["config.json"].lfs is None and files["config.json"].blob_id == git_hash(CONFIG)
    folders = [f.path for f in api.list_repo_tree(repo, recursive=True) if not hasattr(f, "size")]
    assert folders == ["sub", "sub/dir"]
    assert [f.path for f in api.list_repo_tree(repo, path_in_repo="sub/dir")] == ["sub/dir/notes.txt"]
    info = api.model_info(repo, files_metadata=True)
    assert {s.rfilename: s.size for s in info.siblings}["model.safetensors"] == len(WEIGHTS)
    api.create_branch(repo, branch="dev")
    assert sorted(b.name for b in api.list_repo_refs(repo).branches) == ["dev", "main"]
    with pytest.raises(HfHubHTTPError) as raised:
        api.create_branch(repo, branch="dev")
    assert raised.value.response.status_code == 409
    api.create_branch(repo, branch="dev", exist_ok=True)


def test_commits_move_branches_and_keep_history(repo):
    api = HfApi()
    first = api.model_info(repo).sha
    second = api.create_commit(repo, [CommitOperationDelete("sub/dir/notes.txt")], commit_message="rm").oid
    assert api.model_info(repo).sha == second != first
    assert api.file_exists(repo, "sub/dir/notes.txt", revision=first)
    assert not api.file_exists(repo, "sub/dir/notes.txt")
    same = api.create_commit(repo, [CommitOperationAdd("config.json", CONFIG)], commit_message="no change").oid
    assert same == second  # the client skips unchanged files: the Hub told it their oid
    with pytest.raises(HfHubHTTPError) as raised:
        api.create_commit(repo, [CommitOperationAdd("x.txt", b"x")], commit_message="late", parent_commit=first)
    assert raised.value.response.status_code == 412
    with pytest.raises(RevisionNotFoundError):
        api.create_commit(repo, [CommitOperationAdd("x.txt", b"x")], commit_message="x", revision="no-branch")


def test_storage_refuses_content_with_the_wrong_sha256(hub_env, local_hub):
    claimed = hashlib.sha256(b"right").hexdigest()
    response = get_session().put(f"{local_hub.storage_url}/upload/{claimed}", content=b"wrong")
    assert response.status_code == 400 and "expected" in response.json()["error"]
    assert not local_hub.store.has_lfs_object(claimed)


def test_range_requests_resume_downloads(repo, local_hub):  # `repo` sets up the client environment
    url = f"{local_hub.storage_url}/lfs/{hashlib.sha256(WEIGHTS).hexdigest()}"
    response = get_session().get(url, headers={"Range": "bytes=1000-"})
    assert response.status_code == 206 and response.content == WEIGHTS[1000:]
    assert response.headers["Content-Range"] == f"bytes 1000-{len(WEIGHTS) - 1}/{len(WEIGHTS)}"
    assert get_session().get(url, headers={"Range": f"bytes={len(WEIGHTS)}-"}).status_code == 416


def test_xet_routes_tell_the_client_to_disable_xet(hub_env, local_hub):
    response = get_session().get(f"{local_hub.url}/api/models/a/b/xet-write-token/main")
    assert response.status_code == 501 and "HF_HUB_DISABLE_XET=1" in response.headers["X-Error-Message"]


def test_repos_persist_on_disk_and_stop_refuses_connections(tmp_path, monkeypatch):
    with LocalHub(tmp_path / "root") as first:
        use_hub(monkeypatch, first.url, tmp_path / "hf-home", token=None)
        HfApi().create_repo("org/kept")
        commit = HfApi().upload_file(path_or_fileobj=CONFIG, path_in_repo="config.json", repo_id="org/kept").oid
    with pytest.raises(Exception) as raised:
        get_session().get(f"{first.url}/api/models/org/kept")
    assert "ConnectError" in type(raised.value).__name__
    with LocalHub(tmp_path / "root") as second:
        use_hub(monkeypatch, second.url, tmp_path / "hf-home-2", token=None)
        assert HfApi().model_info("org/kept").sha == commit
        assert open(hf_hub_download("org/kept", "config.json"), "rb").read() == CONFIG


def test_cli_local_hub_serves_until_sigterm(tmp_path, monkeypatch):
    root = tmp_path / "repos"
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.support.local_hub", "--root", str(root), "--token", "t0k"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [server.stdout.readline() for _ in range(5)]
        url = re.search(r"HF_ENDPOINT=(\S+)", "".join(lines)).group(1)
        assert "not huggingface.co" in lines[0] and "HF_HUB_DISABLE_XET=1" in lines[4]
        use_hub(monkeypatch, url, tmp_path / "hf-home", token=None)
        HfApi(endpoint=url, token="t0k").create_repo("org/served")
        with pytest.raises(HfHubHTTPError):  # the token is required for writes
            HfApi(endpoint=url, token="wrong").create_repo("org/other")
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    assert (root / "repos" / "org" / "served" / "repo.json").is_file()
