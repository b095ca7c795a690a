"""Push and pull model directories through the Hugging Face Hub.

Built on ``huggingface_hub``'s public API (``HfApi.create_repo`` / ``create_branch`` / ``create_commit`` /
``model_info``; for a pull, the revision lookup and the file list of :mod:`.listing`, whose answers pass the
gate, and ``hf_hub_download`` one file at a time within the bounds of :mod:`.transfer`) and timm's hub helpers (``save_config_for_hf`` through :mod:`.model_dir`, the
model-card layout). Every request names this library in its user-agent. ``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HOME`` /
``HF_HUB_CACHE`` and ``HF_HUB_OFFLINE`` act as they do for every ``huggingface_hub`` client. Remote failures
surface as ``huggingface_hub``'s own exceptions or its HTTP library's transport errors (told to people by
:mod:`.failures`); a model directory that is not what it claims raises :class:`ModelDirectoryError`.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import timm
from huggingface_hub import (
    CommitInfo,
    CommitOperationAdd,
    CommitOperationCopy,
    CommitOperationDelete,
    HfApi,
    ModelInfo,
    hf_hub_download,
)
from huggingface_hub.constants import DEFAULT_REVISION
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import httpx, validate_repo_id
from timm.models import split_model_name_tag
from torch import nn

from ..atomic_replace import install, staged, starting_point
from ..errors import ModelArgsError, ModelDirectoryError
from ..files import PathLike, atomic_write, sha256_file
from ..gate.config_fields import file_pretrained_cfg
from ..gate.files import MAX_TEXT_BYTES
from ..gate.hub_answers import COMMIT_ID, HubFile, commit_id
from ..gate.hub_config import read_hub_config
from ..licenses import UNKNOWN, check_license_id, known_license, license_files, write_license_files
from ..model_dir import (
    CONFIG_NAME,
    METADATA_KEY,
    WEIGHTS_NAME,
    check_label_count,
    check_model_directory,
    read_config,
    read_label_names,
    recorded_facts,
    save_model_directory,
    weights_license,
    with_label_names,
    with_license,
    write_config,
)
from ..models.build import build_on_meta
from ..models.config_file import check_config_file
from ..models.pretrained_cfgs import unknown_model_message
from ..models.registry import register_hub_weights
from ..models.variants import ARCHITECTURES
from ..models.vision_transformer import VisionTransformer
from ..version import __version__
from .cache import (
    cached_snapshot,
    forget,
    forget_tree_listing,
    record_revision,
    snapshot_dir,
)
from .failures import HubAnswerError
from .listing import LIBRARY_NAME, PULL_REQUIRED, README_NAME, damaged_files, listing
from .model_card import model_card
from .transfer import Guard, TransferLimits, guarded

REPO_FILES = (CONFIG_NAME, WEIGHTS_NAME, README_NAME)


def hub_api(token: str | None = None) -> HfApi:
    """The ``HfApi`` every call here goes through: ``HF_ENDPOINT`` and ``HF_TOKEN`` as usual, and our user-agent."""
    return HfApi(token=token, library_name=LIBRARY_NAME, library_version=__version__)


# --- push ------------------------------------------------------------------------------------------
def push(
    source: PathLike,
    repo_id: str,
    revision: str | None = None,
    private: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    labels: PathLike | Sequence[str] | None = None,
    replace_card: bool = False,
    strict: bool = False,
    license: str | None = None,
) -> Any:
    """Push a model directory, or a registered model name (``scratch_vit_b16[.tag]``), to ``repo_id``.

    The commit holds ``config.json`` (with ``vitscratch.sha256``), ``model.safetensors`` and a model card
    ``README.md``, and nothing else of the directory; weights whose license requires its text to travel with
    them (the DINOv3 License: :mod:`timm_vitscratch.licenses`) also get that text as ``LICENSE.md``, always the
    package's own copy (a ``LICENSE.md`` in the directory is not read). Each of the directory's files must be a
    regular file in the directory:
    a symlink, FIFO or device is refused by name before any request. Each is opened once (not following a
    link) and copied into a private staging directory; the checks run on those copies, and those bytes are
    what is uploaded, whatever happens to the directory meanwhile. After the commit, the Hub must report
    the sha256 (or git blob id) of every file sent; if it reports other bytes, the commit is reverted by a
    second one (restoring what the branch held, deleting what it did not) and the push fails.

    A README in the directory is pushed as it is; without one, a model card is generated, unless the repo
    already has a ``README.md`` at ``revision``, which is kept (``replace_card=True`` replaces it with the
    generated card). ``revision`` is a branch, created from ``main`` if missing; ``private`` applies when
    the repo is created. ``labels`` (a list, a file with one name per line, or an image folder's class
    directories) become the pushed ``config.json``'s ``label_names``, one per class; the source directory is
    left as it is. Weights holding NaN or Inf are pushed with a warning, or refused with ``strict=True``.
    Weights whose license is unknown (``config.json`` records ``unknown``, or none) are refused before any
    request unless ``license`` (a license id) names it; the pushed config and card then record that id. A
    ``license`` that differs from the one the directory records is refused (a random init has none to keep).
    Returns ``huggingface_hub``'s ``CommitInfo`` (``.oid`` is the commit id). When the branch already holds
    these bytes, nothing is committed: the return is a :class:`NothingToPush` (a ``CommitInfo``) whose ``.oid``
    is the branch's commit.
    """
    if revision is not None and COMMIT_ID.fullmatch(revision):
        raise ValueError(f"--revision {revision!r} looks like a commit id: push to a branch name")
    if isinstance(labels, (str, os.PathLike)):  # a file or an image folder; a list or tuple holds the names
        try:  # before anything is built: a missing file is the first thing said
            labels = read_label_names(labels)
        except ModelDirectoryError as err:
            raise ModelDirectoryError(f"--labels: {err}") from None
    with tempfile.TemporaryDirectory(prefix="vitscratch-push-") as tmp:
        staging = Path(tmp)  # created 0700: the copies in it are this process's own
        config, model, card = _stage(source, staging, labels, strict)
        licensed = _licensed(config, license, str(source))
        if licensed is not None:
            config = licensed
            write_config(staging, config)
        api = hub_api(token)
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        if revision not in (None, DEFAULT_REVISION):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        head = api.model_info(repo_id, revision=revision, files_metadata=True)  # the branch before the push
        parent = _commit_id(head.sha, repo_id, revision)
        held = {f.rfilename for f in head.siblings or ()}
        if card is None and (replace_card or README_NAME not in held):
            card = model_card(config, model, repo_id).encode("utf-8")
        contents = {CONFIG_NAME: (staging / CONFIG_NAME).read_bytes(), **license_files(weights_license(config))}
        if card is not None:
            contents[README_NAME] = card
        sent = {name: _digests(io.BytesIO(data)) for name, data in contents.items()}
        with open(staging / WEIGHTS_NAME, "rb") as weights:
            sent[WEIGHTS_NAME] = _digests(weights)
        if not _differences(head, sent):  # no empty commit, and no upload of what the Hub holds
            return NothingToPush(
                commit_url=f"{api.endpoint}/{repo_id}/commit/{parent}",
                commit_message="",
                commit_description="",
                oid=parent,
                _endpoint=api.endpoint,
            )
        operations = [CommitOperationAdd(name, data) for name, data in contents.items()]
        # the private copy, by path: huggingface_hub then shows its upload progress
        operations.insert(1, CommitOperationAdd(WEIGHTS_NAME, staging / WEIGHTS_NAME))
        info = api.create_commit(
            repo_id,
            operations,
            revision=revision,
            parent_commit=parent,
            commit_message=commit_message or f"Upload {config['architecture']} with timm_vitscratch",
        )
    _verify_commit(api, repo_id, revision, _commit_id(info.oid, repo_id, revision), parent, held, sent)
    return info


class NothingToPush(CommitInfo):
    """What :func:`push` returns when the branch already holds the files: no commit; ``.oid`` is the branch's."""


