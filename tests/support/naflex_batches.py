"""NaFlex batches made by timm's own data pipeline pieces, and timm's ``NaFlexVit`` with a model's weights."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

import timm
import torch
from timm.data.naflex_dataset import NaFlexCollator
from timm.data.naflex_transforms import Patchify
from timm.models.naflexvit import NaFlexVit, checkpoint_filter_fn

#: image sizes (height, width) in pixels for 8-pixel patches: a square, wide and tall, a 1-patch-high strip,
#: a 1-patch-wide strip, a single patch, and one larger than the model's 32x32 training size
MIXED_SIZES = ((32, 32), (16, 40), (48, 24), (8, 64), (56, 8), (8, 8), (40, 48))


def images(sizes: Iterable[tuple[int, int]], channels: int = 3, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(channels, h, w, generator=generator) for h, w in sizes]


def naflex_batch(
    images: Sequence[torch.Tensor], patch_size: int, max_seq_len: int, channels_last: bool = True, flatten: bool = True
) -> dict[str, torch.Tensor]:
    """timm's ``Patchify`` per image, then timm's ``NaFlexCollator`` padding every image to ``max_seq_len``."""
    patchify = Patchify(patch_size, flatten_patches=flatten, channels_last=channels_last)
    batch, _ = NaFlexCollator(max_seq_len=max_seq_len)([(patchify(image), 0) for image in images])
    return batch


def timm_naflexvit(ours: torch.nn.Module, reference: str = "vit_tiny_patch16_224", **kwargs: Any) -> NaFlexVit:
    """timm's ``NaFlexVit`` built from the classic ViT ``reference`` (``use_naflex=True``) with ``ours``' weights,
    loaded through timm's own NaFlex checkpoint filter."""
    model = cast(NaFlexVit, timm.create_model(reference, use_naflex=True, **kwargs).eval())
    # cloned: timm's filter adds the class token's position into the class token in place
    model.load_state_dict(checkpoint_filter_fn({k: v.clone() for k, v in ours.state_dict().items()}, model))
    return model
