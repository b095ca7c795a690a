"""timm's own route to a model of ours on the Hub: ``timm.create_model("hf-hub:ORG/NAME", pretrained=True)`` and a
tag that ``register_tag_from_hub`` registered. Our entry function takes the revision's commit and the file list
through the gate, and the weights inside the pull's guard, before timm's loader reads them from the cache.

A hostile Hub (a commit id that is a path, a header leading out of the cache, a body announced at 10 GiB, a body
that trickles) ends in one ``HubAnswerError`` line naming the repo, with nothing written outside the Hugging Face
cache and no partial download left in it. The time limits come from the environment (``VITSCRATCH_PULL_*``),
small, so that each test takes a few seconds; no test asserts a wall-clock time.
"""

import json

import pytest
import timm
import torch
from huggingface_hub import constants

from tests.support import TINY, tiny
from tests.support.hub_fixtures import logits, model_dir, repo_for
from tests.support.local_hub import AnswerFault
from tests.support.local_hub.faults import endless, trickle
from timm_vitscratch import hub
from timm_vitscratch.files import sha256_file
from timm_vitscratch.hub import transfer
from timm_vitscratch.hub.failures import HubAnswerError
from timm_vitscratch.models.registry import unregister_hub_weights

pytestmark = pytest.mark.slow  # hf-hub: loads against a hostile local Hub

TAG = "scratch_vit_ti16.hostile_hub"


@pytest.fixture
def pushed(hub_env, tmp_path, request, monkeypatch):
    """A repo holding a tiny model, and small limits from the environment; returns (repo id, model, weights'
    sha256, their size)."""
    monkeypatch.setenv(transfer.STALL_S_ENV, "1")
    monkeypatch.setenv(transfer.DEADLINE_ENV, "60")
    repo = repo_for(request)
    model = tiny()
    directory = model_dir(tmp_path / "src", model)
    hub.push(directory, repo)
    weights = directory / "model.safetensors"
    return repo, model, sha256_file(weights), weights.stat().st_size


def register(repo):
    """Register TAG for the repo's tiny weights (whose arguments differ from the variant's: a warning says so)."""
    with pytest.warns(UserWarning, match="differ from scratch_vit_ti16's defaults"):
        return hub.register_tag_from_hub(TAG, repo)


def everything(tmp_path):
    """Every path under tmp_path, with its size and mtime, but the Hugging Face cache's."""
    return {
        str(p.relative_to(tmp_path)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in tmp_path.rglob("*")
        if "hf-home" not in p.relative_to(tmp_path).parts
    }


def cached_weights(tmp_path):
    return [p for p in (tmp_path / "hf-home").rglob("model.safetensors")]


def refused(name, repo, tmp_path, match):
    """``create_model(name, pretrained=True)`` is refused with one HubAnswerError naming the repo; nothing is
    written beside the cache, no weights and no partial download are left in it."""
    before = everything(tmp_path)
    with pytest.raises(HubAnswerError) as raised:
        timm.create_model(name, pretrained=True)
    message = str(raised.value)
    assert message.startswith(f"{repo}@") and "\n" not in message, message
    assert match in message, message
    assert everything(tmp_path) == before
    assert not list((tmp_path / "hf-home").rglob("*.incomplete"))
    assert cached_weights(tmp_path) == []
    return message


def lie_about_the_commit(hostile):
    def lie(answer):
        info = json.loads(answer.body)
        info["sha"] = hostile
        answer.body = json.dumps(info).encode()
        answer.set_header("Content-Length", str(len(answer.body)))

    return lie


# --- a clean Hub ----------------------------------------------------------------------------------------
def test_a_clean_hf_hub_load_gives_the_pushed_weights_at_the_checked_commit(pushed, local_hub, tmp_path):
    repo, model, sha256, _ = pushed
    commit = local_hub.store.resolve(repo, "main")["id"]
    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(logits(loaded, x), logits(model, x))
    assert loaded.pretrained_cfg["hf_hub_id"] == repo  # as timm records it, not the pinned commit
    (weights,) = cached_weights(tmp_path)
    assert weights.parent.name == commit and sha256_file(weights) == sha256
    (ref,) = (tmp_path / "hf-home").glob("hub/*/refs/main")
    assert ref.read_text() == commit


def test_a_clean_load_makes_no_request_outside_the_guard(pushed, inject, tmp_path):
    """Once the weights are fetched, timm's loader finds them in the cache at the commit: the Hub is asked for
    the weights once, by the guarded download (its answers checked), and by timm not at all."""
    repo, _, _, _ = pushed
    seen = inject(AnswerFault(lambda answer: None, path=r"/resolve/.*/model\.safetensors$"))
    timm.create_model(f"hf-hub:{repo}", pretrained=True)
    first = seen.hits
    assert first >= 1
    timm.create_model(f"hf-hub:{repo}", pretrained=True)  # cached at the commit: not asked again
    assert seen.hits == first


def test_a_registered_tag_loads_through_the_guard(pushed, local_hub, tmp_path):
    repo, model, _, _ = pushed
    register(repo)
    try:
        loaded = timm.create_model(TAG, pretrained=True, **TINY)
    finally:
        unregister_hub_weights(TAG)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(logits(loaded, x), logits(model, x))


def test_an_unreachable_hub_uses_the_cached_weights(pushed, tmp_path, monkeypatch):
    """As huggingface_hub does when the Hub cannot be asked: the cached snapshot of the revision (found through
    the checked cache ref), so a load that worked once keeps working without network."""
    repo, model, _, _ = pushed
    timm.create_model(f"hf-hub:{repo}", pretrained=True)
    dead = "http://127.0.0.1:9"
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}")
    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(logits(loaded, x), logits(model, x))