def _commit_id(value: Any, repo_id: str, revision: str | None) -> str:
    """A commit id the Hub answered, when it is one (the gate's check)."""
    where = f"{repo_id}@{revision or DEFAULT_REVISION}: the commit id the Hub answered"
    return commit_id(value, where, ModelDirectoryError)


#: what the Hub reports of a file: its sha256 (an LFS file's ``lfs.sha256``) or its git blob id (the others)
Digests = tuple[int, str, str]


def _digests(handle: IO[bytes]) -> Digests:
    """Size, sha256 and git blob id (sha1 of ``blob <size>\\0`` + bytes) of what ``handle`` reads, read once."""
    sha256 = hashlib.sha256()
    size = 0
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        sha256.update(chunk)
        size += len(chunk)
    handle.seek(0)
    blob = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    for chunk in iter(lambda: handle.read(1 << 20), b""):
        blob.update(chunk)
    return size, sha256.hexdigest(), blob.hexdigest()


def _verify_commit(
    api: HfApi, repo_id: str, revision: str | None, commit: str, parent: str, held: set[str], sent: dict[str, Digests]
) -> None:
    """Refuse a commit whose files, as the Hub reports them, are not the bytes sent: revert it first."""
    wrong = _reported_mismatches(api, repo_id, commit, sent)
    if not wrong:
        return
    branch = revision or DEFAULT_REVISION
    what = f"{repo_id}@{commit}: the Hub reports {'; '.join(wrong)}"
    try:
        undone = _revert(api, repo_id, branch, commit, parent, held, sorted(sent))
    except Exception as err:  # the push has failed already: say that undoing it failed too, and how
        raise ModelDirectoryError(
            f"{what}; reverting the commit failed too ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
            f": {branch} holds the commit, revert it by hand"
        ) from None
    raise ModelDirectoryError(f"{what}; the commit was reverted by {undone}, so {branch} holds what it held before")


