"""The model's initialisation in timm's order: the weight-init scheme's pass over the model's own tensors and its
layers, as timm's ``VisionTransformer``, ``Eva`` (``eva_names``) or ``NaFlexVit`` (``naflex_init``) runs it, so that
with timm's options and seed the draws are timm's.

:class:`InitOrder` is a base of ``VisionTransformer``: the model's own methods, kept beside each other here (the
per-module rules of each scheme are models/weight_init.py's).
"""

from __future__ import annotations

import math
from collections.abc import Collection

import torch
from timm.layers import trunc_normal_
from torch import nn

from .block import TransformerBlock
from .naflex_embeds import NaFlexEmbeds
from .patch_embed import PatchEmbed
from .weight_init import InitFn, apply_init, init_eva, scheme


class InitOrder(nn.Module):
    """The initialisation methods of ``VisionTransformer`` (what they read of the model is declared below)."""

    # the model's, set by VisionTransformer.__init__
    patch_embed: PatchEmbed
    embeds: NaFlexEmbeds | None
    pos_embed: torch.Tensor | None
    cls_token: torch.Tensor | None
    reg_token: torch.Tensor | None
    dist_token: torch.Tensor | None
    blocks: nn.Sequential
    head: nn.Module
    weight_init_mode: str
    num_classes: int
    naflex_init: bool
    eva_names: bool
    sincos_pos_embed: bool
    patchify_channels_last: bool

    def _sincos_table(self, device: str | torch.device | None = None) -> torch.Tensor:
        raise NotImplementedError

    def _initialise(self, needs_reset: bool, only: Collection[int] | None = None) -> None:
        """The scheme's pass in timm's order, over every tensor or those whose ids are in ``only``: the model's
        own tensors, then the layers; for timm's Eva the layers first, then its own tensors and its rescaling."""
        init = scheme(self.weight_init_mode, self.num_classes)
        if self.naflex_init:  # NaFlexVit: the patch projection (its embedding's Linear), its tokens, the layers
            self._init_naflex_patch_projection(init, needs_reset, only=only)
            if needs_reset:
                self._init_naflex_tokens(only=only)
            apply_init(
                init, self, needs_reset, only=only, skip=("embeds" if self.embeds is not None else "patch_embed",)
            )
            self._rescale_residual_projections(only=only)  # NaFlexVit's fix_init, on in every model of timm's
            return
        if self._eva_init():
            apply_init(init_eva, self, needs_reset, only=only)
            self._init_own_tensors(only=only)
            self._eva_rescale(only=only)
            return
        self._init_own_tensors(only=only)
        apply_init(init, self, needs_reset, only=only)

    def _eva_init(self) -> bool:
        return self.eva_names and self.weight_init_mode == ""

    def _eva_rescale(self, only: Collection[int] | None = None) -> None:
        """Eva's last steps: each block's residual projections (``attn.proj``, ``mlp.fc2``) divided by
        sqrt(2 * (index + 1)), the head drawn again and scaled by 1e-3. ``only``: the ids of fresh tensors."""
        self._rescale_residual_projections(only=only)
        with torch.no_grad():
            head = self.head
            if isinstance(head, nn.Linear) and (only is None or id(head.weight) in only):
                trunc_normal_(head.weight, std=0.02)
                head.weight.mul_(1e-3)
                head.bias.mul_(1e-3)

    def _init_naflex_tokens(self, only: Collection[int] | None = None) -> None:
        """timm NaFlexVit's embedding tokens: the class and register tokens N(0, 1e-6), the learned position table
        N(0, .02) (the sincos table computed). ``only``: the ids of the tensors to initialise (default: all)."""
        with torch.no_grad():
            for token, std in ((self.cls_token, 1e-6), (self.reg_token, 1e-6), (self.pos_embed, 0.02)):
                if token is None or (only is not None and id(token) not in only):
                    continue
                if token is self.pos_embed and self.sincos_pos_embed:
                    token.copy_(self._sincos_table(torch.device("cpu")))
                else:
                    nn.init.normal_(token, std=std)

    def _init_naflex_patch_projection(self, init: InitFn, needs_reset: bool, only: Collection[int] | None) -> None:
        """The scheme's rule for timm NaFlexVit's patch projection, a Linear over flat patches (in the order the
        model reads them: ``patchify_channels_last``), drawn into a stand-in Linear in that layout, then laid out as
        our Conv2d's kernel. ``only``: the ids of fresh tensors."""
        proj = self.patch_embed.proj
        weight, bias = proj.weight, proj.bias
        if isinstance(proj, nn.Linear):  # the Linear it is in timm's, in ``embeds``
            fresh = None if only is None else [t for t in (weight, bias) if t is not None and id(t) in only]
            if fresh is None or len(fresh) > 0:
                apply_init(init, self.embeds, needs_reset, only=None if fresh is None else set(map(id, fresh)))
            return
        fresh_weight = only is None or id(weight) in only
        fresh_bias = bias is not None and (only is None or id(bias) in only)
        if not (fresh_weight or fresh_bias):
            return
        # (D, C, ph, pw) <-> the Linear's (D, ph * pw * C), or (D, C * ph * pw) with channels first
        order = (0, 2, 3, 1) if self.patchify_channels_last else (0, 1, 2, 3)
        back = (0, 3, 1, 2) if self.patchify_channels_last else (0, 1, 2, 3)
        flat_shape = weight.permute(*order).shape
        # the stand-in holds the kernel's values, so that a scheme without a rule for it keeps them
        linear = nn.Linear(weight[0].numel(), weight.shape[0], bias=bias is not None, device="meta")
        linear.weight = nn.Parameter(weight.detach().permute(*order).reshape(weight.shape[0], -1).clone())
        if bias is not None:
            linear.bias = nn.Parameter(bias.detach().clone())
        init(linear, "", needs_reset)
        with torch.no_grad():
            if fresh_weight:
                weight.copy_(linear.weight.view(flat_shape).permute(*back))
            if fresh_bias and bias is not None:
                bias.copy_(linear.bias)

    def _rescale_residual_projections(self, only: Collection[int] | None = None) -> None:
        """timm's ``fix_init``: each block's residual projections (``attn.proj``, ``mlp.fc2``) divided by
        sqrt(2 * (index + 1)). ``only``: the ids of fresh tensors."""
        with torch.no_grad():
            for index, block in enumerate(self.blocks):
                assert isinstance(block, TransformerBlock)
                for layer in (block.attn.proj, block.mlp.fc2):
                    if only is None or id(layer.weight) in only:
                        layer.weight.div_(math.sqrt(2.0 * (index + 1)))

    def _init_own_tensors(self, only: Collection[int] | None = None) -> None:
        """timm's rules, in timm's order: the distillation token and the learned position table
        N(0, .02) truncated, the class and register tokens N(0, 1e-6); the sincos table computed.
        ``only``: the ids of the tensors to initialise (default: all)."""
        dist, pos, cls, reg = self.dist_token, self.pos_embed, self.cls_token, self.reg_token
        if self._eva_init():  # Eva: the table, the class and the register tokens, each N(0, .02) truncated
            with torch.no_grad():
                for tensor in (pos, cls, reg):
                    if tensor is not None and not self.sincos_pos_embed and (only is None or id(tensor) in only):
                        trunc_normal_(tensor, std=0.02)
            return
        with torch.no_grad():
            if dist is not None and (only is None or id(dist) in only):
                trunc_normal_(dist, std=0.02)
            if pos is not None and (only is None or id(pos) in only):
                if self.sincos_pos_embed:  # tiny, computed in float64 on the CPU
                    pos.copy_(self._sincos_table(torch.device("cpu")))
                else:
                    trunc_normal_(pos, std=0.02)
            for token in (cls, reg):
                if token is not None and (only is None or id(token) in only):
                    nn.init.normal_(token, std=1e-6)
