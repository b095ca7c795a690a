"""timm ``NaFlexVit``'s embedding module, with its names: the model's ``embeds`` when built with ``naflex_embeds``.

One module holds what the classic ViT keeps in ``patch_embed``, ``pos_embed``, ``cls_token``, ``reg_token`` and
``pos_drop``: the class and register tokens, ``proj`` (a Linear on flattened patches, (row, column, channel) by
default as timm's NaFlex loader cuts them), ``norm`` (an Identity), ``pos_embed`` (a (1, H, W, D) table for the
patch tokens only: no position is added to the prefix tokens) and ``pos_drop``. Its forward is timm's: an image
(patchified here) or padded NaFlex patches -> ``(tokens, grid)``, the prefix tokens first. The packed NaFlex path
(the model's own) projects the valid patches with :meth:`NaFlexEmbeds.project_flat` and places their positions
with the model's position encoding, which this module shares.

It also answers what the model and its tools read of a patch embedding (``patch_size``, ``img_size``,
``grid_size``, ``num_patches``, ``in_chans``, ``dynamic_feat_size``, ``feat_ratio``, ``set_input_size``), so the
model reads either through one name.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import resample_patch_embed
from torch import nn

from .layers import to_2tuple
from .patch_embed import PatchGrid, _resize_pinv, check_image_shape
from .position import PositionEncoding


def patchify(
    x: torch.Tensor, patch_size: tuple[int, int], pad: bool, channels_last: bool
) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, C, H, W) image -> (B, rows * columns, ph * pw * C) flat patches (channels first: C * ph * pw) and the
    grid, as timm's ``batch_patchify`` cuts them (``pad``: right and bottom up to a multiple of the patch)."""
    batch, chans, height, width = x.shape
    ph, pw = patch_size
    if pad:
        x = F.pad(x, (0, (ph - height % ph) % ph, 0, (pw - width % pw) % pw))
        height, width = x.shape[-2:]
    rows, cols = height // ph, width // pw
    x = x.reshape(batch, chans, rows, ph, cols, pw)
    x = x.permute(0, 2, 4, 3, 5, 1) if channels_last else x.permute(0, 2, 4, 1, 3, 5)
    return x.reshape(batch, rows * cols, -1), (rows, cols)


