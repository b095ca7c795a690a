"""Test support: tiny models, checkpoint sources, the local Hub server, fault injection and workers.

Importable as ``tests.support`` (pytest puts the repository root on ``sys.path``).
"""

from typing import Any, cast

import timm

from timm_vitscratch import VisionTransformer  # importing the package registers the scratch_* models

#: A 2-block model on 32x32 images: fast enough to run everywhere in the suite.
TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)


def tiny(name: str = "scratch_vit_ti16", **kwargs: Any) -> VisionTransformer:
    """A tiny ``scratch_*`` model (each of them is our ``VisionTransformer``; timm types it as a ``Module``)."""
    return cast(VisionTransformer, timm.create_model(name, **{**TINY, **kwargs}))