# --- a hostile Hub --------------------------------------------------------------------------------------
def test_a_commit_id_that_is_a_path_is_refused_before_the_weights_are_fetched(pushed, inject, tmp_path):
    repo, _, _, _ = pushed
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "settings.json").write_text('{"mine": true}')
    hostile = "../" * 12 + str(victim / "settings").lstrip("/")
    inject(AnswerFault(lie_about_the_commit(hostile), method="GET", path=f"^/api/models/{repo}/revision/"))
    message = refused(f"hf-hub:{repo}", repo, tmp_path, "the commit id the Hub answered is '../../")
    assert message.startswith(f"{repo}@main: ") and message.endswith("; a commit id is 40 lowercase hex digits")


def test_a_download_header_that_leads_out_of_the_cache_is_refused(pushed, inject, tmp_path):
    repo, _, _, _ = pushed
    inject(
        AnswerFault(
            lambda answer: answer.set_header("X-Repo-Commit", "../../../../outside"),
            method="HEAD",
            path=r"/resolve/.*/model\.safetensors$",
        )
    )
    refused(
        f"hf-hub:{repo}",
        repo,
        tmp_path,
        "model.safetensors: the Hub answered X-Repo-Commit '../../../../outside'; expected the commit ",
    )
    assert [p for p in tmp_path.rglob("*") if p.name in ("outside", "outside.lock")] == []


def test_a_body_announced_at_10_gib_is_refused_before_it_is_read(pushed, inject, tmp_path):
    repo, _, sha256, size = pushed

    def huge(answer):
        answer.set_header("Content-Length", str(10 * 1024**3))
        answer.body = endless(stop=inject.stop)

    fault = inject(AnswerFault(huge, origin="storage", method="GET", path=sha256))
    message = refused(
        f"hf-hub:{repo}", repo, tmp_path, "model.safetensors: the Hub announced a body of 10,737,418,240 bytes"
    )
    assert f"expected {size:,}, the size it listed" in message
    assert fault.hits == 1  # refused, not retried


def test_a_body_that_trickles_stops_at_the_no_progress_window(pushed, inject, tmp_path):
    repo, _, sha256, _ = pushed

    def slowly(answer):
        answer.body = trickle(answer.body, every=0.2, stop=inject.stop)

    fault = inject(AnswerFault(slowly, origin="storage", method="GET", path=sha256))
    message = refused(f"hf-hub:{repo}", repo, tmp_path, "model.safetensors: the Hub sent ")
    assert "a pull needs 65,536 bytes (or the rest of the answer) every 1 s (VITSCRATCH_PULL_STALL_BYTES" in message
    assert fault.sent < 100  # one byte every 0.2 s for about a second


def test_a_registered_tag_is_refused_a_body_larger_than_listed(pushed, inject, tmp_path):
    repo, _, sha256, size = pushed
    commit = register(repo).split("@")[1]

    def flood(answer):  # no Content-Length: the body ends when the connection does
        answer.set_header("Content-Length", None)
        answer.body = endless(stop=inject.stop)

    inject(AnswerFault(flood, origin="storage", method="GET", path=sha256))
    try:
        with pytest.raises(HubAnswerError) as raised:
            timm.create_model(TAG, pretrained=True, **TINY)
    finally:
        unregister_hub_weights(TAG)
    message = str(raised.value)
    assert message.startswith(f"{repo}@{commit}: model.safetensors: the Hub sent more than the {size:,} bytes")
    assert "\n" not in message and cached_weights(tmp_path) == []
    assert not list((tmp_path / "hf-home").rglob("*.incomplete"))


def test_a_revision_lookup_that_answers_another_commit_is_refused(pushed, inject, local_hub, tmp_path):
    repo, _, _, _ = pushed
    commit = local_hub.store.resolve(repo, "main")["id"]
    other = "0" * 40 if commit != "0" * 40 else "1" * 40
    inject(AnswerFault(lie_about_the_commit(other), method="GET", path=f"^/api/models/{repo}/revision/"))
    message = refused(f"hf-hub:{repo}@{commit}", repo, tmp_path, f"the Hub answered commit {other} for commit")
    assert message.startswith(f"{repo}@{commit}: ")