def _reported_mismatches(api: HfApi, repo_id: str, commit: str, sent: dict[str, Digests]) -> list[str]:
    """Each file of ``sent`` that the Hub, at ``commit``, reports with other bytes (or not at all)."""
    return _differences(api.model_info(repo_id, revision=commit, files_metadata=True), sent)


def _differences(info: ModelInfo, sent: dict[str, Digests]) -> list[str]:
    """Each file of ``sent`` that ``info`` (asked with ``files_metadata``) reports with other bytes, or not at all."""
    reported = {f.rfilename: f for f in info.siblings or ()}
    wrong = []
    for name, (size, sha256, blob) in sent.items():
        entry = reported.get(name)
        if entry is None:
            wrong.append(f"no {name}, which the push sent")
        elif entry.lfs is not None and (entry.lfs.sha256, entry.lfs.size) != (sha256, size):
            wrong.append(f"{name} with sha256 {entry.lfs.sha256}, but the push sent {sha256}")
        elif entry.lfs is None and entry.blob_id != blob:
            wrong.append(f"{name} with git blob id {entry.blob_id}, but the push sent {blob}")
    return wrong


def _revert(api: HfApi, repo_id: str, branch: str, commit: str, parent: str, held: set[str], names: list[str]) -> str:
    """Undo ``commit`` on ``branch`` with a new commit on top of it: each of ``names`` back as ``parent`` held
    it (copied on the Hub from there), or deleted where ``parent`` did not hold it. Returns the new commit id."""
    operations: list[CommitOperationCopy | CommitOperationDelete] = [
        CommitOperationCopy(name, name, src_revision=parent) if name in held else CommitOperationDelete(name)
        for name in names
    ]
    info = api.create_commit(
        repo_id,
        operations,
        revision=branch,
        parent_commit=commit,
        commit_message=f"Revert {commit[:12]}: the Hub holds other bytes than timm_vitscratch pushed",
    )
    return info.oid


