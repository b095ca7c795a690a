"""Building blocks of the Vision Transformer, written in plain torch.

Module and parameter names follow classic timm naming (``patch_embed.proj``,
``attn.qkv``, ``mlp.fc1`` ...) so that timm ViT/DeiT state dicts load without renames.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

ATTN_IMPLS = ("sdpa", "eager")


def to_2tuple(value: Union[int, Tuple[int, int]], name: str) -> Tuple[int, int]:
    """Return ``value`` as an (height, width) pair, accepting an int or a pair."""
    if isinstance(value, int):
        return value, value
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")
    return pair  # type: ignore[return-value]


@torch.fx.wrap
def check_image_shape(x: torch.Tensor, expected: Tuple[int, int, int]) -> torch.Tensor:
    """Raise a ValueError naming both shapes unless ``x`` is (batch, *expected)."""
    if x.ndim != 4 or tuple(x.shape[1:]) != tuple(expected):
        raise ValueError(
            f"expected input of shape (batch, {expected[0]}, {expected[1]}, {expected[2]}) "
            f"(batch, channels, height, width), got {tuple(x.shape)}"
        )
    return x


class PatchEmbed(nn.Module):
    """Image to patch tokens with one strided convolution: (B, C, H, W) -> (B, N, D)."""

    def __init__(
        self,
        img_size: Union[int, Tuple[int, int]] = 224,
        patch_size: Union[int, Tuple[int, int]] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
    ) -> None:
        super().__init__()
        self.img_size = to_2tuple(img_size, "img_size")
        self.patch_size = to_2tuple(patch_size, "patch_size")
        if in_chans < 1:
            raise ValueError(f"in_chans must be >= 1, got {in_chans}")
        for axis, (size, patch) in enumerate(zip(self.img_size, self.patch_size)):
            if patch < 1 or size % patch:
                side = "height" if axis == 0 else "width"
                raise ValueError(
                    f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}: "
                    f"image {side} {size} must be a positive multiple of patch {side} {patch}"
                )
        self.in_chans = in_chans
        self.grid_size = (self.img_size[0] // self.patch_size[0], self.img_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a wrapped function: FX tracing keeps the check as one call instead of tracing into it
        x = check_image_shape(x, (self.in_chans, *self.img_size))
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv projection.

    ``attn_impl='sdpa'`` (the default, for inference and training alike) runs
    ``F.scaled_dot_product_attention``; ``'eager'`` materialises the attention matrix (needed to
    read attention maps). Both compute the same function. SDPA is the default: on CPU the two
    measured alike in training and inference, SDPA saves no (N, N) matrix for backward, and on
    CUDA its fused kernels win (README, "Performance"); override per model with
    ``attn_impl='eager'`` or ``model.set_attn_impl('eager')``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = True,
        qk_scale: float | None = None,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        attn_impl: str = "sdpa",
    ) -> None:
        super().__init__()
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f"embed_dim {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale if qk_scale is not None else self.head_dim ** -0.5
        self.attn_impl = check_attn_impl(attn_impl)
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _split_heads(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv projection -> q, k, v of shape (B, heads, N, head_dim), as views of one tensor."""
        batch, tokens, _ = x.shape
        # split on the q/k/v axis of (B, N, 3, heads, head_dim) and only then move heads forward:
        # backward stacks the three gradients straight into the projection's layout (one copy
        # where splitting a (3, B, heads, N, head_dim) permutation needs a stack and a reshape copy)
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, self.head_dim).unbind(2)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def _split_heads_for_queries(
        self, x: torch.Tensor, num_queries: int
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``_split_heads``, but queries only for the first ``num_queries`` tokens (keys and values for all).

        The fused projection's weight is sliced by rows (q, then k and v), so no query is computed
        that nobody reads.
        """
        batch, tokens, dim = x.shape
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x[:, :num_queries], weight[:dim], None if bias is None else bias[:dim])
        kv = F.linear(x, weight[dim:], None if bias is None else bias[dim:])
        k, v = kv.view(batch, tokens, 2, self.num_heads, self.head_dim).unbind(2)
        q = q.view(batch, num_queries, self.num_heads, self.head_dim)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax attention matrix (B, heads, N, N) for normalised tokens ``x``."""
        q, k, _ = self._split_heads(x)
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(B, heads, Nq, head_dim) queries against all keys/values -> projected (B, Nq, dim) tokens."""
        batch, _, queries, _ = q.shape
        if self.attn_impl == "sdpa":
            x = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0, scale=self.scale
            )
        else:
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
            x = self.attn_drop(attn) @ v
        # SDPA's CPU and CUDA kernels already lay their output out as (B, Nq, heads, head_dim),
        # so this reshape is a view, not a copy
        x = x.transpose(1, 2).reshape(batch, queries, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._attend(*self._split_heads(x))

    def forward_queries(self, x: torch.Tensor, num_queries: int) -> torch.Tensor:
        """Attention outputs of the first ``num_queries`` tokens only (they attend to every token)."""
        return self._attend(*self._split_heads_for_queries(x, num_queries))


class Mlp(nn.Module):
    """Two-layer perceptron with GELU: fc1 -> act -> drop -> fc2 -> drop."""

    def __init__(self, dim: int, hidden_dim: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


def drop_path(x: torch.Tensor, drop_prob: float, training: bool) -> torch.Tensor:
    """Zero whole samples with probability ``drop_prob`` and rescale survivors by 1/keep."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1.0 - drop_prob
    mask_shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    mask = x.new_empty(mask_shape).bernoulli_(keep_prob)
    return x * mask.div_(keep_prob)


class DropPath(nn.Module):
    """Stochastic depth per sample (identity in eval)."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop path rate must be in [0, 1), got {drop_prob}")
        self.drop_prob = drop_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        qk_scale: float | None = None,
        proj_drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        attn_impl: str = "sdpa",
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, qk_scale, attn_drop, proj_drop, attn_impl)
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), proj_drop)
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x)))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward_prefix(self, x: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """The block's output for the first ``num_tokens`` tokens only, (B, num_tokens, dim).

        Every token still serves as key and value; only the queries, the attention projection
        and the MLP are restricted. The model's last block runs this way when only the class
        (and distillation) token is pooled.
        """
        x = x[:, :num_tokens] + self.drop_path1(self.attn.forward_queries(self.norm1(x), num_tokens))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward_with_attention(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Eval-style forward that also returns this block's attention matrix."""
        attn = self.attn.attention_weights(self.norm1(x))
        return self.forward(x), attn


def check_attn_impl(attn_impl: str) -> str:
    if attn_impl not in ATTN_IMPLS:
        raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
    return attn_impl


def sincos_2d_pos_embed(
    grid_size: Tuple[int, int], dim: int, num_prefix_tokens: int = 0, temperature: float = 10000.0,
    device: Optional[torch.device] = None,
) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embedding, (1, prefix + H*W, dim); prefix tokens get zeros."""
    if dim % 4:
        raise ValueError(f"pos_embed='sincos' needs embed_dim divisible by 4, got {dim}")
    grid_h, grid_w = torch.meshgrid(
        torch.arange(grid_size[0], dtype=torch.float64, device=device),
        torch.arange(grid_size[1], dtype=torch.float64, device=device),
        indexing="ij",
    )
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64, device=device) / quarter)
    out_h = grid_h.reshape(-1, 1) * omega
    out_w = grid_w.reshape(-1, 1) * omega
    table = torch.cat([out_h.sin(), out_h.cos(), out_w.sin(), out_w.cos()], dim=1)
    prefix = torch.zeros(num_prefix_tokens, dim, dtype=torch.float64, device=device)
    return torch.cat([prefix, table]).unsqueeze(0).float()


def normal_init_(tensor: torch.Tensor, std: float, bound: float = 2.0) -> torch.Tensor:
    """Fill ``tensor`` from N(0, std²) truncated to [-bound, bound] (timm's ``trunc_normal_`` bounds).

    timm (and ``nn.init.trunc_normal_``) truncate at an absolute ±2, which is ±100 std at std .02:
    the truncated mass is then far below float32 resolution, and one ``normal_`` pass (clamped so
    the bound still holds) draws the same distribution as the five-pass inverse-CDF sampler,
    several times faster. Bounds closer than 8 std use the exact sampler.
    """
    with torch.no_grad():
        if bound >= 8.0 * std:
            return tensor.normal_(0.0, std).clamp_(-bound, bound)
        return nn.init.trunc_normal_(tensor, std=std, a=-bound, b=bound)


def init_layer_tensor(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
    """timm-style init of one ``weight``/``bias`` of a Linear, Conv2d or LayerNorm.

    Linear: N(0, .02) weights; patch Conv2d: lecun normal over the flattened patch (as a linear
    layer over patch pixels); LayerNorm: ones; every bias: zeros. A ``meta`` tensor holds no data
    and is skipped (``VisionTransformer.materialize`` initialises it once it has storage).
    """
    if tensor.is_meta:
        return
    with torch.no_grad():
        if name == "bias":
            tensor.zero_()
        elif isinstance(module, nn.LayerNorm):
            tensor.fill_(1.0)
        elif isinstance(module, nn.Linear):
            normal_init_(tensor, std=0.02)
        elif isinstance(module, nn.Conv2d):
            fan_in = module.in_channels * math.prod(module.kernel_size)
            normal_init_(tensor, std=math.sqrt(1.0 / fan_in))
        else:
            raise ValueError(f"no init rule for {type(module).__name__}.{name}")


def trunc_normal_init(module: nn.Module) -> None:
    """timm-style init of a Linear, Conv2d or LayerNorm (other modules are left alone)."""
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.LayerNorm)):
        for name, tensor in module.named_parameters(recurse=False):
            init_layer_tensor(module, name, tensor)