def kernel_to_linear(kernel: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """A (D, C, ph, pw) convolution kernel as the patch Linear's (D, ph * pw * C) weight (channels first: C * ph * pw)."""
    if channels_last:
        kernel = kernel.permute(0, 2, 3, 1)
    return kernel.reshape(kernel.shape[0], -1)


class NaFlexEmbeds(PatchGrid, nn.Module):
    """timm's ``NaFlexEmbeds`` (Linear projection, learned or no table): names, tensors, forward (see the module)."""

    def __init__(
        self,
        img_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        in_chans: int,
        embed_dim: int,
        pos_encoding: PositionEncoding,
        *,
        bias: bool = True,
        class_token: bool = False,
        reg_tokens: int = 0,
        learned_pos: bool = True,
        strict_img_size: bool = False,
        dynamic_img_pad: bool = False,
        pos_drop_rate: float = 0.0,
        channels_last: bool = True,
        init_tokens: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """``init_tokens``: draw the tokens and the table when built, as timm's does (not on ``meta``)."""
        super().__init__()
        dd: dict[str, Any] = {"device": device, "dtype": dtype}
        if in_chans < 1:
            raise ValueError(f"in_chans must be >= 1, got {in_chans}")
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.strict_img_size = strict_img_size
        self.dynamic_img_pad = dynamic_img_pad
        self.channels_last = channels_last
        self.patch_size = to_2tuple(patch_size, "patch_size")
        self._set_img_size(img_size)
        self.num_prefix_tokens = int(class_token) + reg_tokens
        self.pos_encoding = pos_encoding  # the model's (a plain object): resampling the table to any grid
        # timm's order: the tokens, the projection, the norm, the table, the dropout
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim, **dd)) if reg_tokens else None
        self.proj = nn.Linear(self.patch_size[0] * self.patch_size[1] * in_chans, embed_dim, bias=bias, **dd)
        self.norm = nn.Identity()
        rows, cols = self.grid_size
        self.pos_embed = nn.Parameter(torch.zeros(1, rows, cols, embed_dim, **dd)) if learned_pos else None
        self.pos_drop = nn.Dropout(pos_drop_rate)
        if init_tokens and self.proj.weight.device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's draws: the class and register tokens N(0, 1e-6), the table N(0, .02)."""
        with torch.no_grad():
            for token, std in ((self.cls_token, 1e-6), (self.reg_token, 1e-6), (self.pos_embed, 0.02)):
                if token is not None:
                    nn.init.normal_(token, std=std)

    # --- what a patch embedding answers -------------------------------------------------------
    def table(self) -> torch.Tensor | None:
        """The position table as the model's position encoding reads it: (1, H * W, D), a view."""
        return None if self.pos_embed is None else self.pos_embed.flatten(1, 2)

    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """New image and/or patch size: the table resampled to the new grid as the forward resamples it, the
        projection to the new patch size (FlexiViT's way, as a kernel). Device, dtype and ``requires_grad`` kept."""
        old_grid = self.grid_size
        if patch_size is not None and to_2tuple(patch_size, "patch_size") != self.patch_size:
            new_size = to_2tuple(patch_size, "patch_size")
            old = self.proj
            kernel = self.kernel()
            proj = nn.Linear(
                new_size[0] * new_size[1] * self.in_chans,
                old.out_features,
                bias=old.bias is not None,
                device=old.weight.device,
                dtype=old.weight.dtype,
            )
            with torch.no_grad():
                proj.weight.copy_(kernel_to_linear(resample_patch_embed(kernel, list(new_size)), self.channels_last))
                if old.bias is not None and proj.bias is not None:
                    proj.bias.copy_(old.bias)
            for new, previous in zip(proj.parameters(), old.parameters(), strict=False):
                new.requires_grad_(previous.requires_grad)
            self.proj = proj.train(old.training)
            self.patch_size = new_size
        self._set_img_size(self.img_size if img_size is None else img_size)
        table = self.table()
        if table is not None and self.pos_embed is not None and self.grid_size != old_grid:
            resampled = self.pos_encoding.for_grid(table.detach(), *self.grid_size, old_grid, table)
            assert resampled is not None  # a learned table resamples to a table
            self.pos_embed = nn.Parameter(
                resampled.reshape(1, *self.grid_size, -1), requires_grad=self.pos_embed.requires_grad
            )

    def kernel(self) -> torch.Tensor:
        """The projection as a (D, C, ph, pw) convolution kernel."""
        weight = self.proj.weight
        if self.channels_last:
            return weight.reshape(weight.shape[0], *self.patch_size, self.in_chans).permute(0, 3, 1, 2)
        return weight.reshape(weight.shape[0], self.in_chans, *self.patch_size)

    def flat_weight(self, patch_size: tuple[int, int], channels_last: bool) -> torch.Tensor:
        """The projection as a (D, P*P*C) map of flattened patches of ``patch_size`` in the given flat order;
        another patch size resamples it (FlexiViT's pseudo-inverse resize, timm's ``resample_patch_embed``)."""
        if tuple(patch_size) == self.patch_size and channels_last == self.channels_last:
            return self.proj.weight
        weight = self.kernel()
        if tuple(patch_size) != self.patch_size:
            dim, chans = weight.shape[:2]
            pinv = _resize_pinv(self.patch_size, tuple(patch_size)).to(weight.device)
            weight = (weight.reshape(dim, chans, -1).float() @ pinv).reshape(dim, chans, *patch_size).to(weight.dtype)
        return kernel_to_linear(weight, channels_last)

    def project_flat(self, patches: torch.Tensor, patch_size: tuple[int, int], channels_last: bool) -> torch.Tensor:
        """(..., P*P*C) flattened patches -> (..., D) patch tokens: ``proj`` (then ``norm``), called as a module
        at the model's own patch size and layout."""
        if tuple(patch_size) == self.patch_size and channels_last == self.channels_last:
            return self.norm(self.proj(patches))
        return self.norm(F.linear(patches, self.flat_weight(patch_size, channels_last), self.proj.bias))

    # --- forward --------------------------------------------------------------------------------
    def _prefix(self, batch: int) -> list[torch.Tensor]:
        tokens: list[torch.Tensor] = []
        if self.cls_token is not None:
            tokens.append(self.cls_token.expand(batch, -1, -1))
        if self.reg_token is not None:
            tokens.append(self.reg_token.expand(batch, -1, -1))
        return tokens

    def forward(
        self,
        x: torch.Tensor,
        patch_coord: torch.Tensor | None = None,
        patch_valid: torch.Tensor | None = None,
        patch_size: tuple[int, int] | None = None,
    ) -> tuple[torch.Tensor, tuple[int, int] | None]:
        """timm's: a (B, C, H, W) image, or (B, N, P*P*C) NaFlex patches with their ``patch_coord`` / ``patch_valid``
        (``patch_size``: theirs, when not the model's) -> ((B, prefix + N, D) tokens, the image's grid or None)."""
        grid: tuple[int, int] | None = None
        if patch_coord is None:
            x = check_image_shape(
                x, self.in_chans, self.img_size, self.patch_size, self.strict_img_size, self.dynamic_img_pad
            )
            x, grid = patchify(x, self.patch_size, self.dynamic_img_pad, self.channels_last)
            x = self.norm(self.proj(x))
            positions = self.pos_encoding.for_grid(self.table(), grid[0], grid[1], self.grid_size, x)
        else:
            x = self.project_flat(x, self.patch_size if patch_size is None else patch_size, self.channels_last)
            valid = torch.ones_like(patch_coord[..., 0], dtype=torch.bool) if patch_valid is None else patch_valid
            positions = self.pos_encoding.for_slots(self.table(), patch_coord, valid, self.grid_size, x)
        if positions is not None:
            x = x + positions
        prefix = self._prefix(x.shape[0])
        if len(prefix) > 0:
            x = torch.cat(prefix + [x], dim=1)
        return self.pos_drop(x), grid