def _stage(
    source: PathLike, staging: Path, labels: Sequence[str] | None, strict: bool = False
) -> tuple[dict[str, Any], nn.Module, bytes | None]:
    """Make the files to push in ``staging`` (``config.json``, ``model.safetensors``), checked there; returns
    the config, the model on meta, and the directory's README (None: none there).

    A directory's files are each opened once, not following links, refused unless regular, and copied into
    ``staging`` through that descriptor; the model-directory check then runs on the copies, so what is
    checked is what is uploaded.
    """
    path = Path(source)
    if path.is_dir():
        handles: dict[str, IO[bytes]] = {}
        try:
            for name in REPO_FILES:  # by name, before anything is read
                if os.path.lexists(path / name):
                    handles[name] = _open_regular(path, name)
            card = handles[README_NAME].read(MAX_TEXT_BYTES + 1) if README_NAME in handles else None
            for name in (CONFIG_NAME, WEIGHTS_NAME):
                if name in handles:
                    with open(staging / name, "xb") as copy:
                        shutil.copyfileobj(handles[name], copy, 1 << 20)
        finally:
            for handle in handles.values():
                handle.close()
        if card is not None and len(card) > MAX_TEXT_BYTES:
            raise ModelDirectoryError(f"{path}: {README_NAME} is larger than {MAX_TEXT_BYTES:,} bytes")
        try:
            config, model = check_model_directory(staging, require_sha256=False, label=str(path), strict=strict)
        except ModelDirectoryError as err:  # name the user's directory, not the private copy
            raise ModelDirectoryError(str(err).replace(str(staging), str(path))) from None
        if labels is not None:
            config = with_label_names(config, _checked_labels(labels, model, str(path)))
        config.setdefault(METADATA_KEY, {}).setdefault("sha256", sha256_file(staging / WEIGHTS_NAME))
        write_config(staging, config)
        return config, model, card
    name, tag = split_model_name_tag(str(source))
    if name not in ARCHITECTURES:
        raise ModelDirectoryError(
            f"{str(source)!r} is neither a model directory nor a registered model name "
            f"({', '.join(ARCHITECTURES)}, optionally with a .tag)"
        )
    # the label count is checked on meta, before pretrained weights are downloaded for nothing
    names = _checked_labels(labels, build_on_meta(str(source)), str(source)) if labels is not None else None
    model = timm.create_model(str(source), pretrained=bool(tag))
    save_model_directory(
        model,
        staging,
        source={"format": "timm_vitscratch", "model": str(source), "weights": "pretrained" if tag else "random init"},
        label_names=names,
    )
    config, model = check_model_directory(staging, label=str(source))
    return config, model, None


def _licensed(config: dict[str, Any], given: str | None, label: str) -> dict[str, Any] | None:
    """The config to push when ``given`` (``--license``) records the weights' license; None: push ``config`` as
    it is. Weights whose license is unknown are refused unless ``given`` names it, and ``given`` may not
    contradict a license the config records."""
    cfg = config.get("pretrained_cfg")
    if not isinstance(cfg, dict) or recorded_facts(config) is not cfg:  # a random init: its cfg is not its own
        return None
    recorded = cfg.get("license")
    if given is None:
        if recorded is None or (isinstance(recorded, str) and recorded.strip().lower() == UNKNOWN):
            raise ModelDirectoryError(
                f"{label}: the weights' license is unknown (config.json records {recorded or 'none'}); a push "
                "publishes weights under a license: pass --license ID naming the one they are under (nothing "
                "was sent)"
            )
        return None
    try:
        chosen = check_license_id(given)
    except ValueError as err:
        raise ModelDirectoryError(str(err)) from None
    known = known_license(recorded)
    if known is not None and known != chosen:
        raise ModelDirectoryError(
            f"{label}: config.json records the license {known}; --license {chosen} disagrees (--license names "
            "the license of weights whose license is unknown; nothing was sent)"
        )
    return with_license(config, chosen)


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_unless_regular(directory: Path, name: str, mode: int | None = None) -> None:
    """A file push sends must be a regular file in the directory itself (no link out, no special file)."""
    if mode is None:
        try:
            mode = os.lstat(directory / name).st_mode
        except FileNotFoundError:
            return  # check_model_directory says what a model directory lacks
    if not stat.S_ISREG(mode):
        kind = next((what for test, what in _KINDS if test(mode)), "not a file")
        raise ModelDirectoryError(
            f"{directory}: {name} is {kind}, not a regular file; push sends only the regular "
            f"files {', '.join(REPO_FILES)} of the directory (copy the file in instead)"
        )


