"""Building blocks of the Vision Transformer, written in plain torch.

Module and parameter names are timm's (``patch_embed.proj``, ``attn.qkv``, ``attn.q_norm``,
``ls1.gamma``, ``mlp.fc1``, ``attn_pool.latent`` ...) so that timm ViT/DeiT state dicts load
without renames.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import Format, get_act_layer, get_norm_layer, resample_patch_embed
from timm.layers import LayerNorm as TimmLayerNorm
from torch import nn

from .packing import PackedSegments

ATTN_IMPLS = ("sdpa", "eager")
#: Weight-init schemes, as timm's ``weight_init`` argument names them.
WEIGHT_INITS = ("", "jax", "jax_nlhb", "moco", "reset", "skip")


#: an activation as timm's ``act_layer`` takes it: a name timm knows, or a module class (or factory)
ActLayer = str | type[nn.Module] | Callable[[], nn.Module]


def resolve_act_layer(act_layer: ActLayer | None) -> Callable[[], nn.Module]:
    """timm's ``act_layer`` argument as a factory of MLP activations: a name is resolved by timm's
    ``get_act_layer`` (``'quick_gelu'``, ``'gelu_tanh'``, ``'silu'`` ...); None is ``nn.GELU`` (timm's default)."""
    if act_layer is None or act_layer == "":
        return nn.GELU
    if isinstance(act_layer, str):
        try:
            return get_act_layer(act_layer)
        except KeyError:
            raise ValueError(
                f"act_layer {act_layer!r} is not an activation timm knows by name (timm.layers."
                f"get_act_layer), e.g. 'gelu', 'quick_gelu', 'gelu_tanh', 'silu'"
            ) from None
    if not callable(act_layer):
        raise ValueError(f"act_layer must be an activation name or a module class, got {act_layer!r}")
    return act_layer


def norm_layer_eps(norm_layer: Any) -> float:
    """The eps of timm's ``norm_layer`` argument, for the LayerNorm kinds the model holds.

    timm's CLIP towers pass ``partial(LayerNorm, eps=1e-5)``; ``nn.LayerNorm``, timm's ``LayerNorm``,
    the name ``'layernorm'`` and partials of them with ``eps`` are taken (resolved by timm's
    ``get_norm_layer``). Other norms (RMSNorm, ...) are refused: the model's norms are LayerNorms.
    """
    try:
        factory = get_norm_layer(norm_layer)
        layer = factory(8) if factory is not None else None
    except (AssertionError, KeyError, TypeError):
        layer = None
    if type(layer) not in (nn.LayerNorm, TimmLayerNorm) or not layer.elementwise_affine or layer.bias is None:
        raise ValueError(
            f"norm_layer must be a LayerNorm (nn.LayerNorm, timm.layers.LayerNorm, 'layernorm', or "
            f"a partial of one with eps=...), got {norm_layer!r}; the model's norms are LayerNorms "
            f"with weight and bias (their eps is also norm_eps)"
        )
    return float(layer.eps)


def to_2tuple(value: int | tuple[int, int], name: str) -> tuple[int, int]:
    """Return ``value`` as an (height, width) pair, accepting an int or a pair."""
    if isinstance(value, int):
        return value, value
    pair = tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")
    return pair  # type: ignore[return-value]


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
    if x.dim() != 4 or x.shape[1] != in_chans or (strict and (x.shape[2] != img_size[0] or x.shape[3] != img_size[1])):
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


class PatchEmbed(nn.Module):
    """Image to patch tokens with one strided convolution, in timm's layouts and with timm's attributes.

    (B, C, H, W) -> (B, H/p * W/p, D) tokens (``flatten``), or with ``output_fmt`` the patch grid in
    that layout (``'NHWC'``: (B, H/p, W/p, D), what the model asks for with ``dynamic_img_size``).
    ``strict_img_size=False`` takes any image whose sides are multiples of the patch size (or any
    size with ``dynamic_img_pad``, which pads right and bottom up to the next multiple). ``norm``
    is an Identity, as in timm's ViT (a hook point).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        bias: bool = True,
        strict_img_size: bool = True,
        dynamic_img_pad: bool = False,
        output_fmt: str | None = None,
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
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)
        self.norm = nn.Identity()

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
                if old.bias is not None:
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


def _norm(dim: int, enabled: bool, eps: float) -> nn.Module:
    return nn.LayerNorm(dim, eps=eps) if enabled else nn.Identity()


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
    """Multi-head self-attention with one fused qkv projection (and timm's optional q/k LayerNorm).

    ``fused_attn`` (timm's switch, set from ``attn_impl``: ``'sdpa'`` True, ``'eager'`` False) runs
    ``F.scaled_dot_product_attention``; off, the attention matrix is materialised and passes
    through ``attn_drop`` (where timm's ``AttentionExtract`` hooks read it). Both compute the same
    function. ``norm`` (the merged heads, before ``proj``) is an Identity, as in timm's ViT.
    """

    __jit_unused_properties__ = ["attn_impl"]

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        qkv_bias: bool = True,
        qk_scale: float | None = None,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        attn_impl: str = "sdpa",
        qk_norm: bool = False,
        proj_bias: bool = True,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if num_heads < 1 or dim % num_heads:
            raise ValueError(f"embed_dim {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = qk_scale if qk_scale is not None else self.head_dim**-0.5
        self.fused_attn = check_attn_impl(attn_impl) == "sdpa"
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = _norm(self.head_dim, qk_norm, norm_eps)
        self.k_norm = _norm(self.head_dim, qk_norm, norm_eps)
        self.attn_drop = nn.Dropout(attn_drop)
        self.norm = nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=proj_bias)
        self.proj_drop = nn.Dropout(proj_drop)

    @property
    def attn_impl(self) -> str:
        """``'sdpa'`` or ``'eager'``: the path ``fused_attn`` selects."""
        return "sdpa" if self.fused_attn else "eager"

    def _split_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv projection -> q, k, v of shape (B, heads, N, head_dim)."""
        batch, tokens, _ = x.shape
        # split on the q/k/v axis of (B, N, 3, heads, head_dim) and only then move heads forward:
        # backward stacks the three gradients straight into the projection's layout
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, self.head_dim).unbind(2)
        return self.q_norm(q.transpose(1, 2)), self.k_norm(k.transpose(1, 2)), v.transpose(1, 2)

    def _split_heads_for_queries(
        self, x: torch.Tensor, num_queries: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``_split_heads``, but queries only for the first ``num_queries`` tokens (keys and values for all).

        The projection runs as a module call over every token (forward hooks on ``qkv``, such as
        torchsummary's, see it run; the extra query rows cost a twelfth of one block), and the
        query normalisation runs for the kept queries alone.
        """
        batch, tokens, _ = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, self.head_dim).unbind(2)
        q = q[:, :num_queries]
        return self.q_norm(q.transpose(1, 2)), self.k_norm(k.transpose(1, 2)), v.transpose(1, 2)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax attention matrix (B, heads, N, N) for normalised tokens ``x``."""
        q, k, _ = self._split_heads(x)
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

    @torch.jit.unused
    def _attention_maybe_packed(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """NaFlex: for a packed sequence ``attn_mask`` is its ``PackedSegments``; each image attends to itself."""
        if isinstance(attn_mask, PackedSegments):
            return attn_mask.attend(q, k, v, self._attention)
        return self._attention(q, k, v, attn_mask)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, heads, Nq, head_dim) queries against all keys/values -> projected (B, Nq, dim) tokens."""
        batch, _, queries, _ = q.shape
        if torch.jit.is_scripting():
            x = self._attention(q, k, v, attn_mask)
        else:
            x = self._attention_maybe_packed(q, k, v, attn_mask)
        # SDPA's CPU and CUDA kernels already lay their output out as (B, Nq, heads, head_dim),
        # so this reshape is a view, not a copy
        x = x.transpose(1, 2).reshape(batch, queries, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(self.norm(x)))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._split_heads(x)
        return self._attend(q, k, v, attn_mask)

    def forward_queries(self, x: torch.Tensor, num_queries: int) -> torch.Tensor:
        """Attention outputs of the first ``num_queries`` tokens only (they attend to every token)."""
        q, k, v = self._split_heads_for_queries(x, num_queries)
        return self._attend(q, k, v)


class LayerScale(nn.Module):
    """Learned per-channel scale of a residual branch (CaiT / DeiT-III), initialised to ``init_values``."""

    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.full((dim,), init_values))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class Mlp(nn.Module):
    """Two-layer perceptron: fc1 -> act (GELU unless ``act_layer`` says) -> drop -> norm (Identity) -> fc2 -> drop."""

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        drop: float = 0.0,
        bias: bool = True,
        act_layer: Callable[[], nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim, bias=bias)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()  # timm's hook point between the activation and fc2
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


def drop_path(x: torch.Tensor, drop_prob: float, training: bool) -> torch.Tensor:
    """Zero whole samples with probability ``drop_prob`` and rescale survivors by 1/keep."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1.0 - drop_prob
    mask_shape = [x.shape[0]] + [1] * (x.dim() - 1)
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


class PatchDropout(nn.Module):
    """In training, keep a random ``1 - prob`` share of the patch tokens per sample (at least one).

    The first ``num_prefix_tokens`` tokens (class, distillation, register) are always kept, in front.
    """

    def __init__(self, prob: float = 0.5, num_prefix_tokens: int = 1) -> None:
        super().__init__()
        if not 0.0 <= prob < 1.0:
            raise ValueError(f"patch_drop_rate must be in [0, 1), got {prob}")
        self.prob = prob
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.prob == 0.0:
            return x
        prefix, patches = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
        batch, tokens = patches.shape[0], patches.shape[1]
        num_keep = max(1, int(tokens * (1.0 - self.prob)))
        keep = torch.randn(batch, tokens, device=x.device).argsort(dim=-1)[:, :num_keep]
        patches = patches.gather(1, keep.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
        return torch.cat([prefix, patches], dim=1)

    def extra_repr(self) -> str:
        return f"prob={self.prob}, num_prefix_tokens={self.num_prefix_tokens}"


class Block(nn.Module):
    """Pre-norm transformer block: x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x)))."""

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
        qk_norm: bool = False,
        proj_bias: bool = True,
        init_values: float | None = None,
        act_layer: Callable[[], nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(
            dim, num_heads, qkv_bias, qk_scale, attn_drop, proj_drop, attn_impl, qk_norm, proj_bias, norm_eps
        )
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), proj_drop, proj_bias, act_layer)
        self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask)))
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


class AttentionPool(nn.Module):
    """Attention pooling with one learned latent query (SigLIP's "MAP" head); timm's ``attn_pool.*`` names.

    The latent attends over the tokens (queries from ``q``, keys and values from ``kv``), is
    projected, and passes a residual LayerNorm + MLP: (B, N, D) -> (B, D). ``q_norm``, ``k_norm``
    and ``proj_drop`` are timm's hook points (Identity, Identity, Dropout(0)).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        norm_eps: float = 1e-6,
        attn_impl: str = "sdpa",
        act_layer: Callable[[], nn.Module] = nn.GELU,
    ) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} must be divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.fused_attn = check_attn_impl(attn_impl) == "sdpa"
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=act_layer)

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


def check_attn_impl(attn_impl: str) -> str:
    if attn_impl not in ATTN_IMPLS:
        raise ValueError(f"attn_impl must be one of {ATTN_IMPLS}, got {attn_impl!r}")
    return attn_impl


def sincos_2d_pos_embed(
    grid_size: tuple[int, int],
    dim: int,
    num_prefix_tokens: int = 0,
    temperature: float = 10000.0,
    device: torch.device | None = None,
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


def _fans(tensor: torch.Tensor) -> tuple[int, int]:
    receptive = math.prod(tensor.shape[2:]) if tensor.dim() > 2 else 1
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def init_layer_tensor(
    module: nn.Module, name: str, tensor: torch.Tensor, mode: str = "", qualified_name: str = "", head_bias: float = 0.0
) -> None:
    """Initialise one tensor of a layer by the ``weight_init`` scheme ``mode`` (timm's names).

    ``''`` (timm): Linear N(0, .02); ``'jax'`` / ``'jax_nlhb'``: Linear Xavier-uniform, MLP biases
    N(0, 1e-6), the head zero with bias ``head_bias``; ``'moco'``: Xavier-uniform, qkv per q/k/v;
    ``'reset'`` / ``'skip'``: torch's own layer defaults. In every scheme the patch Conv2d is
    lecun normal (torch's default under reset/skip), LayerNorm ones and zeros, LayerScale
    ``init_values``, the pooling latent N(0, 1/dim) truncated, other biases zero. A ``meta``
    tensor holds no data and is skipped (``VisionTransformer.materialize`` initialises it later).
    """
    if tensor.is_meta:
        return
    fan_in, fan_out = _fans(tensor) if tensor.dim() > 1 else (0, 0)
    with torch.no_grad():
        if isinstance(module, LayerScale):
            tensor.fill_(module.init_values)
        elif isinstance(module, AttentionPool):  # the latent
            normal_init_(tensor, std=tensor.shape[-1] ** -0.5)
        elif isinstance(module, nn.LayerNorm):
            tensor.fill_(1.0 if name == "weight" else 0.0)
        elif not isinstance(module, (nn.Linear, nn.Conv2d)):
            raise ValueError(f"no init rule for {type(module).__name__}.{name}")
        elif mode in ("reset", "skip"):
            fan_in = module.weight.shape[1] * (math.prod(module.weight.shape[2:]) if module.weight.dim() > 2 else 1)
            bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0  # torch's kaiming_uniform(a=sqrt(5)) equals this
            tensor.uniform_(-bound, bound)
        elif isinstance(module, nn.Conv2d):
            tensor.zero_() if name == "bias" else normal_init_(tensor, std=math.sqrt(1.0 / fan_in))
        elif mode.startswith("jax") and qualified_name.startswith("head"):
            tensor.fill_(head_bias) if name == "bias" else tensor.zero_()
        elif name == "bias":
            tensor.normal_(0.0, 1e-6) if mode.startswith("jax") and ".mlp." in f".{qualified_name}" else tensor.zero_()
        elif mode.startswith("jax"):
            nn.init.xavier_uniform_(tensor)
        elif mode == "moco":
            if qualified_name.endswith("qkv"):  # q, k and v each as their own layer
                bound = math.sqrt(6.0 / (tensor.shape[0] // 3 + tensor.shape[1]))
                tensor.uniform_(-bound, bound)
            else:
                nn.init.xavier_uniform_(tensor)
        else:
            normal_init_(tensor, std=0.02)


def init_module_tensors(module: nn.Module, mode: str = "", qualified_name: str = "", head_bias: float = 0.0) -> None:
    """``init_layer_tensor`` for every tensor a layer holds itself (not its children's)."""
    for name, tensor in module.named_parameters(recurse=False):
        init_layer_tensor(module, name, tensor, mode, qualified_name, head_bias)


def trunc_normal_init(module: nn.Module) -> None:
    """timm's default init of every Linear, Conv2d, LayerNorm and LayerScale in ``module``."""
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.Conv2d, nn.LayerNorm, LayerScale, AttentionPool)):
            init_module_tensors(sub)
