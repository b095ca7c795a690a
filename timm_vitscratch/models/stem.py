"""The model's stem, built: what comes before the blocks (the patch embedding, the class, distillation and register
tokens, the position table and its encoding, the rotary module, patch dropout and the pre-norm), and timm's
``set_input_size``, which changes them.

:class:`Stem` is a base of ``VisionTransformer``: the model's own methods, kept beside each other here. The stem's
forward is the model's ``_embed``, in models/vision_transformer.py, so a forward stays in one file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..private_api import record_input_size
from .layers import FactoryKwargs, NormLayer, PatchDropout, sincos_2d_pos_embed
from .naflex_embeds import NaFlexEmbeds
from .patch_embed import PatchEmbed
from .position import PositionEncoding, position_encoding
from .rotary import RotaryPosition


class Stem(nn.Module):
    """The stem's construction and ``set_input_size`` of ``VisionTransformer`` (what they read of the model is
    declared below)."""

    # the model's, set by VisionTransformer.__init__
    patch_embed: PatchEmbed
    embed_dim: int
    num_prefix_tokens: int
    no_embed_class: bool
    feature_info: list[dict[str, Any]]
    cls_token: torch.Tensor | None
    reg_token: torch.Tensor | None
    pos_drop: nn.Module
    rope: RotaryPosition | None
    # the model's methods (storage's and the init order's), declared without a body that would shadow them
    has_meta_tensors: Callable[[], bool]
    _init_naflex_tokens: Callable[..., None]

    @property
    def pos_prefix_tokens(self) -> int:
        """Prefix tokens that have a row in the position table: none with ``no_embed_class`` (DeiT-III, DINOv2)."""
        return 0 if self.no_embed_class else self.num_prefix_tokens

    def _build_stem(
        self,
        img_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        in_chans: int,
        embed_dim: int,
        *,
        pos_embed: str,
        pos_embed_interp_mode: str,
        pre_norm: bool,
        class_token: bool,
        distilled: bool,
        reg_tokens: int,
        dynamic_img_size: bool,
        dynamic_img_pad: bool,
        pos_drop_rate: float,
        patch_drop_rate: float,
        patchify_channels_last: bool,
        naflex_init: bool,
        naflex_embeds: bool,
        bare: bool,
        rope: RotaryPosition | None,
        embed_norm: NormLayer | None,
        norm: NormLayer,
        dd: FactoryKwargs,
    ) -> None:
        """The stem's modules and tensors in timm's order (so the same seed draws timm's weights): the patch
        embedding, the tokens and the position table (or NaFlexVit's ``embeds`` holding them), ``pos_drop``, the
        rotary module ``rope``, ``patch_drop`` (``bare``: none when it would do nothing, as timm's ``Eva`` and
        ``NaFlexVit``) and ``norm_pre``. CLIP-style pre-norm models have no patch bias (timm's convention)."""
        # positions for any grid, packed tokens or padded slots, from the table (a plain object, not a module)
        self.pos_encoding: PositionEncoding = position_encoding(
            pos_embed, self.pos_prefix_tokens, embed_dim, pos_embed_interp_mode
        )
        self.embeds: NaFlexEmbeds | None = None
        if naflex_embeds:  # timm NaFlexVit's embedding module: tokens, Linear projection, table, dropout
            self.embeds = NaFlexEmbeds(
                img_size,
                patch_size,
                in_chans,
                embed_dim,
                self.pos_encoding,
                bias=not pre_norm,
                class_token=class_token,
                reg_tokens=reg_tokens,
                learned_pos=pos_embed == "learn",
                strict_img_size=not dynamic_img_size,
                dynamic_img_pad=dynamic_img_pad,
                pos_drop_rate=pos_drop_rate,
                channels_last=patchify_channels_last,
                init_tokens=naflex_init,
                **dd,
            )
            self.dist_token: torch.Tensor | None = None
            self.class_token_only = False  # the embedding builds its own prefix
            self.sincos_pos_embed = False
        else:
            # the patch grid stays NHWC with dynamic_img_size (positions are resampled to it), as in timm
            self.patch_embed = PatchEmbed(
                img_size=img_size,
                patch_size=patch_size,
                in_chans=in_chans,
                embed_dim=embed_dim,
                bias=not pre_norm,
                strict_img_size=not dynamic_img_size,
                dynamic_img_pad=dynamic_img_pad,
                output_fmt="NHWC" if dynamic_img_size else None,
                norm_layer=embed_norm,
                **dd,
            )
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if class_token else None
            self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim, **dd)) if distilled else None
            self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, embed_dim, **dd)) if reg_tokens else None
            # the class token (or none) is the whole prefix: the forward reads it without building the prefix
            self.class_token_only = not distilled and not reg_tokens
            self._build_position_table(pos_embed, embed_dim, dd)
            if naflex_init and not self.has_meta_tensors():  # timm's NaFlexEmbeds draws these when built
                self._init_naflex_tokens()
            self.pos_drop = nn.Dropout(pos_drop_rate)
        self.rope = rope  # rotary position for attention (timm's ``rope`` module); the prefix tokens are not rotated
        self.patch_drop: nn.Module | None = (
            PatchDropout(patch_drop_rate, num_prefix_tokens=self.num_prefix_tokens)
            if patch_drop_rate > 0
            else None
            if bare
            else nn.Identity()
        )
        self.norm_pre = norm(embed_dim, **dd) if pre_norm else nn.Identity()

    def _build_position_table(self, pos_embed: str, embed_dim: int, dd: FactoryKwargs) -> None:
        """``pos_embed``: a learned table (a parameter), a sincos one (a buffer no state dict holds) or None."""
        self.sincos_pos_embed = pos_embed == "sincos"
        if pos_embed == "learn":
            self.pos_embed: torch.Tensor | None = nn.Parameter(torch.zeros(1, self._pos_embed_len(), embed_dim, **dd))
        elif pos_embed == "sincos":
            table = self._sincos_table(dd["device"])
            dtype = dd["dtype"]
            self.register_buffer("pos_embed", table if dtype is None else table.to(dtype), persistent=False)
        else:
            self.pos_embed = None

    def _pos_embed_len(self) -> int:
        return self.patch_embed.num_patches + self.pos_prefix_tokens

    def _sincos_table(self, device: str | torch.device | None = None) -> torch.Tensor:
        where = torch.device(device) if device is not None else None
        return sincos_2d_pos_embed(self.patch_embed.grid_size, self.embed_dim, self.pos_prefix_tokens, device=where)

    @torch.jit.ignore
    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """New input resolution and/or patch size, as timm does it.

        The learned position table is resampled to the new patch grid as the forward resamples it
        (``pos_embed_interp_mode``), the sincos table recomputed, and a new patch size resamples the
        patch projection. Device, dtype, ``requires_grad`` and train/eval are kept.
        """
        if self.embeds is not None:
            self.embeds.set_input_size(img_size, patch_size)
        else:
            self._set_classic_input_size(img_size, patch_size)
        if patch_size is not None:
            for info in self.feature_info:
                info["reduction"] = max(self.patch_embed.patch_size)
        # timm's record of the size the model now takes (read by timm.models.get_model_input_config)
        record_input_size(
            self, self.patch_embed.img_size, patch_size=None if patch_size is None else self.patch_embed.patch_size
        )

    def _set_classic_input_size(
        self, img_size: int | tuple[int, int] | None, patch_size: int | tuple[int, int] | None
    ) -> None:
        old_grid = self.patch_embed.grid_size
        self.patch_embed.set_input_size(img_size, patch_size)
        new_grid = self.patch_embed.grid_size
        if isinstance(self.pos_embed, nn.Parameter) and new_grid != old_grid:
            table = self.pos_encoding.for_grid(self.pos_embed.detach(), *new_grid, old_grid, self.pos_embed)
            assert table is not None  # a learned table resamples to a table
            self.pos_embed = nn.Parameter(table, requires_grad=self.pos_embed.requires_grad)
        elif self.pos_embed is not None and self.sincos_pos_embed:
            self.pos_embed = self._sincos_table(self.pos_embed.device).to(self.pos_embed.dtype)
