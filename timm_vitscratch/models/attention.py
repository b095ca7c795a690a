"""Attention: the blocks' multi-head self-attention and the MAP head's attention pooling, in plain torch.

Both follow timm's switch between ``F.scaled_dot_product_attention`` and an eager path that
materialises the attention matrix (``fused_attn``, set from ``attn_impl``), compute the same
function either way, and use SDPA's mask convention. A packed NaFlex sequence comes with its
``segments`` (models/packing.py), beside timm's ``attn_mask``: each image attends to itself. A rotary
position encoding comes as ``rope`` terms (models/rotary.py), applied to queries and keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_tf_
from torch import nn

from ..choices import ATTN_IMPLS
from .layers import DEFAULT_NORM_LAYER, FactoryKwargs, Mlp, NormLayer
from .packed_kernels import attend
from .packing import PackedSegments


def check_attn_impl(attn_impl: str) -> str:
    if attn_impl not in ATTN_IMPLS:
        raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
    return attn_impl


@torch.fx.wrap
def add_attn_mask(attn: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
    """Apply a mask with SDPA's convention (bool: True attends; float: added) to attention scores.

    A wrapped function: under FX tracing the mask argument is a placeholder that may be None.
    """
    if attn_mask is None:
        return attn
    if attn_mask.dtype == torch.bool:
        return attn.masked_fill(attn_mask.logical_not(), float("-inf"))
    return attn + attn_mask


def _masked_softmax_attention(
    q: torch.Tensor, k: torch.Tensor, scale: float, attn_mask: torch.Tensor | None
) -> torch.Tensor:
    """Softmax attention matrix, the eager path's (and the attention maps') computation."""
    return add_attn_mask((q * scale) @ k.transpose(-2, -1), attn_mask).softmax(dim=-1)


class Attention(nn.Module):
    """Multi-head self-attention with one fused ``qkv`` projection, its bias inside (timm's ViT ``Attention``, and
    ``AttentionRope`` of its ``Eva``), and timm's optional q/k LayerNorm. The base of every block attention.

    ``fused_attn`` (timm's switch, set from ``attn_impl``: ``'sdpa'`` True, ``'eager'`` False) runs
    ``F.scaled_dot_product_attention``; off, the attention matrix is materialised and passes
    through ``attn_drop`` (where timm's ``AttentionExtract`` hooks read it). Both compute the same
    function. ``norm`` (the merged heads, before ``proj``) is an Identity, as in timm's ViT, or with ``scale_norm`` a
    LayerNorm (timm Eva's ``scale_attn_inner``, EVA02-CLIP's).

    The projection is the class's (``_init_projection``, ``_split_heads``): :class:`EvaAttention` and
    :class:`SeparateQkvAttention` are timm ``Eva``'s two layouts. Rotary terms (``rope``) rotate queries and keys by
    halves of the head (DINOv3), or with ``rope_interleaved`` by neighbouring channel pairs (axial RoPE): the pairing
    is a shape chosen here, once, so that the forward computes either without a branch.
    """

    __jit_unused_properties__ = ("attn_impl",)
    #: for the weight-init schemes: ``qkv`` is three projections in one ('moco' bounds each on its own)
    init_roles: ClassVar[dict[str, str]] = {"qkv": "qkv"}

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: NormLayer = DEFAULT_NORM_LAYER,
        qk_scale: float | None = None,
        attn_impl: str = "sdpa",
        rope_interleaved: bool = False,
        scale_norm: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f"embed_dim {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale if qk_scale is not None else self.head_dim**-0.5
        self.fused_attn = check_attn_impl(attn_impl) == "sdpa"
        self.rope_interleaved = rope_interleaved
        # a head as (pair member, channel) halves, or as (channel pair, member) neighbours: the member axis
        half = self.head_dim // 2
        self.rope_split = [half, 2] if rope_interleaved else [2, half]
        self.rope_axis = -1 if rope_interleaved else -2
        self._init_projection(dim, qkv_bias, dd)
        self.q_norm = norm_layer(self.head_dim, **dd) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim, **dd) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = norm_layer(dim, **dd) if scale_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=proj_bias, **dd)
        self.proj_drop = nn.Dropout(proj_drop)

    def _init_projection(self, dim: int, qkv_bias: bool, dd: FactoryKwargs) -> None:
        """The q/k/v projection's layers and tensors: one ``qkv`` Linear with its bias (Eva's own biases: none)."""
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias, **dd)
        self.q_bias: nn.Parameter | None = None
        self.k_bias: torch.Tensor | None = None
        self.v_bias: nn.Parameter | None = None

    @property
    def attn_impl(self) -> str:
        """``'sdpa'`` or ``'eager'``: the path ``fused_attn`` selects."""
        return "sdpa" if self.fused_attn else "eager"

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, dim) -> (B, N, 3 * dim): the fused q, k, v projection with separate biases (``q_bias`` set:
        :class:`EvaAttention`); the plain layout calls ``qkv`` in :meth:`_split_heads` itself."""
        return self.qkv(x)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, N, dim) projected tokens as (B, heads, N, head_dim)."""
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)

    def _split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv projection -> q, k, v of shape (B, heads, N, head_dim), timm's layout (``forward`` inlines it)."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x) if self.q_bias is None else self._project(x)
        q, k, v = qkv.view(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return self.q_norm(q), self.k_norm(k), v

    def _split_heads_for_queries(
        self, x: torch.Tensor, num_queries: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``_split_heads``, but queries only for the first ``num_queries`` tokens (keys and values for all).

        The projection runs as a module call over every token (forward hooks on ``qkv``, such as
        torchsummary's, see it run; the extra query rows cost a twelfth of one block), and the
        query normalisation runs for the kept queries alone.
        """
        batch, tokens, _ = x.shape
        qkv = self.qkv(x) if self.q_bias is None else self._project(x)
        q, k, v = qkv.view(batch, tokens, 3, self.num_heads, self.head_dim).unbind(2)
        q = q[:, :num_queries]
        return self.q_norm(q.transpose(1, 2)), self.k_norm(k.transpose(1, 2)), v.transpose(1, 2)

    def _rotate(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """Queries or keys (..., tokens, head_dim) rotated by terms ``rope`` (2, ..., tokens, head_dim) (sines,
        cosines), in ``x``'s dtype: each channel plus its signed partner (``[-x2, x1]`` of halves, or
        ``[-x1, x0, -x3, x2, ...]`` of pairs) times the sine."""
        first, second = x.unflatten(-1, self.rope_split).unbind(self.rope_axis)
        partner = torch.stack([-second, first], dim=self.rope_axis).flatten(-2)
        return (x * rope[1] + partner * rope[0]).to(x.dtype)

    def attention_weights(self, x: torch.Tensor, rope: torch.Tensor | None = None) -> torch.Tensor:
        """Softmax attention matrix (B, heads, N, N) for normalised tokens ``x``."""
        q, k, _ = self._split_heads(x)
        if rope is not None:
            q, k = self._rotate(q, rope), self._rotate(k, rope)
        return _masked_softmax_attention(q, k, self.scale, None)

    def _attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """softmax(q k^T * scale + mask) v over (B, heads, N, head_dim) tensors: fused (SDPA), or materialised
        and passed through ``attn_drop`` (where timm's ``AttentionExtract`` reads it), as ``fused_attn`` says."""
        if self.fused_attn:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0, scale=self.scale
            )
        return self.attn_drop(_masked_softmax_attention(q, k, self.scale, attn_mask)) @ v

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
    ) -> torch.Tensor:
        """(B, heads, Nq, head_dim) queries against all keys/values -> projected (B, Nq, dim) tokens.

        With ``segments`` (a packed sequence, never under TorchScript) each image attends to itself."""
        batch, _, queries, _ = q.shape
        if segments is not None and not torch.jit.is_scripting():  # TorchScript leaves the packed path out
            x = self._attend_packed(q, k, v, segments)
        else:
            x = self._attention(q, k, v, attn_mask)
        # SDPA's CPU and CUDA kernels already lay their output out as (B, Nq, heads, head_dim),
        # so this reshape is a view, not a copy
        x = x.transpose(1, 2).reshape(batch, queries, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(self.norm(x)))

    def _attend_packed(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: PackedSegments
    ) -> torch.Tensor:
        """A packed sequence's attention, each image over its own run (the kernel: models/packed_kernels.py;
        any one-call kernel computes what ``_attention`` does only when it is SDPA without dropout)."""
        fused = self.fused_attn and not (self.training and self.attn_drop.p > 0.0)
        return attend(q, k, v, segments, self._attention, self.scale, fused)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """timm's call, ``attn_mask`` in SDPA's convention; ``segments``: the runs of a packed sequence;
        ``rope``: rotary terms (2, ..., N, head_dim) of every token (models/rotary.py).

        The common path runs in this one frame, as timm's does (each helper called here would be another Python
        call per block, which a small batch on a GPU waits for): the split of :meth:`_split_heads`, SDPA of
        :meth:`_attention` and the merge of :meth:`_attend`, inline. The eager path and packed sequences call
        those; :class:`SeparateQkvAttention` has a forward of its own.
        """
        batch, tokens, _ = x.shape
        qkv = self.qkv(x) if self.q_bias is None else self._project(x)  # as timm's Eva: its biases, when it has them
        q, k, v = qkv.view(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = self._rotate(q, rope), self._rotate(k, rope)
        if segments is not None and not torch.jit.is_scripting():  # TorchScript leaves the packed path out
            x = self._attend_packed(q, k, v, segments)
        elif self.fused_attn:
            dropout_p = self.attn_drop.p if self.training else 0.0
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, scale=self.scale)
        else:
            x = self._attention(q, k, v, attn_mask)
        x = x.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(self.norm(x)))

    def forward_queries(self, x: torch.Tensor, num_queries: int, rope: torch.Tensor | None = None) -> torch.Tensor:
        """Attention outputs of the first ``num_queries`` tokens only (they attend to every token)."""
        q, k, v = self._split_heads_for_queries(x, num_queries)
        if rope is not None:
            q, k = self._rotate(q, rope[..., :num_queries, :]), self._rotate(k, rope)
        return self._attend(q, k, v)


