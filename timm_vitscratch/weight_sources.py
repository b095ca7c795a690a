"""Where a pretrained cfg's weights are fetched from, whether that server answers, what the cache holds, and
the one message when the weights cannot be had.

The loader (:mod:`timm_vitscratch.models.entry`) asks here before timm's own download runs: one short request
instead of huggingface_hub's retries, the cached copy when the Hub cannot be reached, and otherwise one error that
says what was asked, why it failed and how to provide it. Below the models: it knows servers, caches and
huggingface_hub's and torch.hub's errors, and no model.
"""

from __future__ import annotations

import os
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from huggingface_hub import constants as hf_constants
from huggingface_hub import get_session, is_offline_mode, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import httpx  # the HTTP library huggingface_hub uses, as it exports it

from .errors import PretrainedWeightsUnavailable

#: the file of a Hub repo timm's loader takes first (and our entry function fetches before it)
HUB_WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class WeightsSource:
    """Where timm's ``load_pretrained`` fetches a cfg's weights, and where it caches them."""

    kind: str  # "hf-hub" or "url"
    location: str  # the repo id (``ORG/NAME[@revision]``) or the URL
    filename: str  # the file the source holds (what to download by hand)
    cache_path: Path  # hf-hub: the repo's folder in the Hugging Face cache; url: the cached file itself
    tried: tuple[str, ...] = ()  # hf-hub: the files timm's loader asks for, in its order

    @property
    def repo_id(self) -> str:
        return self.location.split("@")[0]

    @property
    def revision(self) -> str | None:
        return self.location.partition("@")[2] or None


def hub_cache_folder(repo_id: str) -> Path:
    """A Hub repo's folder in the Hugging Face cache, by the layout huggingface_hub documents:
    ``<HF_HUB_CACHE>/models--ORG--NAME/snapshots/<commit>/<file>``."""
    return Path(hf_constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))


def hub_file_source(model_id: str, filename: str) -> WeightsSource:
    """One file of a Hub repo (``model_id``: ``ORG/NAME[@revision]``), asked for as itself alone."""
    return WeightsSource("hf-hub", model_id, filename, hub_cache_folder(model_id.partition("@")[0]), (filename,))


def weights_source(cfg: Mapping[str, Any], repo_files: Mapping[str, str] | None = None) -> WeightsSource | None:
    """The remote source of a resolved pretrained cfg, by timm's order (a file or state dict given in the cfg
    comes first, then the Hub, then the URL); None when nothing is fetched. ``repo_files``: the weight file a
    known Hub repo holds (repo id -> file) where it is not ``model.safetensors``."""
    if cfg.get("state_dict") is not None or cfg.get("file") or cfg.get("source") == "local-dir":
        return None
    hub_id = cfg.get("hf_hub_id")
    if hub_id:
        repo = hub_id.split("@")[0]
        named = cfg.get("hf_hub_filename")
        filename = named or (repo_files or {}).get(repo, HUB_WEIGHTS_FILE)
        # timm's load_state_dict_from_hf: a .safetensors file as named; otherwise (pytorch_model.bin when the cfg
        # names none) its safetensors alternative first
        asked = named or "pytorch_model.bin"
        if asked == "pytorch_model.bin":
            tried: tuple[str, ...] = (HUB_WEIGHTS_FILE, asked)
        elif asked.endswith(".bin"):
            tried = (asked.removesuffix(".bin") + ".safetensors", asked)
        else:
            tried = (asked,)
        return WeightsSource("hf-hub", hub_id, filename, hub_cache_folder(repo), tried)
    url = cfg.get("url")
    if url:
        import torch.hub

        filename = os.path.basename(urlparse(url).path)  # what torch.hub.load_state_dict_from_url caches it as
        return WeightsSource("url", url, filename, Path(torch.hub.get_dir()) / "checkpoints" / filename)
    return None


#: seconds the one request that tells whether a weights source answers may wait (``HF_HUB_ETAG_TIMEOUT``, when
#: set, instead: huggingface_hub's own wait for a file's metadata)
PROBE_S = 3.0


def probe_seconds() -> float:
    """How long :func:`unreachable` waits: ``PROBE_S``, or ``HF_HUB_ETAG_TIMEOUT`` where the user set it."""
    if hf_constants.HF_HUB_ETAG_TIMEOUT != hf_constants.DEFAULT_ETAG_TIMEOUT:
        return float(hf_constants.HF_HUB_ETAG_TIMEOUT)
    return PROBE_S


def server_of(source: WeightsSource) -> str:
    """The server a source's weights come from: the Hub's endpoint (``HF_ENDPOINT``), or the URL's host."""
    if source.kind == "hf-hub":
        return f"the Hub at {hf_constants.ENDPOINT}"
    parts = urlparse(source.location)
    return f"{parts.scheme}://{parts.netloc}"


def unreachable(source: WeightsSource) -> Exception | None:
    """Why the server of ``source`` cannot be reached, from one request with a short timeout; None when it
    answers (any HTTP status), or when it is not asked over HTTP.

    Without a network, huggingface_hub asks for each file six times with pauses between (about 25 s a file,
    two files for a tag), and a server that takes the connection but never answers holds every request for
    its whole timeout (torch.hub's downloads have none). One short request first says it in seconds.
    """
    # a bare request: huggingface_hub's build_hf_headers may itself ask the endpoint for its agent registry first
    url = hf_constants.ENDPOINT.rstrip("/") + "/" if source.kind == "hf-hub" else source.location
    if urlparse(url).scheme not in ("http", "https"):
        return None
    try:
        get_session().head(url, timeout=probe_seconds(), follow_redirects=False)
    except httpx.TransportError as error:
        return error
    return None


