"""The pre-norm transformer block: attention and MLP branches, each with LayerScale and stochastic depth."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import Attention
from .layers import DEFAULT_NORM_LAYER, DropPath, FactoryKwargs, LayerScale, MlpLayer, NormLayer, make_mlp
from .packing import PackedSegments


class Block(nn.Module):
    """Pre-norm transformer block: x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x))).

    Two namings of the same computation, timm's two ViT classes: ``VisionTransformer``'s (LayerScale
    modules ``ls1`` / ``ls2``) and, with ``eva_names``, ``Eva``'s (the scales as the block's own
    ``gamma_1`` / ``gamma_2``). ``qkv_form`` is the attention's projection layout (models/attention.py);
    the MLP is GELU or SwiGLU by timm Eva's rule (``layers.make_mlp``).
    """

    # for the counts and FLOPs, never the forward: TorchScript compiles properties unless told not to
    __jit_unused_properties__ = ("mlp_shape",)

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
        eva_names: bool = False,
        qkv_form: str = "fused",
        rope_interleaved: bool = False,
        swiglu_mlp: bool = False,
        swiglu_align_to: int = 0,
        scale_mlp: bool = False,
        scale_attn_inner: bool = False,
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
            qkv_form=qkv_form,
            rope_interleaved=rope_interleaved,
            scale_norm=scale_attn_inner,
            **dd,
        )
        self.init_values = init_values
        if eva_names:
            self.ls1: nn.Module | None = None
            scale = [nn.Parameter(torch.full((dim,), float(init_values), **dd)) if init_values else None for _ in "12"]
            self.gamma_1, self.gamma_2 = scale
        else:
            self.ls1 = LayerScale(dim, init_values=init_values, **dd) if init_values else nn.Identity()
            self.gamma_1 = self.gamma_2 = None
        # as timm: stochastic depth only where its rate is above 0 (the first block's never is)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim, **dd)
        self.mlp: MlpLayer = make_mlp(
            dim,
            int(dim * mlp_ratio),
            swiglu=swiglu_mlp,
            align_to=swiglu_align_to,
            scale_mlp=scale_mlp,
            act_layer=act_layer,
            norm_layer=norm_layer,
            bias=proj_bias,
            drop=proj_drop,
            dd=dd,
        )
        if not eva_names:
            self.ls2: nn.Module | None = (
                LayerScale(dim, init_values=init_values, **dd) if init_values else nn.Identity()
            )
        else:
            self.ls2 = None
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    @property
    def mlp_shape(self) -> tuple[int, int]:
        """(hidden width, matrices of width x hidden) of the MLP: GELU's fc1 and fc2, or a SwiGLU's three."""
        return self.mlp.hidden_features, self.mlp.num_matrices

    def reset_parameters(self) -> None:
        """Eva's scales back to ``init_values`` (the LayerScale modules reset themselves)."""
        for gamma in (self.gamma_1, self.gamma_2):
            if gamma is not None and self.init_values is not None:
                nn.init.constant_(gamma, self.init_values)

    def _scale1(self, x: torch.Tensor) -> torch.Tensor:
        if self.gamma_1 is not None:
            return self.gamma_1 * x
        if self.ls1 is not None:
            return self.ls1(x)
        return x

    def _scale2(self, x: torch.Tensor) -> torch.Tensor:
        if self.gamma_2 is not None:
            return self.gamma_2 * x
        if self.ls2 is not None:
            return self.ls2(x)
        return x

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """timm's call; a packed NaFlex sequence comes with its ``segments`` (each image attends to itself),
        a rotary position encoding with its ``rope`` terms."""
        x = x + self.drop_path1(
            self._scale1(self.attn(self.norm1(x), attn_mask=attn_mask, segments=segments, rope=rope))
        )
        return x + self.drop_path2(self._scale2(self.mlp(self.norm2(x))))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int, rope: torch.Tensor | None = None) -> torch.Tensor:
        """The block's output for the first ``num_tokens`` tokens only, (B, num_tokens, dim).

        Every token still serves as key and value; only the queries, the attention projection
        and the MLP are restricted. The model's pooled-token forward runs its last block this way.
        """
        attended = self.attn.forward_queries(self.norm1(x), num_tokens, rope)
        x = x[:, :num_tokens] + self.drop_path1(self._scale1(attended))
        return x + self.drop_path2(self._scale2(self.mlp(self.norm2(x))))

    def forward_with_attention(
        self, x: torch.Tensor, rope: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval-style forward that also returns this block's attention matrix."""
        attn = self.attn.attention_weights(self.norm1(x), rope)
        return self.forward(x, rope=rope), attn