class EvaAttention(Attention):
    """timm ``Eva``'s fused layout with its own biases (``EvaAttention``, DINOv3's): a ``qkv`` Linear without bias,
    ``q_bias`` and ``v_bias`` parameters and a key bias fixed at zero, added in one ``F.linear`` with ``qkv``'s
    weight as Eva does (so, as there, hooks on ``qkv`` do not fire). Without ``qkv_bias`` the plain
    :class:`Attention` is the same layer."""

    def _init_projection(self, dim: int, qkv_bias: bool, dd: FactoryKwargs) -> None:
        self.qkv = nn.Linear(dim, dim * 3, bias=False, **dd)
        self.q_bias = nn.Parameter(torch.zeros(dim, **dd))
        self.register_buffer("k_bias", torch.zeros(dim, **dd), persistent=False)
        self.v_bias = nn.Parameter(torch.zeros(dim, **dd))

    def reset_parameters(self) -> None:
        """The biases at zero, as timm makes them; the key bias, a buffer no checkpoint holds, too
        (a model built on ``meta`` and materialised would otherwise keep whatever its new storage held)."""
        for bias in (self.q_bias, self.k_bias, self.v_bias):
            if bias is not None:
                nn.init.zeros_(bias)

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """``qkv``'s weight with the concatenated q, zero k and v biases."""
        assert self.q_bias is not None and self.k_bias is not None and self.v_bias is not None
        return F.linear(x, self.qkv.weight, torch.cat([self.q_bias, self.k_bias, self.v_bias]))