def _open_regular(directory: Path, name: str) -> IO[bytes]:
    """Open a file of the directory to read it, refusing what is not a regular file in it when it is opened."""
    try:  # O_NOFOLLOW: a link put there since the check is not followed; O_NONBLOCK: a FIFO does not hang
        fd = os.open(directory / name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        if err.errno == errno.ELOOP:
            _refuse_unless_regular(directory, name)
        raise
    try:
        _refuse_unless_regular(directory, name, mode=os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _checked_labels(labels: Sequence[str], model: nn.Module, label: str) -> list[str]:
    if not isinstance(model, VisionTransformer):  # a model directory's architecture is always one of ours
        raise TypeError(f"{label}: expected a scratch VisionTransformer, got {type(model).__name__}")
    try:
        return check_label_count(labels, model.num_classes)
    except ModelDirectoryError as err:
        raise ModelDirectoryError(f"{label}: --labels: {err}") from None


# --- pull ------------------------------------------------------------------------------------------
#: the files of a model directory a pull takes from the repo, and the most bytes each may hold
def pull(
    repo_id: str,
    out_dir: PathLike,
    revision: str | None = None,
    token: str | None = None,
    force: bool = False,
    strict: bool = False,
    deadline_s: float | None = None,
    stall_s: float | None = None,
    stall_bytes: int | None = None,
    online: bool = False,
) -> Path:
    """Download ``repo_id`` at ``revision`` (branch or commit id) and install it into ``out_dir``.

    The pull asks the Hub for the revision's commit id and the file list at that commit, and checks both
    (:mod:`timm_vitscratch.gate.hub_answers`: a commit id of 40 lowercase hex digits, sizes within what a
    model directory may hold, well-formed hashes) before a path is built from them. Then it downloads
    ``config.json``, ``model.safetensors`` and ``README.md`` (if listed) one by one at that commit, through
    the Hugging Face cache (so ``HF_HUB_OFFLINE=1`` works after one pull), each answer's headers checked
    against the list and each body stopped at the size listed (:mod:`.transfer`). The files are copied into a
    staging directory beside ``out_dir``, checked (registered architecture, tensors fit the config, sha256
    equals ``config.json``'s ``vitscratch.sha256``), given the text of a license that must travel with the
    weights (``LICENSE.md``, from the package's own copy when the config records such a license: a license
    file on the Hub is never downloaded) and swapped into place in one atomic step (``install``):
    on any failure, or a kill, ``out_dir`` is left as it was. A non-empty ``out_dir`` is replaced only with
    ``force``. Weights holding NaN or Inf are installed with a warning, or refused with ``strict=True``.
    Returns ``out_dir`` resolved (an absolute path).

    Time: the pull's network work has ``deadline_s`` seconds in all (default 3600), and fails when the Hub
    sends less than ``stall_bytes`` bytes of a body (or the rest of it; default 65,536) within ``stall_s``
    seconds (default 30), which also caps every single wait. The environment variables
    ``VITSCRATCH_PULL_DEADLINE_S``, ``VITSCRATCH_PULL_STALL_S`` and ``VITSCRATCH_PULL_STALL_BYTES`` set them
    where the arguments are not given. A refused answer, a stalled or overlong download raises
    :class:`~timm_vitscratch.hub.failures.HubAnswerError` (a ``ValueError``) naming the repo and the problem.

    Where the Hub cannot be asked (no connection, a time-out, an HTTP error, ``HF_HUB_OFFLINE=1``), the
    revision's snapshot in the local cache is installed, as huggingface_hub would use it, and a
    :class:`HubUnreachableWarning` says so: which commit, and when the cache got it. With ``online=True`` the
    pull refuses instead (a ``ConnectionError``; the Hub's own HTTP error as it is).

    Weights that arrive damaged (their sha256 is not the Hub's LFS sha256) are downloaded once more;
    if they are damaged again the pull fails and the damaged copy is removed from the cache.
    Pulls into one ``out_dir`` may run at once: one installs; the others end quietly when it installed the
    same files, and with an error otherwise. A pull cleans up what an earlier, killed pull left beside
    ``out_dir``; a killed download's partial file in the cache is huggingface_hub's (``hf cache prune``).
    """
    limits = TransferLimits.resolve(deadline_s, stall_s, stall_bytes)
    out_dir = Path(out_dir).resolve()  # "." has no name to stage beside, and no parent to stage in
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir} exists and is not a directory")
    # a missing parent holds nothing to recover (nothing was there: None); it is created after the download.
    # Where the pull starts from is fixed here: a pull beside this one that installs first must be seen as
    # a concurrent writer (same files: nothing to do), not as the state this pull started from.
    started = starting_point(out_dir) if out_dir.parent.is_dir() else None
    if _occupied(out_dir) and not force:
        raise FileExistsError(f"{out_dir} is not empty; pull into a new directory or pass force=True")
    label = f"{repo_id}@{revision or DEFAULT_REVISION}"
    snapshot = _download(repo_id, revision, token, label, limits, online)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with staged(out_dir, directory=True) as staging:
        for name in REPO_FILES:
            if (snapshot / name).is_file():
                with open(snapshot / name, "rb") as src, atomic_write(staging / name) as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        config, _ = check_model_directory(staging, require_sha256=True, label=label, strict=strict)
        write_license_files(staging, weights_license(config))
        install(staging, out_dir, started, only_into_empty=not force)
    return out_dir


def _occupied(directory: Path) -> bool:
    return directory.is_dir() and any(directory.iterdir())


def _download(
    repo_id: str,
    revision: str | None,
    token: str | None,
    label: str,
    limits: TransferLimits | None = None,
    online: bool = False,
) -> Path:
    """The repo's files in the Hugging Face cache, each the bytes the Hub lists.

    Weights whose sha256 is not the one ``config.json`` records (or a ``config.json`` that does not say) are
    damaged, on the way or in the cache, or really what the repo holds: the hashes of the Hub's file list
    tell which. Damaged files are downloaded once more; damaged again, they are removed from the cache and
    the pull fails. Otherwise (or offline, where the Hub cannot be asked) :func:`check_model_directory`
    says what is wrong. Where the Hub cannot be reached (offline, a connection or server error), the
    cached snapshot of the revision is used, as huggingface_hub's ``snapshot_download`` does, and said
    (:class:`HubUnreachableWarning`); with ``online`` the pull fails instead.
    """
    validate_repo_id(repo_id)
    revision = revision or DEFAULT_REVISION
    with guarded(label, limits or TransferLimits.resolve()) as guard:
        try:
            commit, files = listing(repo_id, revision, token, label, guard)
        except (httpx.ConnectError, httpx.TimeoutException, OfflineModeIsEnabled, HfHubHTTPError) as error:
            if isinstance(error, (httpx.ProxyError, RevisionNotFoundError)):
                raise
            if online:
                _refuse_the_cache(label, error)
            return _cached(repo_id, revision, label, error)
        snapshot = _fetch(repo_id, commit, files, token, guard)
        record_revision(repo_id, revision, commit)
        if _weights_as_recorded(snapshot):
            return snapshot
        damaged = damaged_files(snapshot, files)
        if damaged:
            _fetch(repo_id, commit, {name: files[name] for name in damaged}, token, guard, force_download=True)
            damaged = damaged_files(snapshot, files)
    if damaged:
        forget(repo_id, snapshot, damaged)  # never leave damaged bytes in the cache under the Hub's hash
        name, (algorithm, expected, actual) = next(iter(damaged.items()))
        raise ModelDirectoryError(
            f"{label}: {name} arrived damaged twice: the Hub says its {algorithm} is {expected}, the bytes "
            f"received have {actual} (a proxy or the network altering the download?); nothing was installed"
        )
    return snapshot


def _fetch(
    repo_id: str, commit: str, files: dict[str, HubFile], token: str | None, guard: Guard, force_download: bool = False
) -> Path:
    """Download ``files`` at ``commit`` one by one, each through the guard; returns the snapshot folder."""
    snapshot = snapshot_dir(repo_id, commit)
    forget_tree_listing(repo_id, commit)
    for name, listed in files.items():
        with guard.download(listed, commit):
            path = hf_hub_download(
                repo_id,
                name,
                revision=commit,
                token=token,
                force_download=force_download,
                etag_timeout=guard.timeout(),
                library_name=LIBRARY_NAME,
                library_version=__version__,
            )
        if Path(path) != snapshot / name:  # what the checked answers allow, and nothing else
            raise HubAnswerError(f"{guard.label}: huggingface_hub put {name} at {path}, not in {snapshot}")
    return snapshot


class HubUnreachableWarning(UserWarning):
    """A pull installed the local cache's copy of the revision because the Hub could not be asked."""


def _not_asked(error: Exception) -> str:
    """Why the Hub was not asked, in a few words."""
    if isinstance(error, OfflineModeIsEnabled):
        return "HF_HUB_OFFLINE=1 is set"
    lines = str(error).strip().splitlines()
    return f"the Hub at {hub_api().endpoint} could not be asked ({type(error).__name__}: {lines[0] if lines else ''})"


def _refuse_the_cache(label: str, error: Exception) -> None:
    """``online``: the Hub's own HTTP answer as it is; otherwise that the Hub was not asked."""
    if isinstance(error, HfHubHTTPError):
        raise error
    raise ConnectionError(
        f"{label}: {_not_asked(error)}, and online=True asks for the Hub itself: the local cache was not used, "
        "nothing was installed"
    ) from error


def cached_at(snapshot: Path) -> str:
    """When the cache got ``snapshot``: the newest of its entries' own times (a link's, not its blob's), in UTC."""
    newest = max(entry.lstat().st_mtime for entry in [snapshot, *snapshot.iterdir()])
    return datetime.fromtimestamp(newest, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cached(repo_id: str, revision: str, label: str, error: Exception) -> Path:
    """The cached snapshot to use when the Hub cannot be asked (said in a warning), or the error that says why
    there is none."""
    snapshot = cached_snapshot(repo_id, revision, PULL_REQUIRED, HubAnswerError)
    if snapshot is not None:
        warnings.warn(
            HubUnreachableWarning(
                f"{label}: {_not_asked(error)}; installing the local cache's copy instead: commit {snapshot.name}, "
                f"cached {cached_at(snapshot)}"
            ),
            stacklevel=4,
        )
        return snapshot
    if isinstance(error, (RepositoryNotFoundError, GatedRepoError)) or (
        isinstance(error, HfHubHTTPError) and error.response is not None and error.response.status_code == 401
    ):
        raise error
    raise LocalEntryNotFoundError(
        f"{label}: the Hub could not be asked ({type(error).__name__}) and the local cache holds no snapshot "
        "of this revision: cannot find the appropriate snapshot folder"
    ) from error


def _weights_as_recorded(snapshot: Path) -> bool:
    """Whether the weights have the sha256 that ``config.json`` records."""
    try:
        expected = read_config(snapshot, contained=False)[METADATA_KEY]["sha256"]
    except (OSError, ValueError, LookupError, TypeError):
        return False
    weights = snapshot / WEIGHTS_NAME
    return weights.is_file() and sha256_file(weights) == expected


# --- pretrained tags -------------------------------------------------------------------------------
def register_tag_from_hub(
    model_tag: str, repo_id: str, revision: str | None = None, token: str | None = None, default: bool = False
) -> str:
    """Register ``"variant.tag"`` for the weights in ``repo_id``, pinned to the revision's commit.

    Reads the repo's ``config.json`` at that commit through the gate (bounded JSON) and checks it as every
    route does before anything is built or fetched: the architecture must be ``variant``, its model arguments
    inside the allow-list, and its ``pretrained_cfg`` may set only data fields (classes, input size,
    mean/std, labels, license ...): a field that would choose other weights (``hf_hub_filename``, ``file``,
    ``url`` ...) is refused by name. Afterwards ``timm.create_model("variant.tag", pretrained=True)`` loads
    the repo's ``model.safetensors`` at that commit. Returns the registered ``hf_hub_id``
    (``ORG/NAME@commit``).
    """
    variant, _ = split_model_name_tag(model_tag)
    if variant not in ARCHITECTURES:
        raise ValueError(f"{unknown_model_message(variant)} (in {model_tag!r})")
    commit, config = read_hub_config(repo_id, revision, ModelDirectoryError, token=token)
    label = f"{repo_id}@{commit}"
    try:
        architecture, _ = check_config_file(config, f"{label}: {CONFIG_NAME}")
    except ModelArgsError as err:
        raise ModelDirectoryError(str(err)) from None
    if architecture != variant:
        raise ModelDirectoryError(f"{label} holds {architecture!r} weights, not {variant!r}")
    defaults = ARCHITECTURES[variant]
    model_args = config.get("model_args") or {}
    differing = {k: v for k, v in model_args.items() if k in defaults and defaults[k] != v}
    if differing:
        warnings.warn(
            f"{repo_id} was saved with {differing}, which differ from {variant}'s defaults: pass them "
            f"to timm.create_model({model_tag!r}, pretrained=True, ...)",
            stacklevel=2,
        )
    # as timm's loader reads the file: the top-level class count and label names win over the cfg's
    cfg = {k: v for k, v in file_pretrained_cfg(config).items() if k not in ("architecture", "tag")}
    cfg.update({k: config[k] for k in ("num_classes", "label_names", "label_descriptions") if k in config})
    hf_hub_id = f"{repo_id}@{commit}"
    register_hub_weights(model_tag, hf_hub_id, default=default, **cfg)
    return hf_hub_id
