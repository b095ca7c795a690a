"""Every private name of another library that the package uses, each with why no public one serves.

Nothing else in the package imports a private module of timm, torch, huggingface_hub or setuptools,
or touches a private attribute of theirs (``tests/packaging/test_private_api.py`` reads the source to
hold that line, and checks each name below, so that a change in timm fails there, by name).

- ``timm.models._hub.save_config_for_hf``: the config half of timm's public ``save_for_hf``. The public
  function also serialises the weights from a live state dict; a model directory's weights are written
  by our streaming writer (``tensor_writer``), and its config is made for models that may sit on ``meta``.
- ``timm.models._hub.generate_readme``: timm's model-card layout (YAML metadata, then sections). timm
  calls it only inside ``push_to_hf_hub``, which also uploads; ``vitscratch push`` uploads the three
  model files itself (``hub.client``).
- ``timm.models._input.update_model_args`` / ``update_model_input_size``: where timm's factory and its own
  ``set_input_size`` record reconstruction arguments (``model._model_args``, ``model._traits``), which the
  public ``get_model_args``, ``get_model_input_config`` and ``save_for_hf`` read back. timm exports the
  readers only; a model that records what a pretrained tag or a resize changed needs the writers.
- ``timm.models._hub.load_cfg_from_json``: how timm reads the ``config.json`` of a ``local-dir:`` or
  ``hf-hub:`` model (the whole file, then ``json.loads``, with no bound) before any code of ours runs. No
  public hook reaches that read, so :func:`read_timm_configs_with` points it at the gate's bounded reader.
- ``timm.models._hub.download_from_hf``: how timm fetches an ``hf-hub:`` model's ``config.json`` (through
  ``hf_hub_download``, which retries for about 25 s without a network and then raises a bare
  ``LocalEntryNotFoundError``). No public hook reaches that fetch, so :func:`fetch_timm_hub_files_with`
  puts a wrapper around it that asks the Hub once, with a short timeout, first.

Outside the package, ``setup.py`` overrides setuptools' ``editable_wheel._select_strategy`` to put the
start-up ``.pth`` into editable wheels (no public hook adds a file there); it runs at build time, before
this package exists, and raises by name when setuptools stops calling it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import timm.models._hub

# timm 1.0.9 and newer have these two
from timm.models._hub import generate_readme, save_config_for_hf
from torch import nn

try:  # newer timm only: without it, timm keeps no record of constructor args to update
    from timm.models._input import update_model_args, update_model_input_size
except ImportError:  # pragma: no cover - exercised with old timm only
    update_model_args = update_model_input_size = None  # type: ignore[assignment]

__all__ = [
    "fetch_timm_hub_files_with",
    "generate_readme",
    "read_timm_configs_with",
    "record_input_size",
    "record_model_args",
    "save_config_for_hf",
]


def record_model_args(model: nn.Module, **model_args: Any) -> None:
    """Record constructor args where timm's factory keeps them, so timm's saved configs carry them."""
    if update_model_args is not None:
        update_model_args(model, **model_args)


def record_input_size(model: nn.Module, img_size: Any, **model_args: Any) -> None:
    """Record a resize the way timm's own ``set_input_size`` does (read by ``get_model_input_config``)."""
    if update_model_input_size is not None:
        update_model_input_size(model, img_size, **model_args)


def read_timm_configs_with(reader: Callable[[Any], dict[str, Any]]) -> None:
    """Make timm read every ``local-dir:`` / ``hf-hub:`` ``config.json`` with ``reader(path)`` (it raises on a
    file it refuses) instead of its own unbounded ``json.loads`` of the whole file."""
    if not callable(getattr(timm.models._hub, "load_cfg_from_json", None)):
        raise RuntimeError("timm.models._hub.load_cfg_from_json is gone: timm reads configs another way now")
    timm.models._hub.load_cfg_from_json = reader  # type: ignore[assignment]


#: ``(timm's download_from_hf, model_id, filename, cache_dir) -> local path``
HubFileFetcher = Callable[[Callable[..., str], str, str, Any], str]


def fetch_timm_hub_files_with(fetch: HubFileFetcher) -> None:
    """Make timm fetch every ``hf-hub:`` side file (its ``config.json``) through ``fetch``, which is handed timm's
    own ``download_from_hf`` to call when the Hub answers. Installing it twice wraps once."""
    original = getattr(timm.models._hub, "download_from_hf", None)
    if not callable(original):
        raise RuntimeError("timm.models._hub.download_from_hf is gone: timm fetches hf-hub: configs another way now")
    original = getattr(original, "__wrapped__", original)

    def download_from_hf(model_id: str, filename: str, cache_dir: Any = None) -> str:
        return fetch(original, model_id, filename, cache_dir)

    download_from_hf.__wrapped__ = original  # type: ignore[attr-defined]
    timm.models._hub.download_from_hf = download_from_hf
