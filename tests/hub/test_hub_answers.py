"""The gate for the Hub's answers (timm_vitscratch/gate/hub_answers.py), value by value, without a server."""

import json

import pytest

from timm_vitscratch.choices import MAX_PARAMETERS
from timm_vitscratch.gate import hub_answers
from timm_vitscratch.gate.hub_answers import HubFile, body_limit, commit_id, repo_files, revision_commit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "ab" * 32
BLOB = "cd" * 20
WEIGHTS = HubFile("model.safetensors", 1000, BLOB, SHA256)
CONFIG = HubFile("config.json", 300, BLOB, None)
SIZES = {"config.json": 16 << 20, "model.safetensors": hub_answers.MAX_WEIGHTS_BYTES, "README.md": 16 << 20}
REQUIRED = ("config.json", "model.safetensors")


class Refused(ValueError):
    pass


def test_the_weights_bound_is_the_parameter_bound_at_8_bytes_and_a_safetensors_header():
    assert hub_answers.MAX_WEIGHTS_BYTES == MAX_PARAMETERS * 8 + 100_000_000


@pytest.mark.parametrize(
    "value", [COMMIT.upper(), COMMIT[:-1], COMMIT + "0", "../" * 13 + "x", "", None, 7, [COMMIT], COMMIT[:-1] + "\n"]
)
def test_only_40_lowercase_hex_digits_are_a_commit_id(value):
    with pytest.raises(Refused, match="a commit id is 40 lowercase hex digits"):
        commit_id(value, "the commit", Refused)
    assert commit_id(COMMIT, "the commit", Refused) == COMMIT


@pytest.mark.parametrize(
    "data, match",
    [
        (b"[]", "with a JSON list; expected an object"),
        (b"{}", "the commit id the Hub answered is None"),
        (b'{"sha": "../x"}', "the commit id the Hub answered is '../x'"),
        (b"{" * 40 + b"}" * 40, "nests JSON deeper than 32 levels"),
        (b'{"sha": "' + b"a" * (2 << 20) + b'"}', "holds a string of 2,097,152 characters"),
        (b"\xff", "is not UTF-8 text"),
    ],
)
def test_the_revision_lookup_answer_is_bounded_and_must_hold_a_commit_id(data, match):
    with pytest.raises(Refused, match=match) as raised:
        revision_commit(data, "org/x@main", Refused)
    assert str(raised.value).startswith("org/x@main: ")
    assert (
        revision_commit(json.dumps({"sha": COMMIT, "siblings": "anything"}).encode(), "org/x@main", Refused) == COMMIT
    )


def listing(*entries):
    return json.dumps(list(entries)).encode()


GOOD = [
    {"type": "file", "path": "config.json", "size": 300, "oid": BLOB},
    {"type": "file", "path": "model.safetensors", "size": 1000, "oid": BLOB, "lfs": {"oid": SHA256, "size": 1000}},
]


def test_a_file_list_gives_the_model_directorys_files_in_order_and_nothing_else():
    found = repo_files(
        listing(*reversed(GOOD), {"type": "file", "path": "../x", "size": -1}), "r", SIZES, REQUIRED, Refused
    )
    assert list(found) == ["config.json", "model.safetensors"]
    assert found["model.safetensors"] == WEIGHTS and found["model.safetensors"].etag == SHA256
    assert found["config.json"].etag == BLOB


@pytest.mark.parametrize(
    "edit, match",
    [
        ({"size": True}, "has size True; expected a whole number of bytes"),
        ({"size": 1.0}, "has size 1.0; expected a whole number of bytes"),
        ({"size": hub_answers.MAX_WEIGHTS_BYTES + 1}, "from 0 to 64,100,000,000"),
        ({"oid": BLOB.upper()}, "expected a git blob id"),
        ({"lfs": "yes"}, "has lfs 'yes'; expected an object with oid and size"),
        ({"lfs": {"oid": SHA256[:-1], "size": 1000}}, "expected a sha256 (64 lowercase hex digits)"),
        ({"lfs": {"oid": SHA256, "size": 999}}, "has LFS size 999 and size 1000; expected the same"),
        ({"type": None}, "is of type None; expected 'file'"),
    ],
)
def test_a_listed_file_must_be_well_formed_and_within_its_bound(edit, match):
    weights = {**GOOD[1], **edit}
    with pytest.raises(Refused, match=match.replace("(", r"\(").replace(")", r"\)")) as raised:
        repo_files(listing(GOOD[0], weights), "org/x@main", SIZES, REQUIRED, Refused)
    assert str(raised.value).startswith("org/x@main: the Hub's file list: model.safetensors ")


