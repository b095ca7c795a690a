"""The side files timm fetches for ``timm.create_model("hf-hub:ORG/NAME")`` (its ``config.json``), answered in
seconds when the Hub cannot be reached.

timm fetches them with ``hf_hub_download``, which without a network retries for about 25 s and then raises a bare
``LocalEntryNotFoundError``. Here one short request asks the Hub first (as the pretrained tags do): when it does
not answer, the cached copy is taken at once, or one error says what was asked, why it failed, where the cache
would hold it and how to put it there. When the Hub answers, timm's own download runs unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from huggingface_hub import constants as hf_constants
from huggingface_hub import try_to_load_from_cache
from huggingface_hub.errors import LocalEntryNotFoundError

from .. import weight_sources
from ..errors import PretrainedWeightsUnavailable
from ..weight_sources import OFFLINE, WeightsSource, cached_weights, hub_file_source, not_reached


class HubFileUnavailable(PretrainedWeightsUnavailable, LocalEntryNotFoundError):
    """A file of an ``hf-hub:`` model that is neither reachable nor cached (still the ``LocalEntryNotFoundError``
    huggingface_hub raises there, for code that catches that)."""


def fetch_hub_file(download: Callable[..., str], model_id: str, filename: str, cache_dir: Any = None) -> str:
    """The local path of ``filename`` of ``model_id`` (``ORG/NAME[@revision]``): timm's ``download`` when the Hub
    answers; the cached copy at once when it does not; :class:`HubFileUnavailable` without one."""
    if cache_dir is not None:  # a cache of the caller's own: huggingface_hub's handling, as timm asked for it
        return download(model_id, filename, cache_dir=cache_dir)
    source = hub_file_source(model_id, filename)
    if hf_constants.HF_HUB_OFFLINE:
        try:
            return download(model_id, filename)
        except LocalEntryNotFoundError:
            raise HubFileUnavailable(_message(source, OFFLINE)) from None
    error = weight_sources.unreachable(source)  # by the module: the one probe, as a test may stand it in
    if error is None:
        return download(model_id, filename)
    found = cached_weights(source)
    if found is not None:
        path = try_to_load_from_cache(source.repo_id, filename, revision=found[1])
        if isinstance(path, str):
            return path
    raise HubFileUnavailable(_message(source, not_reached(source, error)))


def _message(source: WeightsSource, why: str) -> str:
    repo = source.repo_id
    return (
        f"cannot read {source.filename} of hf-hub:{source.location}: {why}, and the Hugging Face cache has no copy "
        f"in {source.cache_path}. To provide it offline, on a machine with network run `vitscratch pull {repo} DIR` "
        f"and load local-dir:DIR, or `hf download {repo}` and copy {source.cache_path} into this machine's cache "
        "(HF_HUB_CACHE)"
    )
