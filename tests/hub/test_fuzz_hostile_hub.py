"""Property-based fuzzing of pull against a hostile Hub that mutates its answers.

Each case injects one to three lies into the local Hub's answers to one pull: a header set to another value
or removed (``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``, ``X-Linked-Size``, ``Content-Length``,
``Content-Range``, ``Content-Encoding``, ``Location``), another status, a field of the revision lookup or
of the file list replaced by any JSON value or removed, an entry repeated, a body cut, extended, flipped,
sent slowly or without end. Each lie strikes once (huggingface_hub may retry past it) or every time. The
pull must end in a verified install of the repo's own weights, or in one clear line (one of the error
types a person is told about, naming the repo or the Hub, without a traceback's types), never writing
outside the Hugging Face cache and the output directory, and within its (small) deadline. Deterministic
(``derandomize=True``); conftest.py prints the number of cases and how they ended.
"""

import json
import threading
import time

import pytest
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
from huggingface_hub.utils import httpx
from hypothesis import given
from hypothesis import strategies as st

from tests.support import time_limits, tiny
from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, fuzz_settings
from tests.support.hub_fixtures import model_dir, repo_for, use_hub
from tests.support.local_hub import AnswerFault
from tests.support.local_hub.faults import endless, trickle
from timm_vitscratch import hub
from timm_vitscratch.errors import ModelDirectoryError
from timm_vitscratch.files import sha256_file
from timm_vitscratch.hub.failures import HubAnswerError, describe_hub_error

pytestmark = pytest.mark.slow  # pulls against a local Hub that mutates its answers

SURFACE = "pull from a hostile Hub (headers, sizes, commit ids, file lists, slow bodies)"
LIMITS = dict(deadline_s=4.0, stall_s=0.5, stall_bytes=4096)
#: what a failed pull may raise: each is told to a person in one line by describe_hub_error
TOLD = (HubAnswerError, ModelDirectoryError, HfHubHTTPError, LocalEntryNotFoundError, httpx.TransportError)

HEADERS = [
    "X-Repo-Commit",
    "ETag",
    "X-Linked-Etag",
    "X-Linked-Size",
    "Content-Length",
    "Content-Range",
    "Content-Encoding",
    "Location",
]
TARGETS = {  # what a lie strikes: (origin, method, path regex), the path filled in with the repo and the sha256
    "revision lookup": ("api", "GET", "^/api/models/{repo}/revision/"),
    "file list": ("api", "GET", "^/api/models/{repo}/tree/"),
    "config.json metadata": ("api", "HEAD", r"^/{repo}/resolve/.*/config\.json$"),
    "config.json download": ("api", "GET", r"^/{repo}/resolve/.*/config\.json$"),
    "weights metadata": ("api", "HEAD", r"^/{repo}/resolve/.*/model\.safetensors$"),
    "weights download": ("storage", "GET", "^/lfs/{sha256}$"),
    "README.md metadata": ("api", "HEAD", r"^/{repo}/resolve/.*/README\.md$"),
}

HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=24)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def header_value(draw, real):
    """A value near the real ones (another commit, hash or size, a path) or anything printable."""
    commit, sha256, size = real["commit"], real["sha256"], real["size"]
    return draw(
        st.sampled_from(
            [
                commit,
                commit.upper(),
                "0" * 40,
                sha256,
                "f" * 64,
                f'"{sha256}"',
                "../" * 6 + "outside",
                "/tmp/outside",
                "",
                str(size),
                str(size + 1),
                str(size - 1),
                str(10 * 1024**3),
                "-1",
                "gzip",
                f"bytes 0-{size - 1}/{size}",
                f"bytes 0-1/{size * 2}",
                "http://127.0.0.1:9/nowhere",
            ]
        )
        | HEADER_TEXT
    )


