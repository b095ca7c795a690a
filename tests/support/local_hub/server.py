"""HTTP front of the local Hub: the routes the ``huggingface_hub`` client calls to push and pull models.

Two origins, as on the real Hub: the API origin (``/api/...``, ``/<repo>/resolve/...``, the LFS batch
endpoint) and a storage origin standing in for the Hub's CDN/S3, where LFS objects are uploaded and
downloaded (``/resolve`` answers a 302 to it, with ``X-Linked-Etag`` / ``X-Linked-Size``). Only the
classic LFS upload protocol is spoken: clients must set ``HF_HUB_DISABLE_XET=1``.
"""

from __future__ import annotations

import base64
import json
import re
import socket
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.local_hub.store import HubError, RepoStore, check_repo_id, repo_not_found, tree_entries

XET_MESSAGE = (
    "This local Hub speaks only the classic LFS upload protocol, not Xet: "
    "set HF_HUB_DISABLE_XET=1 in the client's environment."
)

#: what ``socketserver`` hands a server per request: a TCP server gets the connection's socket
_Request = socket.socket | tuple[bytes, socket.socket]


class _Server(ThreadingHTTPServer):
    """Keeps track of open connections so that ``stop()`` really cuts keep-alive clients off."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, hub: Any, origin: str) -> None:
        self.hub, self.origin = hub, origin
        self.connections: set[_Request] = set()
        super().__init__(address, handler)

    def process_request(self, request: _Request, client_address: Any) -> None:
        self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: _Request) -> None:
        self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        for connection in list(self.connections):
            if not isinstance(connection, socket.socket):  # a datagram server's (data, socket); not served here
                continue
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HubRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    server_version = "timm_vitscratch-local-hub"
    timeout = 60  # an idle keep-alive connection is dropped after this many seconds
    server: _Server
    _status: int  # of the answer sent, for the request log
    _body: Iterator[bytes] | None  # the request body's chunks, once read

    # --- plumbing ------------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in LocalHub.requests instead of printed

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_error(self, error: HubError) -> None:
        headers = {"X-Error-Message": error.message, **error.headers}
        if error.code:
            headers["X-Error-Code"] = error.code
        self._send_json(error.status, {"error": error.message}, headers)

    def _body_chunks(self) -> Iterator[bytes]:
        """The request body (once), with ``Content-Length`` or chunked transfer encoding."""
        if self._body is None:
            self._body = self._read_body()
        return self._body

    def _drain(self) -> None:
        """Read what is left of the request body, so that the connection can carry the next request."""
        for _ in self._body_chunks():
            pass

    def _read_body(self) -> Iterator[bytes]:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                yield self.rfile.read(size)
                self.rfile.readline()
        else:
            remaining = int(self.headers.get("Content-Length") or 0)
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    raise HubError(400, "Request body ended early")
                remaining -= len(chunk)
                yield chunk

    def _json_body(self) -> Any:
        raw = b"".join(self._body_chunks())
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            raise HubError(400, f"Request body is not valid JSON: {err}") from None

    def _authorized(self) -> bool:
        token = self.server.hub.token
        return token is None or self.headers.get("Authorization", "") == f"Bearer {token}"

    def _require_write(self) -> None:
        if not self._authorized():
            raise HubError(401, "Invalid credentials in Authorization header")

    def _readable_repo(self, repo_id: str) -> dict[str, Any]:
        record = self.server.hub.store.repo(repo_id)
        if record["private"] and not self._authorized():
            raise repo_not_found()  # the Hub does not reveal private repositories
        return record

    # --- dispatch ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_POST = do_PUT = do_GET

    def _handle(self) -> None:
        self._status, self._body = 0, None
        url = urlsplit(self.path)
        hub, origin = self.server.hub, self.server.origin
        try:
            fault = hub.fault_for(origin, self.command, url.path)
            if fault is not None:
                fault.respond(self)  # answers itself, or calls route_request and interferes with it
            else:
                self.route_request()
        except HubError as error:
            self._answer_error(error)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as error:  # a bug here must reach the client as a 500, not a hang
            self._answer_error(HubError(500, f"local Hub error: {type(error).__name__}: {error}"))
        finally:
            hub.record(origin, self.command, url.path, self._status, self.headers.get("User-Agent", ""))

    def route_request(self) -> None:
        """Answer the request as the Hub would (what a fault calls when it lets the Hub answer)."""
        url = urlsplit(self.path)
        route = self._route(self.server.origin, url.path)
        if route is None:
            raise HubError(404, f"No route for {self.command} {url.path} on this local Hub")
        handler, args = route
        handler(*args, query=parse_qs(url.query))

    def _answer_error(self, error: HubError) -> None:
        try:
            self._drain()  # unread request bytes would make the close a reset that loses this answer
        except (HubError, ValueError):
            self.close_connection = True
        self._send_error(error)

    def _route(self, origin: str, path: str) -> tuple[Callable[..., None], list[str | None]] | None:
        parts = [unquote(p) for p in path.split("/")[1:]]
        method = self.command
        if origin == "storage":
            if len(parts) == 2 and parts[0] == "lfs" and method in ("GET", "HEAD"):
                return self._download_object, [parts[1]]
            if len(parts) == 2 and parts[0] == "upload" and method == "PUT":
                return self._upload_object, [parts[1]]
            return None
        if parts[:2] == ["api", "agent-harnesses"] and method == "GET":
            return self._agent_harnesses, []
        if parts[:3] == ["api", "repos", "create"] and method == "POST":
            return self._create_repo, []
        if parts[:2] == ["api", "validate-yaml"] and method == "POST":
            return self._validate_yaml, []
        if len(parts) >= 4 and parts[:2] == ["api", "models"]:
            repo_id, rest = f"{parts[2]}/{parts[3]}", parts[4:]
            action = rest[0] if rest else ""
            if method == "GET" and (not rest or (action == "revision" and len(rest) == 2)):
                return self._model_info, [repo_id, rest[1] if rest else None]
            if method == "GET" and action == "tree" and len(rest) >= 2:
                return self._tree, [repo_id, rest[1], "/".join(rest[2:])]
            if method == "GET" and action == "refs" and len(rest) == 1:
                return self._refs, [repo_id]
            if method == "POST" and action == "preupload" and len(rest) == 2:
                return self._preupload, [repo_id, rest[1]]
            if method == "POST" and action == "commit" and len(rest) == 2:
                return self._commit, [repo_id, rest[1]]
            if method == "POST" and action == "paths-info" and len(rest) == 2:
                return self._paths_info, [repo_id, rest[1]]
            if method == "POST" and action == "branch" and len(rest) == 2:
                return self._create_branch, [repo_id, rest[1]]
            if action in ("xet-write-token", "xet-read-token"):
                return self._no_xet, []
            return None
        if len(parts) == 6 and parts[1].endswith(".git") and parts[2:] == ["info", "lfs", "objects", "batch"]:
            return self._lfs_batch, [f"{parts[0]}/{parts[1][:-4]}"]
        if len(parts) >= 5 and parts[2] == "resolve" and method in ("GET", "HEAD"):
            return self._resolve, [f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])]
        return None

    # --- API routes ----------------------------------------------------------------------------
    def _agent_harnesses(self, query: dict) -> None:
        self._send_json(200, {"standardEnvVars": [], "harnesses": {}})  # no AI-agent detection here

    def _no_xet(self, query: dict) -> None:
        raise HubError(501, XET_MESSAGE)

    def _create_repo(self, query: dict) -> None:
        self._require_write()
        body = self._json_body()
        if body.get("type", "model") != "model":
            raise HubError(400, f"This local Hub stores model repos only, not {body.get('type')!r}")
        if not body.get("organization"):
            raise HubError(400, "Give the repo id as 'namespace/name': this local Hub has no user accounts")
        repo_id = f"{body['organization']}/{body.get('name', '')}"
        check_repo_id(repo_id)
        private = body.get("visibility") == "private" or bool(body.get("private"))
        url = f"{self.server.hub.url}/{repo_id}"
        try:
            self.server.hub.store.create_repo(repo_id, private)
        except HubError as error:
            if error.status == 409:
                self._send_json(409, {"error": error.message, "url": url}, {"X-Error-Message": error.message})
                return
            raise
        self._send_json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self, query: dict) -> None:
        import yaml  # a dependency of huggingface_hub

        content = self._json_body().get("content", "")
        errors = []
        if content.startswith("---"):
            front = content.split("---", 2)[1] if content.count("---") >= 2 else None
            try:
                if front is None or not isinstance(yaml.safe_load(front) or {}, dict):
                    raise yaml.YAMLError("the metadata block is not a mapping")
            except yaml.YAMLError as err:
                errors.append({"message": f"Invalid YAML metadata in README.md: {err}"})
        self._send_json(400 if errors else 200, {"errors": errors, "warnings": []})

    def _model_info(self, repo_id: str, revision: str | None, query: dict) -> None:
        hub = self.server.hub
        record = self._readable_repo(repo_id)
        commit = hub.store.resolve(repo_id, revision)
        with_blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for name, entry in sorted(commit["files"].items()):
            sibling: dict[str, Any] = {"rfilename": name}
            if with_blobs:
                sibling.update(size=entry["size"], blobId=entry["oid"])
                if entry["lfs"]:
                    sibling["lfs"] = {
                        "sha256": entry["lfs"]["sha256"],
                        "size": entry["lfs"]["size"],
                        "pointerSize": entry["lfs"]["pointer_size"],
                    }
            siblings.append(sibling)
        card = _card_data(hub.store, commit)
        self._send_json(
            200,
            {
                "_id": commit["id"][:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": commit["id"],
                "lastModified": commit["date"],
                "createdAt": record["created_at"],
                "private": record["private"],
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": list(card.get("tags") or []),
                "pipeline_tag": card.get("pipeline_tag"),
                "library_name": card.get("library_name"),
                "cardData": card or None,
                "siblings": siblings,
            },
        )

    def _tree(self, repo_id: str, revision: str, path: str, query: dict) -> None:
        self._readable_repo(repo_id)
        commit = self.server.hub.store.resolve(repo_id, revision)
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        self._send_json(200, tree_entries(commit, path, recursive))

    def _paths_info(self, repo_id: str, revision: str, query: dict) -> None:
        """The entries of the given paths at a revision (what ``CommitOperationCopy`` asks before a copy)."""
        self._readable_repo(repo_id)
        commit = self.server.hub.store.resolve(repo_id, revision)
        paths = set(parse_qs(b"".join(self._body_chunks()).decode()).get("paths", []))
        self._send_json(200, [e for e in tree_entries(commit, "", recursive=True) if e["path"] in paths])

    def _refs(self, repo_id: str, query: dict) -> None:
        record = self._readable_repo(repo_id)
        branches = [
            {"name": name, "ref": f"refs/heads/{name}", "targetCommit": commit}
            for name, commit in sorted(record["refs"].items())
        ]
        self._send_json(200, {"branches": branches, "converts": [], "tags": []})

    def _create_branch(self, repo_id: str, branch: str, query: dict) -> None:
        self._require_write()
        self._readable_repo(repo_id)
        self.server.hub.store.create_branch(repo_id, branch, self._json_body().get("startingPoint"))
        self._send_json(200, {})

    def _preupload(self, repo_id: str, revision: str, query: dict) -> None:
        self._require_write()
        self._readable_repo(repo_id)
        if query.get("create_pr"):
            raise HubError(501, "This local Hub does not support pull requests")
        store = self.server.hub.store
        commit = store.resolve(repo_id, revision)
        files = []
        for item in self._json_body().get("files", []):
            sample = base64.b64decode(item.get("sample", ""))
            mode = store.upload_mode(commit, item["path"], int(item.get("size", 0)), sample)
            existing = commit["files"].get(item["path"])
            remote_oid = None
            if existing is not None:  # lets the client skip unchanged files, as the Hub does
                remote_oid = existing["lfs"]["sha256"] if existing["lfs"] else existing["oid"]
            files.append({"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": remote_oid})
        self._send_json(200, {"files": files, "commitOid": commit["id"]})

    def _commit(self, repo_id: str, revision: str, query: dict) -> None:
        self._require_write()
        self._readable_repo(repo_id)
        if query.get("create_pr"):
            raise HubError(501, "This local Hub does not support pull requests")
        lines = []
        for raw in b"".join(self._body_chunks()).splitlines():
            if raw.strip():
                try:
                    lines.append(json.loads(raw))
                except json.JSONDecodeError as err:
                    raise HubError(400, f"Commit payload is not NDJSON: {err}") from None
        commit_id = self.server.hub.store.commit(repo_id, revision, lines)
        self._send_json(
            200,
            {
                "success": True,
                "commitOid": commit_id,
                "pullRequestUrl": None,
                "commitUrl": f"{self.server.hub.url}/{repo_id}/commit/{commit_id}",
            },
        )

    def _lfs_batch(self, repo_id: str, query: dict) -> None:
        self._require_write()
        self._readable_repo(repo_id)
        body = self._json_body()
        if body.get("operation") != "upload":
            raise HubError(400, "This local Hub serves downloads through /resolve, not the LFS batch API")
        store, objects = self.server.hub.store, []
        for item in body.get("objects", []):
            obj = {"oid": item["oid"], "size": int(item["size"]), "authenticated": True}
            if not store.has_lfs_object(item["oid"], obj["size"]):
                obj["actions"] = {
                    "upload": {"href": f"{self.server.hub.storage_url}/upload/{item['oid']}", "header": {}}
                }
            objects.append(obj)
        self._send_json(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def _resolve(self, repo_id: str, revision: str, path: str, query: dict) -> None:
        store = self.server.hub.store
        self._readable_repo(repo_id)
        commit = store.resolve(repo_id, revision)
        entry = store.read_entry(commit, path)
        headers = {"X-Repo-Commit": commit["id"], "ETag": f'"{entry["oid"]}"'}
        if entry["lfs"]:
            sha256 = entry["lfs"]["sha256"]
            headers.update(
                {
                    "X-Linked-Etag": f'"{sha256}"',
                    "X-Linked-Size": str(entry["lfs"]["size"]),
                    "Location": f"{self.server.hub.storage_url}/lfs/{sha256}",
                }
            )
            self.send_response(302)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._send_file(store.file_path(entry), headers)

    # --- storage routes ------------------------------------------------------------------------
    def _download_object(self, sha256: str, query: dict) -> None:
        store = self.server.hub.store
        if not store.has_lfs_object(sha256):
            raise HubError(404, "Object not found")
        self._send_file(store.lfs_object(sha256), {"ETag": f'"{sha256}"'})

    def _upload_object(self, sha256: str, query: dict) -> None:
        self.server.hub.store.put_lfs_object(sha256, self._body_chunks())
        self._send_json(200, {})

    def _send_file(self, path: Any, headers: dict[str, str]) -> None:
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        wanted = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if wanted and (wanted.group(1) or wanted.group(2)):
            if wanted.group(1):
                start = int(wanted.group(1))
                end = min(int(wanted.group(2)), size - 1) if wanted.group(2) else size - 1
            else:  # suffix range: the last N bytes
                start = max(size - int(wanted.group(2)), 0)
            if start >= size or start > end:
                raise HubError(
                    416,
                    f"Range {self.headers['Range']} not satisfiable for {size} bytes",
                    headers={"Content-Range": f"bytes */{size}"},
                )
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{size}"}
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1 if size else 0))
        self.end_headers()
        if self.command == "HEAD":
            return
        with open(path, "rb") as handle:
            handle.seek(start)
            remaining = end - start + 1 if size else 0
            while remaining > 0:
                chunk = handle.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                self.wfile.write(chunk)
                remaining -= len(chunk)


def _card_data(store: RepoStore, commit: dict[str, Any]) -> dict[str, Any]:
    """The YAML metadata block of the commit's README.md (what the Hub calls cardData)."""
    entry = commit["files"].get("README.md")
    if entry is None or entry["lfs"]:
        return {}
    text = store.file_path(entry).read_text(errors="replace")
    if not text.startswith("---") or text.count("---") < 2:
        return {}
    import yaml

    try:
        data = yaml.safe_load(text.split("---", 2)[1])
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}