class SeparateQkvAttention(Attention):
    """timm ``Eva``'s unfused layout (``EvaAttention`` with ``qkv_fused=False``, EVA02's): ``q_proj``, ``k_proj``
    (no bias) and ``v_proj``."""

    def _init_projection(self, dim: int, qkv_bias: bool, dd: FactoryKwargs) -> None:
        self.q_bias = self.k_bias = self.v_bias = None
        self.q_proj = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        self.k_proj = nn.Linear(dim, dim, bias=False, **dd)
        self.v_proj = nn.Linear(dim, dim, bias=qkv_bias, **dd)

    def _split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self._heads(self.q_proj(x)), self._heads(self.k_proj(x)), self._heads(self.v_proj(x))
        return self.q_norm(q), self.k_norm(k), v

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        segments: PackedSegments | None = None,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """As :meth:`Attention.forward`, with the three projections."""
        q, k, v = self._split_heads(x)
        if rope is not None:
            q, k = self._rotate(q, rope), self._rotate(k, rope)
        return self._attend(q, k, v, attn_mask, segments)

    def _split_heads_for_queries(
        self, x: torch.Tensor, num_queries: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q = self._heads(self.q_proj(x[:, :num_queries]))
        return self.q_norm(q), self.k_norm(self._heads(self.k_proj(x))), self._heads(self.v_proj(x))


class AttentionPool(nn.Module):
    """Attention pooling with one learned latent query (SigLIP's "MAP" head); timm's ``attn_pool.*`` names.

    The latent attends over the tokens (queries from ``q``, keys and values from ``kv``), is
    projected, and passes a residual LayerNorm + MLP: (B, N, D) -> (B, D). ``q_norm``, ``k_norm``
    and ``proj_drop`` are timm's hook points (Identity, Identity, Dropout(0)).
    """

    def __init__(
        self,
        in_features: int,
        *,
        num_heads: int = 8,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        norm_layer: NormLayer = DEFAULT_NORM_LAYER,
        act_layer: Callable[[], nn.Module] = nn.GELU,
        attn_impl: str = "sdpa",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        dim = in_features
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused_attn = check_attn_impl(attn_impl) == "sdpa"
        self.latent = nn.Parameter(torch.empty(1, 1, dim, **dd))
        self.q = nn.Linear(dim, dim, bias=qkv_bias, **dd)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias, **dd)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.proj = nn.Linear(dim, dim, **dd)
        self.proj_drop = nn.Dropout(0.0)
        self.norm = norm_layer(dim, **dd)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer, **dd)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The latent query: N(0, 1/dim) truncated at 2 std, as timm's ``AttentionPoolLatent`` draws it."""
        trunc_normal_tf_(self.latent, std=self.latent.shape[-1] ** -0.5)

    def init_weights(self) -> None:
        """timm's hook, which every weight-init scheme but ``'reset'`` calls: the latent drawn again."""
        self.reset_parameters()

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``attn_mask`` (SDPA's convention, e.g. (B, 1, 1, N) bool) leaves out keys, as NaFlex padding."""
        batch, tokens, dim = x.shape
        q = self.q(self.latent.expand(batch, -1, -1)).view(batch, 1, self.num_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(batch, tokens, 2, self.num_heads, self.head_dim).unbind(2)
        q, k, v = self.q_norm(q), self.k_norm(k.transpose(1, 2)), v.transpose(1, 2)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=self.scale)
        else:
            x = _masked_softmax_attention(q, k, self.scale, attn_mask) @ v
        x = self.proj_drop(self.proj(x.transpose(1, 2).reshape(batch, 1, dim)))
        x = x + self.mlp(self.norm(x))
        return x[:, 0]