@pytest.mark.parametrize("data", [b"{}", b'"x"', b"7"])
def test_a_file_list_that_is_not_a_list_is_refused(data):
    with pytest.raises(Refused, match="expected a list of entries"):
        repo_files(data, "r", SIZES, REQUIRED, Refused)


# --- headers ---------------------------------------------------------------------------------------------
def limit(method, status, headers, file=WEIGHTS, commit=COMMIT):
    return body_limit(method, status, headers, file, commit, "org/x@main", Refused)


def test_the_answers_of_a_download_that_agree_with_the_list_give_their_body_size():
    assert limit("HEAD", 302, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{SHA256}"', "X-Linked-Size": "1000"}) == 0
    assert limit("HEAD", 200, {"X-Repo-Commit": COMMIT, "ETag": BLOB, "Content-Length": "300"}, file=CONFIG) == 0
    assert limit("HEAD", 200, {"ETag": f'W/"{BLOB}"'}, file=CONFIG) == 0
    assert limit("GET", 200, {"Content-Length": "1000", "ETag": '"whatever-the-cdn-says"'}) == 1000
    assert limit("GET", 200, {}) == 1000  # no length: the body is cut at the listed size
    assert limit("GET", 206, {"Content-Range": "bytes 600-999/1000", "Content-Length": "400"}) == 400
    assert limit("GET", 302, {"Content-Length": "0"}) == hub_answers.MAX_MESSAGE_BYTES
    assert limit("GET", 500, {"Content-Length": "20"}) == hub_answers.MAX_MESSAGE_BYTES
    assert limit("GET", 200, {}, file=None, commit=None) == hub_answers.MAX_ANSWER_BYTES  # an API answer


@pytest.mark.parametrize(
    "method, status, headers, match",
    [
        ("HEAD", 302, {"X-Repo-Commit": "../../x"}, "X-Repo-Commit '../../x'; expected the commit"),
        ("HEAD", 404, {"X-Repo-Commit": "b" * 40}, "X-Repo-Commit 'bbbb"),
        ("GET", 200, {"X-Repo-Commit": COMMIT.upper()}, "X-Repo-Commit '0123"),
        ("HEAD", 302, {"X-Linked-Etag": '"../../x"'}, "ETag '\"../../x\"'; expected " + SHA256),
        ("HEAD", 302, {"ETag": BLOB}, "ETag '" + BLOB),  # an LFS file is named after its sha256
        ("HEAD", 302, {"X-Linked-Size": "1001"}, "the Hub announced 1,001 bytes; its file list says 1,000"),
        ("HEAD", 200, {"Content-Length": "5"}, "the Hub announced 5 bytes; its file list says 1,000"),
        ("HEAD", 302, {"X-Linked-Size": "-1"}, "X-Linked-Size '-1'; expected a number of bytes"),
        ("GET", 200, {"Content-Length": str(10 << 30)}, "announced a body of 10,737,418,240 bytes; expected 1,000"),
        ("GET", 200, {"Content-Length": "1e3"}, "Content-Length '1e3'; expected a number of bytes"),
        ("GET", 206, {"Content-Range": "bytes 0-1999/2000"}, "Content-Range 'bytes 0-1999/2000'; expected a range"),
        ("GET", 206, {"Content-Range": "bytes 900-100/1000"}, "expected a range of the 1,000 bytes listed"),
        ("GET", 206, {}, "Content-Range None"),
        ("GET", 200, {"Content-Encoding": "gzip"}, "Content-Encoding 'gzip'; the pull asks for 'identity'"),
        ("GET", 200, {"Content-Range": "x"}, "Content-Range 'x'; expected a range"),
        ("HEAD", 302, {"Location": "file:///etc/passwd"}, "Location 'file:///etc/passwd'; expected an http(s) URL"),
    ],
)
def test_answers_of_a_download_that_disagree_with_the_list_are_refused(method, status, headers, match):
    with pytest.raises(Refused) as raised:
        limit(method, status, headers)
    message = str(raised.value)
    assert message.startswith("org/x@main: model.safetensors: the Hub ") and match in message, message
