"""A hostile Hub: answers that lie about the commit, the hashes and the sizes, and bodies that trickle or flood.

Each ends in one ``HubAnswerError`` line naming the repo and what was wrong (the CLI: ``vitscratch: error:``,
exit 2), with no model installed, no partial download left in the cache, and nothing written outside the
Hugging Face cache and the output directory. The time limits are passed small and explicitly, so that each
test takes a few seconds; no test asserts a wall-clock time (the limits are what is checked).
"""

import json
import shutil

import pytest
from huggingface_hub import close_session, constants
from huggingface_hub.errors import LocalEntryNotFoundError

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from tests.support.local_hub import AnswerFault, DelayFault
from tests.support.local_hub.faults import endless, trickle
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.files import sha256_file
from timm_vitscratch.hub import transfer
from timm_vitscratch.hub.failures import HubAnswerError

pytestmark = pytest.mark.slow  # pulls against a hostile local Hub, slow bodies included

QUICK = dict(deadline_s=60.0, stall_s=1.0)  # a stall is seen within a few seconds


@pytest.fixture
def pushed(hub_env, tmp_path, request):
    """A repo holding a tiny model; returns (repo id, the weights' sha256, their size)."""
    repo = repo_for(request)
    directory = model_dir(tmp_path / "src", tiny())
    hub.push(directory, repo)
    weights = directory / "model.safetensors"
    return repo, sha256_file(weights), weights.stat().st_size