def cached_weights(source: WeightsSource) -> tuple[str, str] | None:
    """``(file, commit)``: the first of the files timm's loader takes that the Hugging Face cache holds at the
    source's revision (``main`` when it names none), or None."""
    for name in source.tried:
        found = try_to_load_from_cache(source.repo_id, name, revision=source.revision)
        if isinstance(found, str):
            return name, Path(found).parent.name
    return None


def first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _root_cause(error: BaseException) -> BaseException:
    """The error that says why: the Hub's own answer, else the innermost cause (the refused connection
    behind huggingface_hub's "cannot find the requested files" or urllib's URLError)."""
    seen = {id(error)}
    while not isinstance(error, HfHubHTTPError):
        cause = error.__cause__ or error.__context__
        if cause is None or id(cause) in seen:
            break
        error = cause
        seen.add(id(error))
    return error


def download_failed(error: BaseException) -> str:
    """Why the weights were not fetched, when their download failed: the innermost cause, in one line."""
    return f"the download failed ({first_line(_root_cause(error))})"


def not_reached(source: WeightsSource, error: BaseException) -> str:
    """Why the weights were not fetched, when their server did not answer :func:`unreachable`."""
    if isinstance(error, httpx.TimeoutException):
        return f"{server_of(source)} did not answer within {probe_seconds():g} s ({first_line(error)})"
    return f"{server_of(source)} cannot be reached ({first_line(error)})"


OFFLINE = "HF_HUB_OFFLINE=1 is set, so nothing is downloaded"


def unavailable_weights_message(name: str, source: WeightsSource, why: str, cached: str | None = None) -> str:
    """One message for weights that could not be fetched: the tag, where they come from (the files tried),
    ``why`` not, the cache path where they would be found, and how to provide them. ``cached``: what the cache
    does hold, when it is not what the load can take without the network."""
    if source.kind == "hf-hub":
        files = ", else ".join(source.tried)
        origin = f"the Hugging Face Hub repo {source.location} (files: {files})"
        held = cached or f"the Hugging Face cache has no copy in {source.cache_path}"
        fill = (
            f"run `hf download {source.repo_id} {source.filename}` on a machine with network and copy "
            f"{source.cache_path} into this machine's cache (HF_HUB_CACHE)"
        )
    else:
        origin = source.location
        held = cached or f"torch's cache has no copy at {source.cache_path}"
        fill = f"download that URL on a machine with network and put the file at {source.cache_path}"
    offline = "" if why == OFFLINE else " With HF_HUB_OFFLINE=1 nothing is asked of the network."
    return (
        f"cannot load the pretrained weights of {name!r} from {origin}: {why}, and {held}. To provide them "
        f"offline, {fill}; or pass pretrained_cfg_overlay=dict(file='/path/to/{source.filename}') to "
        f"timm.create_model (train.py: --pretrained-path).{offline}"
    )


def weights_without_network(name: str, source: WeightsSource, error_type: Callable[[str], Exception]) -> str | None:
    """Before a load fetches anything: None when the weights' server answers (or the load needs no network);
    the commit to load from the cache when the Hub cannot be reached and the cache holds the weights.
    Raises ``error_type`` (the loader's :class:`~timm_vitscratch.errors.PretrainedWeightsUnavailable`) at once
    otherwise."""
    if source.kind == "url" and source.cache_path.is_file():
        return None  # torch.hub reads its cache without asking
    error = unreachable(source)
    if error is None:
        return None
    found = cached_weights(source) if source.kind == "hf-hub" else None
    if found is not None and found[0] == HUB_WEIGHTS_FILE:
        return found[1]  # pinned to the commit, huggingface_hub reads the file from the cache and asks nothing
    held = None
    if found is not None:  # timm would ask the Hub for model.safetensors first, retrying, before taking this
        held = (
            f"the Hugging Face cache holds only {found[0]} (commit {found[1]}); set HF_HUB_OFFLINE=1 to load it "
            "from there"
        )
    raise error_type(unavailable_weights_message(name, source, not_reached(source, error), held))


#: what timm's download of pretrained weights raises when the file cannot be fetched (Hub, URL, offline)
FETCH_ERRORS = (
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    HfHubHTTPError,
    httpx.TransportError,
    urllib.error.URLError,
    ConnectionError,
    TimeoutError,
)


def offline() -> bool:
    """Whether nothing may be downloaded (``HF_HUB_OFFLINE``, read as huggingface_hub reads it)."""
    return is_offline_mode()


def fetch_failure(name: str, source: WeightsSource, error: BaseException | None) -> PretrainedWeightsUnavailable:
    """The one error for weights of ``name`` that could not be fetched: offline, or ``error`` (the download's)."""
    why = OFFLINE if is_offline_mode() or error is None else download_failed(error)
    return PretrainedWeightsUnavailable(unavailable_weights_message(name, source, why))


def fetched_first(source: WeightsSource) -> bool:
    """Whether our entry function fetches the weights before timm's loader: those of a Hub repo that timm
    would download (not offline, where it reads the cache), in the file timm takes first."""
    return source.kind == "hf-hub" and source.filename == HUB_WEIGHTS_FILE and not is_offline_mode()