@st.composite
def lie(draw, real):
    """(target, description, edit, times)."""
    target = draw(st.sampled_from(sorted(TARGETS)))
    kind = draw(st.sampled_from(["header", "drop header", "status", "json", "body"]))
    if kind == "json" and target not in ("revision lookup", "file list"):
        kind = "header"
    if kind == "header":
        name, value = draw(st.sampled_from(HEADERS)), draw(header_value(real))

        def edit(answer, name=name, value=value):
            answer.set_header(name, value)

        what = f"{name}: {value!r}"
    elif kind == "drop header":
        name = draw(st.sampled_from(HEADERS))

        def edit(answer, name=name):
            answer.set_header(name, None)

        what = f"no {name}"
    elif kind == "status":
        status = draw(st.sampled_from([200, 206, 302, 304, 401, 404, 416, 429, 500, 503]))

        def edit(answer, status=status):
            answer.status = status

        what = f"status {status}"
    elif kind == "json":
        field = draw(st.sampled_from(["sha", "path", "size", "oid", "lfs", "type", "whole", "repeat", "remove"]))
        value = draw(JSON)

        def edit(answer, field=field, value=value, target=target):
            data = json.loads(answer.body)
            if field == "whole":
                data = value
            elif target == "revision lookup" or not isinstance(data, list):
                data[field if field == "sha" else "sha"] = value
            else:
                entry = data[hash(json.dumps(value, sort_keys=True)) % len(data)] if data else {}
                if field == "repeat":
                    data.append(dict(entry))
                elif field == "remove":
                    data.remove(entry)
                elif field == "lfs" and isinstance(entry.get("lfs"), dict) and isinstance(value, int):
                    entry["lfs"]["size"] = value
                else:
                    entry[field] = value
            answer.body = json.dumps(data).encode()
            answer.set_header("Content-Length", str(len(answer.body)))

        what = f"{field} = {value!r}"
    else:
        how = draw(st.sampled_from(["cut", "extend", "flip", "slow", "endless", "silent"]))
        at = draw(st.integers(0, 1 << 20))

        def edit(answer, how=how, at=at):
            body = answer.body if isinstance(answer.body, bytes) else b""
            if how == "cut":
                answer.body = body[: at % (len(body) + 1)]
            elif how == "extend":
                answer.body = body + bytes(at % 5000 + 1)
            elif how == "flip" and body:
                flipped = bytearray(body)
                flipped[at % len(body)] ^= 0xFF
                answer.body = bytes(flipped)
            elif how == "slow":
                answer.body = trickle(body, every=0.05, step=64, stop=STOP)
            elif how == "endless":
                answer.set_header("Content-Length", None)
                answer.body = endless(chunk=1 << 14, limit=64 << 20, stop=STOP)
            elif how == "silent":
                answer.body = _silent()

        what = f"body {how} ({at})"
    times = draw(st.sampled_from([1, None]))
    return target, what, edit, times


STOP = threading.Event()  # set after each case: a body still being sent stops


def _silent():
    STOP.wait(30)
    yield b""


def outside(tmp_path):
    """Everything under tmp_path but this case's cache and output (and the output's staging beside it)."""
    return {
        str(p.relative_to(tmp_path)): p.lstat().st_mtime_ns
        for p in tmp_path.rglob("*")
        if p.relative_to(tmp_path).parts[0] not in ("hf-home", "cases")
    }


def test_pull_from_a_hostile_hub_installs_verified_weights_or_says_why(local_hub, tmp_path, request, monkeypatch):
    repo = repo_for(request)
    use_hub(monkeypatch, local_hub.url, tmp_path / "hf-home")
    source = model_dir(tmp_path / "src", tiny())
    hub.push(source, repo)
    sha256 = sha256_file(source / "model.safetensors")
    real = {
        "commit": local_hub.store.resolve(repo, "main")["id"],
        "sha256": sha256,
        "size": (source / "model.safetensors").stat().st_size,
    }
    (tmp_path / "victim.json").write_text("{}")
    count = [0]
    CASES[SURFACE].clear()

    @fuzz_settings(PLAN[SURFACE])
    @given(st.lists(lie(real), min_size=1, max_size=3))
    def case(lies):
        count[0] += 1
        here = tmp_path / "cases" / str(count[0])
        described = "; ".join(f"{target}: {what} ({'once' if times else 'always'})" for target, what, _, times in lies)
        before = outside(tmp_path)
        STOP.clear()
        faults = []
        for target, _, edit, times in lies:
            origin, method, path = TARGETS[target]
            fault = AnswerFault(
                edit, origin=origin, method=method, path=path.format(repo=repo, sha256=sha256), times=times
            )
            faults.append(local_hub.inject(fault))
        start = time.monotonic()
        with monkeypatch.context() as patch:
            use_hub(patch, local_hub.url, here / "hf-home")
            try:
                out = hub.pull(repo, here / "out", **LIMITS)
                outcome = "installed"
            except TOLD as error:
                line = describe_hub_error(error, repo)
                assert "\n" not in line.strip() and (repo in line or local_hub.url in line), f"{described}: {line!r}"
                assert not (here / "out").exists(), described
                outcome = "refused"
            except Exception as error:  # a traceback's type: the case fails, saying which
                pytest.fail(f"{described}: escaped as {type(error).__name__}: {error}")
            finally:
                STOP.set()
                for fault in faults:
                    local_hub.faults.remove(fault)
        took = time.monotonic() - start
        if outcome == "installed":
            assert sha256_file(out / "model.safetensors") == sha256, f"{described}: installed other weights"
            hub.check_model_directory(out)
        assert outside(tmp_path) == before, f"{described}: wrote outside the cache and the output"
        # the deadline holds: generous, and more so on a busy machine (the pull's own start-up is not under it)
        slack = 30 * time_limits.machine_factor()[0]
        assert took < LIMITS["deadline_s"] + slack, f"{described}: took {took:.0f} s"
        CASES[SURFACE][outcome] += 1

    case()
    assert sum(CASES[SURFACE].values()) == PLAN[SURFACE]
    assert CASES[SURFACE]["refused"] > 0