def everything(tmp_path):
    """Every path under tmp_path, with its size and mtime, but the Hugging Face cache's."""
    return {
        str(p.relative_to(tmp_path)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in tmp_path.rglob("*")
        if "hf-home" not in p.relative_to(tmp_path).parts
    }


def cache_files(tmp_path):
    return [p for p in (tmp_path / "hf-home").rglob("*") if p.is_file() and not p.is_symlink()]


def refused(repo, tmp_path, match, **limits):
    """The pull is refused with one HubAnswerError naming the repo; nothing is installed or left behind."""
    before = everything(tmp_path)
    with pytest.raises(HubAnswerError) as raised:
        hub.pull(repo, tmp_path / "out", **{**QUICK, **limits})
    message = str(raised.value)
    assert message.startswith(f"{repo}@main: ") and "\n" not in message, message
    assert match in message, message
    assert everything(tmp_path) == before  # nothing installed, nothing written beside the cache
    assert not list((tmp_path / "hf-home").rglob("*.incomplete"))
    return message


# --- r02: a body that trickles -----------------------------------------------------------------------
def test_a_body_that_trickles_stops_at_the_no_progress_window(pushed, inject, tmp_path, monkeypatch, capsys):
    repo, sha256, _ = pushed

    def slowly(answer):
        answer.body = trickle(answer.body, every=0.2, stop=inject.stop)

    fault = inject(AnswerFault(slowly, origin="storage", method="GET", path=sha256))
    message = refused(repo, tmp_path, "model.safetensors: the Hub sent ")
    assert "a pull needs 65,536 bytes (or the rest of the answer) every 1 s" in message
    assert fault.sent < 100  # one byte every 0.2 s for about a second
    monkeypatch.setenv(transfer.STALL_S_ENV, "1")  # the CLI takes the limits from the environment
    assert cli_main(["pull", repo, str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"vitscratch: error: {repo}@main: model.safetensors: the Hub sent "), err
    assert "Traceback" not in "\n".join(err)


def test_a_body_that_never_comes_stops_at_the_no_progress_window(pushed, inject, tmp_path):
    repo, sha256, _ = pushed

    def nothing():
        inject.stop.wait(60)
        yield b""

    def silent(answer):  # the headers, then nothing
        answer.body = nothing()

    inject(AnswerFault(silent, origin="storage", method="GET", path=sha256))
    refused(repo, tmp_path, "model.safetensors: the Hub sent 0 bytes in ")


def test_a_metadata_request_that_is_never_answered_stops_at_the_no_progress_window(pushed, inject, tmp_path):
    repo, _, _ = pushed
    inject(DelayFault(10.0, method="HEAD", path=r"/resolve/.*/config\.json$"))
    refused(repo, tmp_path, "config.json: the Hub sent 0 bytes in ")


def test_a_body_that_keeps_moving_but_too_slowly_stops_at_the_deadline(pushed, inject, tmp_path):
    repo, sha256, _ = pushed

    def slowly(answer):
        answer.body = trickle(answer.body, every=0.05, step=64, stop=inject.stop)

    inject(AnswerFault(slowly, origin="storage", method="GET", path=sha256))
    refused(repo, tmp_path, "the pull ran past its deadline of 1.5 s", deadline_s=1.5, stall_bytes=1)


# --- r03: a body larger than announced ---------------------------------------------------------------
def test_a_body_announced_larger_than_listed_is_refused_before_it_is_read(pushed, inject, tmp_path):
    repo, sha256, size = pushed

    def huge(answer):
        answer.set_header("Content-Length", str(10 * 1024**3))
        answer.body = endless(stop=inject.stop)

    fault = inject(AnswerFault(huge, origin="storage", method="GET", path=sha256))
    message = refused(repo, tmp_path, "model.safetensors: the Hub announced a body of 10,737,418,240 bytes")
    assert f"expected {size:,}, the size it listed" in message
    assert fault.hits == 1  # refused, not retried
    assert all(p.stat().st_size <= size for p in cache_files(tmp_path))


def test_a_body_that_runs_past_the_listed_size_is_cut_there(pushed, inject, tmp_path):
    repo, sha256, size = pushed

    def flood(answer):  # no Content-Length: the body ends when the connection does
        answer.set_header("Content-Length", None)
        answer.body = endless(stop=inject.stop)

    fault = inject(AnswerFault(flood, origin="storage", method="GET", path=sha256))
    refused(repo, tmp_path, f"model.safetensors: the Hub sent more than the {size:,} bytes it listed")
    assert fault.hits == 1
    assert all(p.stat().st_size <= size for p in cache_files(tmp_path))


def test_a_file_listed_larger_than_a_model_directory_may_hold_is_refused(pushed, inject, tmp_path):
    repo, _, _ = pushed

    def listed_huge(answer):
        entries = json.loads(answer.body)
        for entry in entries:
            if entry["path"] == "config.json":
                entry["size"] = 17 << 20
        answer.body = json.dumps(entries).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    inject(AnswerFault(listed_huge, method="GET", path=f"^/api/models/{repo}/tree/"))
    refused(repo, tmp_path, "config.json has size 17825792; expected a whole number of bytes from 0 to 16,777,216")


# --- r12: answers that would name paths outside the cache --------------------------------------------
def edit_header(name, value):
    def edit(answer):
        answer.set_header(name, value)

    return edit


def test_a_commit_id_that_is_a_path_is_refused_before_anything_is_written(pushed, inject, tmp_path):
    repo, _, _ = pushed
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "settings.json").write_text('{"mine": true}')
    hostile = "../" * 12 + str(victim / "settings").lstrip("/")

    def lie(answer):
        info = json.loads(answer.body)
        info["sha"] = hostile
        answer.body = json.dumps(info).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    inject(AnswerFault(lie, method="GET", path=f"^/api/models/{repo}/revision/"))
    cache_before = sorted((tmp_path / "hf-home").rglob("*"))
    message = refused(repo, tmp_path, "the commit id the Hub answered is '../../")
    assert message.endswith("; a commit id is 40 lowercase hex digits")
    assert sorted((tmp_path / "hf-home").rglob("*")) == cache_before  # not even the cache


@pytest.mark.parametrize(
    "what, edit, match",
    [
        (
            "X-Repo-Commit of the metadata",
            edit_header("X-Repo-Commit", "../../../../outside"),
            "config.json: the Hub answered X-Repo-Commit '../../../../outside'; expected the commit ",
        ),
        (
            "ETag of the metadata",
            edit_header("ETag", '"../../../../outside"'),
            "config.json: the Hub answered ETag '\"../../../../outside\"'; expected ",
        ),
        (
            "size of the metadata",
            edit_header("Content-Length", "99"),
            "config.json: the Hub announced 99 bytes; its file list says ",
        ),
        (
            "404 whose X-Repo-Commit leads out",
            lambda answer: (
                setattr(answer, "status", 404),
                answer.set_header("X-Error-Code", "EntryNotFound"),
                answer.set_header("X-Repo-Commit", "../../../outside"),
            ),
            "config.json: the Hub answered X-Repo-Commit '../../../outside'",
        ),
        (
            "an encoded body",
            edit_header("Content-Encoding", "gzip"),
            "config.json: the Hub answered Content-Encoding 'gzip'; the pull asks for 'identity'",
        ),
    ],
)
def test_download_headers_that_disagree_with_the_file_list_are_refused(what, edit, match, pushed, inject, tmp_path):
    repo, _, _ = pushed
    inject(AnswerFault(edit, method="HEAD", path=r"/resolve/.*/config\.json$"))
    refused(repo, tmp_path, match)
    outside = [p for p in tmp_path.rglob("*") if p.name in ("outside", "outside.lock")]
    assert outside == []


@pytest.mark.parametrize(
    "what, entry_edit, match",
    [
        ("a path-like LFS oid", {"lfs": {"oid": "../../x", "size": 1}}, "has LFS oid '../../x'; expected a sha256"),
        ("an LFS size that differs", {"lfs.size": 1}, "has LFS size 1 and size "),
        ("a folder", {"type": "directory"}, "is of type 'directory'; expected 'file'"),
        ("a negative size", {"size": -1}, "has size -1; expected a whole number of bytes"),
        ("a size that is text", {"size": "458412"}, "has size '458412'; expected a whole number of bytes"),
        ("an oid that is not a blob id", {"oid": "xyz"}, "has oid 'xyz'; expected a git blob id"),
        ("no entry", None, "has no model.safetensors; a model directory holds config.json, model.safetensors"),
        ("two entries", "twice", "lists model.safetensors twice"),
    ],
)
def test_file_lists_that_are_not_what_a_model_directory_holds_are_refused(
    what, entry_edit, match, pushed, inject, tmp_path
):
    repo, _, _ = pushed

    def lie(answer):
        entries = json.loads(answer.body)
        (weights,) = [e for e in entries if e["path"] == "model.safetensors"]
        if entry_edit is None:
            entries.remove(weights)
        elif entry_edit == "twice":
            entries.append(dict(weights))
        elif "lfs.size" in entry_edit:
            weights["lfs"]["size"] = entry_edit["lfs.size"]
        else:
            weights.update(entry_edit)
        answer.body = json.dumps(entries).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    inject(AnswerFault(lie, method="GET", path=f"^/api/models/{repo}/tree/"))
    refused(repo, tmp_path, match)


def test_entries_that_are_not_a_model_directorys_are_never_used(pushed, inject, tmp_path):
    repo, sha256, _ = pushed

    def extra(answer):
        entries = json.loads(answer.body)
        entries += [{"type": "file", "path": "../../evil.json", "size": -5, "oid": "../x"}, "not an entry", 7]
        answer.body = json.dumps(entries).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    inject(AnswerFault(extra, method="GET", path=f"^/api/models/{repo}/tree/"))
    out = hub.pull(repo, tmp_path / "out", **QUICK)
    assert sha256_file(out / "model.safetensors") == sha256
    assert not [p for p in tmp_path.rglob("*") if "evil" in p.name]


def test_a_commit_other_than_the_one_asked_for_is_refused(pushed, inject, local_hub, tmp_path):
    repo, _, _ = pushed
    commit = local_hub.store.resolve(repo, "main")["id"]
    other = "0" * 40 if commit != "0" * 40 else "1" * 40

    def lie(answer):
        info = json.loads(answer.body)
        info["sha"] = other
        answer.body = json.dumps(info).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    inject(AnswerFault(lie, method="GET", path=f"^/api/models/{repo}/revision/"))
    with pytest.raises(HubAnswerError, match=f"the Hub answered commit {other} for commit {commit}"):
        hub.pull(repo, tmp_path / "out", revision=commit, **QUICK)


def test_a_cached_branch_that_leads_out_of_the_cache_is_not_followed_offline(pushed, tmp_path, monkeypatch):
    repo, sha256, _ = pushed
    hub.pull(repo, tmp_path / "first")
    (ref,) = (tmp_path / "hf-home").glob("hub/*/refs/main")
    (snapshot,) = (tmp_path / "hf-home").glob("hub/*/snapshots/*")
    shutil.copytree(tmp_path / "first", tmp_path / "elsewhere")  # a model directory where the ref leads
    ref.write_text("../../../../elsewhere")  # from <cache>/models--.../snapshots/ to tmp_path
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(LocalEntryNotFoundError, match="the local cache holds no snapshot of this revision"):
        hub.pull(repo, tmp_path / "offline")
    assert not (tmp_path / "offline").exists()
    ref.write_text(snapshot.name)
    out = hub.pull(repo, tmp_path / "offline")
    assert sha256_file(out / "model.safetensors") == sha256


# --- the hooks -----------------------------------------------------------------------------------------
def test_the_hooks_are_put_back_on_a_new_client(pushed, inject, tmp_path):
    """huggingface_hub makes a new HTTP client after ``close_session`` (and in a forked child)."""
    repo, _, _ = pushed
    hub.pull(repo, tmp_path / "first")
    close_session()
    shutil.rmtree(tmp_path / "hf-home")  # so that the second pull asks the Hub again
    inject(AnswerFault(edit_header("X-Repo-Commit", "../x"), method="HEAD", path=r"/resolve/.*/config\.json$"))
    with pytest.raises(HubAnswerError, match="X-Repo-Commit"):
        hub.pull(repo, tmp_path / "second", force=True, **QUICK)


def test_the_hooks_do_nothing_outside_a_pull():
    import httpx2

    request = httpx2.Request("GET", "http://127.0.0.1:9/x", extensions={"timeout": {"read": None}})
    transfer._on_request(request)
    assert request.extensions["timeout"] == {"read": None} and "Accept-Encoding" not in request.headers
    response = httpx2.Response(200, headers={"X-Repo-Commit": "../x", "Content-Length": "5"}, content=b"hello")
    transfer._on_response(response)
    assert response.read() == b"hello"


@pytest.mark.parametrize(
    "env, value, match",
    [
        (transfer.DEADLINE_ENV, "soon", "VITSCRATCH_PULL_DEADLINE_S='soon': expected a positive number of seconds"),
        (transfer.STALL_S_ENV, "-3", "VITSCRATCH_PULL_STALL_S='-3': expected a positive number of seconds"),
        (transfer.STALL_S_ENV, "inf", "VITSCRATCH_PULL_STALL_S='inf': expected a positive number of seconds"),
        (transfer.STALL_BYTES_ENV, "0", "VITSCRATCH_PULL_STALL_BYTES='0': expected a whole number of bytes"),
        (transfer.STALL_BYTES_ENV, "1.5", "VITSCRATCH_PULL_STALL_BYTES='1.5': expected a whole number of bytes"),
    ],
)
def test_limits_from_the_environment_are_checked(env, value, match, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=match):
        transfer.TransferLimits.resolve()
    assert cli_main(["pull", "org/anything", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"vitscratch: error: {match}")
    assert list(tmp_path.iterdir()) == []


def test_limits_given_override_the_environment(monkeypatch):
    monkeypatch.setenv(transfer.STALL_S_ENV, "7")
    assert transfer.TransferLimits.resolve() == transfer.TransferLimits(stall_s=7.0)
    assert transfer.TransferLimits.resolve(stall_s=2, stall_bytes=10, deadline_s=5) == transfer.TransferLimits(5, 2, 10)
    with pytest.raises(ValueError, match="stall_bytes=True: expected a whole number of bytes"):
        transfer.TransferLimits.resolve(stall_bytes=True)


# --- Xet: the bytes come by plain HTTP, through the hooks ---------------------------------------------
def test_an_answer_offering_xet_is_downloaded_by_plain_http(pushed, inject, tmp_path, monkeypatch):
    """With hf_xet installed, huggingface_hub would move a file announced with X-Xet-Hash through Xet, past
    the hooks; the pull drops that header, so the file comes by HTTP, bounded and checked."""
    repo, sha256, _ = pushed
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)

    def offer_xet(answer):
        answer.set_header("X-Xet-Hash", "e" * 64)
        answer.set_header("X-Xet-Refresh-Route", f"/api/models/{repo}/xet-read-token/main")

    fault = inject(AnswerFault(offer_xet, method="HEAD", path=r"/resolve/.*/model\.safetensors$"))
    out = hub.pull(repo, tmp_path / "out", **QUICK)
    assert fault.hits >= 1 and sha256_file(out / "model.safetensors") == sha256


def test_a_cached_file_list_is_not_used_in_place_of_the_checked_answers(pushed, local_hub, tmp_path, monkeypatch):
    """huggingface_hub (with hf_xet) takes a file's hash and size from snapshot_download's cached list of the
    commit instead of asking the Hub; a list a hostile Hub gave earlier would name the blob. The pull removes it."""
    repo, sha256, size = pushed
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    commit = local_hub.store.resolve(repo, "main")["id"]
    trees = tmp_path / "hf-home" / "hub" / ("models--" + repo.replace("/", "--")) / "trees"
    trees.mkdir(parents=True)
    hostile = {
        "size": size,
        "blob_id": "0" * 40,
        "lfs_sha256": "../../../outside",
        "lfs_size": size,
        "xet_hash": "e" * 64,
    }
    (trees / f"{commit}.json").write_text(json.dumps({"format_version": 1, "files": {"model.safetensors": hostile}}))
    out = hub.pull(repo, tmp_path / "out", **QUICK)
    assert sha256_file(out / "model.safetensors") == sha256
    assert not (trees / f"{commit}.json").exists()
    assert [p for p in tmp_path.rglob("outside*")] == []
