"""The image processor a transformers export carries: the model's own preprocessing, in the class transformers
pairs with the exported model, so that ``AutoImageProcessor`` and ``pipeline`` work on the folder whole.

The values come from the model directory's ``pretrained_cfg`` (mean, std, interpolation, crop fraction, as timm
preprocesses for it) and the size from the architecture written; transformers' own class writes the file.
"""

from __future__ import annotations

import math
from typing import Any

from ..models.architecture import Arch
from .transformers_siglip import is_naflex_args, is_siglip_args

#: timm's interpolation names -> PIL's resampling filters, which transformers' processors take
RESAMPLE = {"bicubic": 3, "bilinear": 2, "nearest": 0, "lanczos": 1}


def export_image_processor(arch: Arch, args: dict[str, Any], preprocessing: dict[str, Any]) -> Any:
    """A transformers image processor for the export of ``arch`` (DINOv3ViT, Dinov2, Siglip or Siglip2 vision model):
    timm's eval transform for it as the processor's fields (a NaFlex row's: the patch budget)."""
    import transformers
    from transformers.image_utils import PILImageResampling

    height, width = arch.img_size
    common = dict(
        image_mean=list(preprocessing.get("mean") or (0.485, 0.456, 0.406)),
        image_std=list(preprocessing.get("std") or (0.229, 0.224, 0.225)),
        resample=PILImageResampling(RESAMPLE.get(str(preprocessing.get("interpolation")), 3)),
    )
    if is_naflex_args(args):  # an image of any shape becomes a grid of patches within the model's budget
        patches = (height // arch.patch_size) * (width // arch.patch_size)
        return transformers.Siglip2ImageProcessor(patch_size=arch.patch_size, max_num_patches=patches, **common)
    if is_siglip_args(args):  # a classic SigLIP: timm's eval transform, to the model's one size
        if preprocessing.get("crop_mode") == "squash":  # resized straight to the size, as Google's processors do
            return transformers.SiglipImageProcessor(size={"height": height, "width": width}, **common)
        return transformers.SiglipImageProcessor(**timm_center_crop(height, width, preprocessing), **common)
    if args.get("rope_type") == "dinov3":  # DINOv3's processor resizes to the model's size, no crop
        return transformers.DINOv3ViTImageProcessor(size={"height": height, "width": width}, **common)
    # DINOv2: resize the short side, then crop, as timm
    return transformers.BitImageProcessor(
        **timm_center_crop(height, width, preprocessing), do_convert_rgb=True, **common
    )


def timm_center_crop(height: int, width: int, preprocessing: dict[str, Any]) -> dict[str, Any]:
    """timm's eval resize and crop (``crop_mode`` ``center``) as a processor's fields: the short side resized to
    ``floor(size / crop_pct)``, then the centre cut. transformers rounds the crop's offset down where torchvision
    (timm) rounds half to even: one pixel apart when the side exceeds the crop by 4k + 3 pixels."""
    crop_pct = float(preprocessing.get("crop_pct") or 1.0)
    return dict(
        size={"shortest_edge": math.floor(min(height, width) / crop_pct)},  # timm: floor(size / crop_pct)
        crop_size={"height": height, "width": width},
        do_center_crop=True,
    )
