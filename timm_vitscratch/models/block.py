"""The pre-norm transformer block: attention and MLP branches, each with LayerScale and stochastic depth."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import Attention
from .layers import DEFAULT_NORM_LAYER, DropPath, FactoryKwargs, LayerScale, Mlp, NormLayer
from .packing import PackedSegments


class Block(nn.Module):
    """Pre-norm transformer block: x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x)))."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        init_values: float | None = None,
        drop_path: float = 0.0,
        act_layer: Callable[[], nn.Module] = nn.GELU,
        norm_layer: NormLayer = DEFAULT_NORM_LAYER,
        qk_scale: float | None = None,
        attn_impl: str = "sdpa",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        self.norm1 = norm_layer(dim, **dd)
        self.attn = Attention(
            dim,
            num_heads,
            qkv_bias=qkv_bias,
            qk_norm=qk_norm,
            proj_bias=proj_bias,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
            norm_layer=norm_layer,
            qk_scale=qk_scale,
            attn_impl=attn_impl,
            **dd,
        )
        self.ls1 = LayerScale(dim, init_values=init_values, **dd) if init_values else nn.Identity()
        # as timm: stochastic depth only where its rate is above 0 (the first block's never is)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim, **dd)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, bias=proj_bias, drop=proj_drop, **dd)
        self.ls2 = LayerScale(dim, init_values=init_values, **dd) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, segments: PackedSegments | None = None
    ) -> torch.Tensor:
        """timm's call; a packed NaFlex sequence comes with its ``segments`` (each image attends to itself)."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, segments=segments)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """The block's output for the first ``num_tokens`` tokens only, (B, num_tokens, dim).

        Every token still serves as key and value; only the queries, the attention projection
        and the MLP are restricted. The model's pooled-token forward runs its last block this way.
        """
        x = x[:, :num_tokens] + self.drop_path1(self.ls1(self.attn.forward_queries(self.norm1(x), num_tokens)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def forward_with_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval-style forward that also returns this block's attention matrix."""
        attn = self.attn.attention_weights(self.norm1(x))
        return self.forward(x), attn
