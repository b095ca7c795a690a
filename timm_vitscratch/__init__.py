"""timm_vitscratch: from-scratch Vision Transformers registered with timm.

Importing the package registers every ``scratch_*`` model with timm's registry, and sets up how their entry
functions fetch weights from the Hub before timm loads them (through the Hub client's checks).
"""

import os
from collections.abc import Callable
from typing import Any

from .gate.json_data import route_timm_configs
from .models import (
    ARCHITECTURES,
    Attention,
    Block,
    DropPath,
    Mlp,
    PatchEmbed,
    VisionTransformer,
    checkpoint_filter_fn,
)
from .models.pretrained import set_hub_weights_fetcher
from .private_api import fetch_timm_hub_files_with
from .version import __version__

route_timm_configs()  # timm's local-dir: / hf-hub: config.json reads go through the gate too


def _fetch_hub_weights(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> str:
    """The Hub client's :func:`~timm_vitscratch.hub.timm_weights.fetch_weights`, imported when first needed
    (``models`` cannot import ``hub``, a layer above it; importing the package stays light)."""
    from .hub.timm_weights import fetch_weights

    return fetch_weights(repo_id, revision, cache_dir)


set_hub_weights_fetcher(_fetch_hub_weights)


def _fetch_hub_file(download: Callable[..., str], model_id: str, filename: str, cache_dir: Any = None) -> str:
    """timm's fetch of an ``hf-hub:`` model's config.json, through :mod:`timm_vitscratch.hub.timm_configs`
    (imported when first needed, as above)."""
    from .hub.timm_configs import fetch_hub_file

    return fetch_hub_file(download, model_id, filename, cache_dir)


fetch_timm_hub_files_with(_fetch_hub_file)

__all__ = [
    "ARCHITECTURES",
    "Attention",
    "Block",
    "DropPath",
    "Mlp",
    "PatchEmbed",
    "VisionTransformer",
    "__version__",
    "checkpoint_filter_fn",
]
