"""Patch embedding: images to patch tokens with one strided convolution, in timm's layouts."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from timm.layers import Format, resample_patch_embed
from torch import nn

from .layers import NormLayer, to_2tuple


@torch.fx.wrap
def check_image_shape(
    x: torch.Tensor,
    in_chans: int,
    img_size: tuple[int, int],
    patch_size: tuple[int, int],
    strict: bool,
    pad: bool,
) -> torch.Tensor:
    """Raise a ValueError naming both shapes unless ``x`` is an image batch the patch embedding takes.

    ``strict``: height and width must be ``img_size``; otherwise multiples of the patch size,
    unless ``pad`` (the image is padded up to one). A wrapped function: FX tracing records one
    call instead of tracing shape checks.
    """
    expected = f"(batch, {in_chans}, {img_size[0]}, {img_size[1]})" if strict else f"(batch, {in_chans}, height, width)"
    if x.ndim != 4 or x.shape[1] != in_chans or (strict and (x.shape[2] != img_size[0] or x.shape[3] != img_size[1])):
        shape = ", ".join([str(size) for size in x.shape])
        raise ValueError(
            f"expected input of shape {expected} (batch, channels, height, width), got ({shape})"
            + ("; build with dynamic_img_size=True or call set_input_size() for other sizes" if strict else "")
        )
    if not strict and not pad and (x.shape[2] % patch_size[0] != 0 or x.shape[3] % patch_size[1] != 0):
        raise ValueError(
            f"input height and width must be multiples of the patch size ({patch_size[0]}, "
            f"{patch_size[1]}), got {x.shape[2]}x{x.shape[3]}; build with dynamic_img_pad=True to pad"
        )
    return x


@functools.lru_cache(maxsize=32)
def _resize_pinv(old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    """(old_h*old_w, new_h*new_w) matrix that resamples a kernel as timm's ``resample_patch_embed`` does.

    ``resample_patch_embed`` of the identity kernels is its pseudo-inverse resize matrix; kept so
    that a training step does not recompute it.
    """
    basis = torch.eye(old[0] * old[1]).reshape(-1, 1, old[0], old[1])
    return resample_patch_embed(basis, list(new)).reshape(old[0] * old[1], new[0] * new[1])


class PatchGrid:
    """The patch grid an image size makes, as timm's patch embeddings answer it: ``img_size``, ``grid_size``,
    ``num_patches``, ``feat_ratio()`` and ``dynamic_feat_size()``; for every patch embedding here. The class sets
    ``patch_size`` and ``dynamic_img_pad`` before it calls ``_set_img_size``."""

    if TYPE_CHECKING:  # declared for type checkers only: TorchScript cannot read class-level annotations here
        patch_size: tuple[int, int]
        dynamic_img_pad: bool

    def _set_img_size(self, img_size: int | tuple[int, int]) -> None:
        self.img_size = to_2tuple(img_size, "img_size")
        for axis, (size, patch) in enumerate(zip(self.img_size, self.patch_size, strict=False)):
            if patch < 1 or size < patch or (size % patch and not self.dynamic_img_pad):
                side = "height" if axis == 0 else "width"
                raise ValueError(
                    f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}: "
                    f"image {side} {size} must be a positive multiple of patch {side} {patch}"
                )
        self.grid_size = self.dynamic_feat_size(self.img_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def feat_ratio(self, as_scalar: bool = True) -> tuple[int, int] | int:
        """How much smaller the patch grid is than the image: the patch size (its larger side as a scalar)."""
        return max(self.patch_size) if as_scalar else self.patch_size

    def dynamic_feat_size(self, img_size: tuple[int, int]) -> tuple[int, int]:
        """Patch grid (rows, columns) for an image of ``img_size`` (padded up with ``dynamic_img_pad``)."""
        if self.dynamic_img_pad:
            return math.ceil(img_size[0] / self.patch_size[0]), math.ceil(img_size[1] / self.patch_size[1])
        return img_size[0] // self.patch_size[0], img_size[1] // self.patch_size[1]


class PatchEmbed(PatchGrid, nn.Module):
    """Image to patch tokens with one strided convolution, in timm's layouts and with timm's attributes.

    (B, C, H, W) -> (B, H/p * W/p, D) tokens (``flatten``), or with ``output_fmt`` the patch grid in
    that layout (``'NHWC'``: (B, H/p, W/p, D), what the model asks for with ``dynamic_img_size``).
    ``strict_img_size=False`` takes any image whose sides are multiples of the patch size (or any
    size with ``dynamic_img_pad``, which pads right and bottom up to the next multiple). ``norm``
    is an Identity, as in timm's ViT (a hook point), or the ``norm_layer`` over the tokens (AIMv2's RmsNorm).

    NaFlex batches arrive as patches already cut and flattened: ``project_flat`` applies the same
    projection to them (no second weight format).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        *,
        bias: bool = True,
        strict_img_size: bool = True,
        dynamic_img_pad: bool = False,
        output_fmt: str | None = None,
        norm_layer: NormLayer | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if in_chans < 1:
            raise ValueError(f"in_chans must be >= 1, got {in_chans}")
        self.in_chans = in_chans
        self.strict_img_size = strict_img_size
        self.dynamic_img_pad = dynamic_img_pad
        self.patch_size = to_2tuple(patch_size, "patch_size")
        self._set_img_size(img_size)
        # timm's convention: no output_fmt means flattened tokens, and output_fmt then reads NCHW
        self.flatten = output_fmt is None
        self.output_fmt = Format(output_fmt or "NCHW")
        self.proj = nn.Conv2d(
            in_chans,
            embed_dim,
            kernel_size=self.patch_size,
            stride=self.patch_size,
            bias=bias,
            device=device,
            dtype=dtype,
        )
        self.norm = norm_layer(embed_dim, device=device, dtype=dtype) if norm_layer is not None else nn.Identity()

    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """New image and/or patch size; a new patch size resamples the projection's kernel (FlexiViT's way)."""
        if patch_size is not None and to_2tuple(patch_size, "patch_size") != self.patch_size:
            new_size = to_2tuple(patch_size, "patch_size")
            old = self.proj
            proj = nn.Conv2d(
                old.in_channels,
                old.out_channels,
                kernel_size=new_size,
                stride=new_size,
                bias=old.bias is not None,
                device=old.weight.device,
                dtype=old.weight.dtype,
            )
            with torch.no_grad():
                proj.weight.copy_(resample_patch_embed(old.weight, list(new_size)))
                if old.bias is not None and proj.bias is not None:
                    proj.bias.copy_(old.bias)
            for new, previous in zip(proj.parameters(), old.parameters(), strict=False):
                new.requires_grad_(previous.requires_grad)
            self.proj = proj.train(old.training)
            self.patch_size = new_size
        self._set_img_size(self.img_size if img_size is None else img_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_image_shape(
            x, self.in_chans, self.img_size, self.patch_size, self.strict_img_size, self.dynamic_img_pad
        )
        if self.dynamic_img_pad:
            pad_h = (self.patch_size[0] - x.shape[2] % self.patch_size[0]) % self.patch_size[0]
            pad_w = (self.patch_size[1] - x.shape[3] % self.patch_size[1]) % self.patch_size[1]
            x = F.pad(x, (0, pad_w, 0, pad_h))
        x = self.proj(x)
        # every layout is a view of the convolution's (B, D, H, W) output; Format is a str enum,
        # and TorchScript holds output_fmt as its string
        if self.flatten or self.output_fmt == "NLC":
            x = x.flatten(2).transpose(1, 2)
        elif self.output_fmt == "NHWC":
            x = x.permute(0, 2, 3, 1)
        elif self.output_fmt == "NCL":
            x = x.flatten(2)
        return self.norm(x)

    def flat_weight(self, patch_size: tuple[int, int], channels_last: bool) -> torch.Tensor:
        """The projection's kernel as a (D, P*P*C) linear map of flattened patches of ``patch_size``.

        Channels last (timm's default flat layout: row, column, channel) or first. Another patch size
        resamples the kernel (FlexiViT's pseudo-inverse resize, timm's ``resample_patch_embed``).
        """
        weight = self.proj.weight  # (D, C, ph, pw)
        if tuple(weight.shape[2:]) != tuple(patch_size):
            dim, chans = weight.shape[:2]
            pinv = _resize_pinv((weight.shape[2], weight.shape[3]), patch_size).to(weight.device)
            weight = (weight.reshape(dim, chans, -1).float() @ pinv).reshape(dim, chans, *patch_size).to(weight.dtype)
        if channels_last:
            weight = weight.permute(0, 2, 3, 1)
        return weight.reshape(weight.shape[0], -1)

    def project_flat(self, patches: torch.Tensor, patch_size: tuple[int, int], channels_last: bool) -> torch.Tensor:
        """(..., P*P*C) flattened patches -> (..., D) patch tokens: the convolution as a linear map, then ``norm``."""
        return self.norm(F.linear(patches, self.flat_weight(patch_size, channels_last), self.proj.bias))
