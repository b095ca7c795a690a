"""The model's head, built: what comes after the final norm (the attention pool, ``fc_norm``, the "has_logits"
``pre_logits`` layer, ``head_drop``, ``head`` and DeiT's ``head_dist``), and timm's classifier hooks.

:class:`Head` is a base of ``VisionTransformer``: the model's own methods, kept beside each other here. The head's
forward (pooling, then these modules) is the model's ``forward_head``, in models/vision_transformer.py, so a forward
stays in one file; the pooling it calls is models/pooling.py's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import nn

from .attention import AttentionPool
from .layers import FactoryKwargs, NormLayer
from .option_checks import check_global_pool
from .patch_embed import PatchEmbed
from .weight_init import scheme


class Head(nn.Module):
    """The head's construction and timm's classifier hooks of ``VisionTransformer`` (what they read of the model is
    declared below)."""

    # the model's, set by VisionTransformer.__init__
    patch_embed: PatchEmbed
    init_roles: ClassVar[dict[str, str]]
    num_classes: int
    global_pool: str
    head_hidden_size: int
    distilled: bool
    has_class_token: bool
    weight_init_mode: str
    attn_pool: AttentionPool | None
    head: nn.Module
    head_dist: nn.Module | None

    def _build_head(
        self,
        embed_dim: int,
        num_heads: int,
        mlp_ratio: float,
        *,
        use_fc_norm: bool,
        final_norm: bool,
        representation_size: int | None,
        drop_rate: float,
        attn_pool_num_heads: int | None,
        attn_pool_mlp_ratio: float | None,
        norm: NormLayer,
        act_layer: Callable[[], nn.Module],
        attn_impl: str,
        dd: FactoryKwargs,
    ) -> None:
        """The head's modules, in timm's order (so the same seed draws timm's weights): ``attn_pool`` ('map'),
        ``fc_norm``, ``pre_logits`` (the representation layer; None without one: timm's current models hold no
        module there), ``head_drop``, ``head`` and ``head_dist``."""
        self.attn_pool = (
            AttentionPool(
                embed_dim,
                num_heads=attn_pool_num_heads or num_heads,
                mlp_ratio=attn_pool_mlp_ratio or mlp_ratio,
                norm_layer=norm,
                act_layer=act_layer,
                attn_impl=attn_impl,
                **dd,
            )
            if self.global_pool == "map"
            else None
        )
        self.fc_norm = norm(embed_dim, **dd) if final_norm and use_fc_norm else nn.Identity()
        if representation_size:
            self.pre_logits: nn.Module | None = nn.Sequential(
                OrderedDict(fc=nn.Linear(embed_dim, representation_size, **dd), act=nn.Tanh())
            )
        else:
            self.pre_logits = None
        self.head_drop = nn.Dropout(drop_rate)
        self.head = self._make_head(self.num_classes, **dd)
        self.head_dist = self._make_head(self.num_classes, **dd) if self.distilled else None

    def _make_head(
        self, num_classes: int, device: str | torch.device | None = None, dtype: torch.dtype | None = None
    ) -> nn.Module:
        if num_classes == 0:
            return nn.Identity()
        return nn.Linear(self.head_hidden_size, num_classes, device=device, dtype=dtype)

    @torch.jit.ignore
    def get_classifier(self) -> nn.Module | tuple[nn.Module, nn.Module]:
        return (self.head, self.head_dist) if self.head_dist is not None else self.head

    @torch.jit.ignore
    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier(s) with fresh, trainable ones for ``num_classes`` (0 = features only).

        The new head sits on the model's device and dtype and in its train/eval mode. A new
        ``global_pool`` other than ``'map'`` drops the attention-pooling head; ``'map'`` needs one.
        """
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0, got {num_classes}")
        if global_pool is not None:
            check_global_pool(global_pool, self.distilled, self.has_class_token)
            if global_pool == "map" and self.attn_pool is None:
                raise ValueError("global_pool='map' needs the attention-pooling head: build the model with it")
            if global_pool != "map":
                self.attn_pool = None
            self.global_pool = global_pool
        self.num_classes = num_classes
        reference = self.patch_embed.proj.weight
        init = scheme(self.weight_init_mode, num_classes)
        for name in ["head", "head_dist"] if self.distilled else ["head"]:
            head = self._make_head(num_classes, device=reference.device, dtype=reference.dtype)
            init(head, self.init_roles[name], False)  # on top of the init its constructor gave it
            setattr(self, name, head.train(self.training))
