"""The pre-norm transformer blocks: attention and MLP branches, each with its scale and stochastic depth.

One computation, ``x + scale1(attn(norm1(x)))`` then ``x + scale2(mlp(norm2(x)))``, in the classes timm names it
with: :class:`Block` (timm's ``VisionTransformer``: LayerScale modules ``ls1`` / ``ls2``, Identity without
``init_values``) and :class:`EvaBlock` / :class:`ScaledEvaBlock` (timm's ``EvaBlock``: no scale, or the block's own
``gamma_1`` / ``gamma_2``). Every one derives from :class:`TransformerBlock`, which says what one block is: FSDP
wrapping, activation checkpointing and hooks find blocks by that class, never by a name. A block takes its
attention and its MLP as classes (timm's ``attn_layer`` / ``mlp_layer``), chosen once from the model's options
(models/block_layers.py); no forward asks which family it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import Attention
from .layers import DEFAULT_NORM_LAYER, DropPath, FactoryKwargs, LayerScale, Mlp, MlpLayer, NormLayer
from .packing import PackedSegments

#: ``attn_layer(dim, num_heads, *, qkv_bias=..., ..., device=..., dtype=...)``: a block's attention class
AttnLayer = Callable[..., Attention]
#: ``mlp_layer(in_features, hidden_features, *, bias=..., drop=..., device=..., dtype=...)``: a block's MLP class
#: with its own options bound (models/block_layers.py)
MlpFactory = Callable[..., MlpLayer]


class TransformerBlock(nn.Module):
    """What one transformer block is, whatever its names: ``norm1``, ``attn``, ``drop_path1``, ``norm2``, ``mlp``,
    ``drop_path2``, and a scale on each branch that the subclass names (``_add_scales``).

    Wrap, checkpoint or hook blocks by this class (``VisionTransformer.block_types`` lists the model's).
    """

    # for the counts and FLOPs, never the forward: TorchScript compiles properties unless told not to
    __jit_unused_properties__ = ("mlp_shape", "layer_scale")

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
        rope_interleaved: bool = False,
        scale_attn_inner: bool = False,
        attn_layer: AttnLayer = Attention,
        mlp_layer: MlpFactory | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        self.norm1 = norm_layer(dim, **dd)
        self.attn = attn_layer(
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
            rope_interleaved=rope_interleaved,
            scale_norm=scale_attn_inner,
            **dd,
        )
        self.init_values = init_values
        self._add_scale(1, dim, dd)
        # as timm: stochastic depth only where its rate is above 0 (the first block's never is)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = norm_layer(dim, **dd)
        make_mlp = mlp_layer if mlp_layer is not None else Mlp
        extra = {} if mlp_layer is not None else {"act_layer": act_layer}
        self.mlp: MlpLayer = make_mlp(dim, int(dim * mlp_ratio), bias=proj_bias, drop=proj_drop, **extra, **dd)
        self._add_scale(2, dim, dd)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def _add_scale(self, branch: int, dim: int, dd: FactoryKwargs) -> None:
        """Make the scale of residual branch 1 (attention) or 2 (MLP), under the class's name for it."""
        raise NotImplementedError

    @property
    def mlp_shape(self) -> tuple[int, int]:
        """(hidden width, matrices of width x hidden) of the MLP: GELU's fc1 and fc2, or a SwiGLU's three."""
        return self.mlp.hidden_features, self.mlp.num_matrices

    @property
    def layer_scale(self) -> bool:
        """Whether the residual branches are scaled (``init_values``)."""
        return bool(self.init_values)

    def forward_with_attention(
        self, x: torch.Tensor, rope: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval-style forward that also returns this block's attention matrix."""
        attn = self.attn.attention_weights(self.norm1(x), rope)
        return self(x, rope=rope), attn


class Block(TransformerBlock):
    """timm ``VisionTransformer``'s block: the scales are LayerScale modules ``ls1`` / ``ls2`` (Identity without
    ``init_values``)."""

    def _add_scale(self, branch: int, dim: int, dd: FactoryKwargs) -> None:
        init_values = self.init_values
        scale = LayerScale(dim, init_values=init_values, **dd) if init_values else nn.Identity()
        if branch == 1:
            self.ls1 = scale
        else:
            self.ls2 = scale

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """timm's call; a packed NaFlex sequence comes with its ``segments`` (each image attends to itself),
        a rotary position encoding with its ``rope`` terms."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, segments=segments, rope=rope)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int, rope: torch.Tensor | None = None) -> torch.Tensor:
        """The block's output for the first ``num_tokens`` tokens only, (B, num_tokens, dim).

        Every token still serves as key and value; only the queries, the attention projection
        and the MLP are restricted. The model's pooled-token forward runs its last block this way.
        """
        x = x[:, :num_tokens] + self.drop_path1(self.ls1(self.attn.forward_queries(self.norm1(x), num_tokens, rope)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class EvaBlock(TransformerBlock):
    """timm ``EvaBlock`` without ``init_values`` (PE core, EVA02): the branches unscaled."""

    def _add_scale(self, branch: int, dim: int, dd: FactoryKwargs) -> None:
        pass

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """As :meth:`Block.forward`."""
        x = x + self.drop_path1(self.attn(self.norm1(x), attn_mask=attn_mask, segments=segments, rope=rope))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int, rope: torch.Tensor | None = None) -> torch.Tensor:
        """As :meth:`Block.forward_prefix`."""
        x = x[:, :num_tokens] + self.drop_path1(self.attn.forward_queries(self.norm1(x), num_tokens, rope))
        return x + self.drop_path2(self.mlp(self.norm2(x)))


class ScaledEvaBlock(TransformerBlock):
    """timm ``EvaBlock`` with ``init_values`` (DINOv3, PE lang): the scales are the block's own parameters
    ``gamma_1`` / ``gamma_2``."""

    def _add_scale(self, branch: int, dim: int, dd: FactoryKwargs) -> None:
        gamma = nn.Parameter(torch.full((dim,), float(self.init_values or 0.0), **dd))
        if branch == 1:
            self.gamma_1 = gamma
        else:
            self.gamma_2 = gamma

    def reset_parameters(self) -> None:
        """The scales back to ``init_values`` (timm's LayerScale modules reset themselves; these are the block's)."""
        nn.init.constant_(self.gamma_1, float(self.init_values or 0.0))
        nn.init.constant_(self.gamma_2, float(self.init_values or 0.0))

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """As :meth:`Block.forward`."""
        x = x + self.drop_path1(
            self.gamma_1 * self.attn(self.norm1(x), attn_mask=attn_mask, segments=segments, rope=rope)
        )
        return x + self.drop_path2(self.gamma_2 * self.mlp(self.norm2(x)))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int, rope: torch.Tensor | None = None) -> torch.Tensor:
        """As :meth:`Block.forward_prefix`."""
        x = x[:, :num_tokens] + self.drop_path1(
            self.gamma_1 * self.attn.forward_queries(self.norm1(x), num_tokens, rope)
        )
        return x + self.drop_path2(self.gamma_2 * self.mlp(self.norm2(x)))


#: every block class: what FSDP's ``ModuleWrapPolicy`` (which matches exact classes) wraps, one unit per block
BLOCK_TYPES: tuple[type[TransformerBlock], ...] = (Block, EvaBlock, ScaledEvaBlock)
