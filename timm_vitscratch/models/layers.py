"""Small building blocks of the Vision Transformer, in plain torch, and timm's layer options.

The MLP (and the gated SwiGLU), LayerScale, stochastic depth and patch dropout; how timm's ``act_layer`` and
``norm_layer`` arguments resolve. Module and parameter names are timm's (``mlp.fc1``,
``ls1.gamma`` ...) so that timm ViT/DeiT state dicts load without renames. Every layer takes
keyword options named as timm names them, and timm's ``device`` / ``dtype`` factory arguments,
which it passes to every tensor it makes: a model is built directly where it is to live.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar, TypedDict

import torch
import torch.nn.functional as F
from timm.layers import LayerNorm as TimmLayerNorm
from timm.layers import RmsNorm as TimmRmsNorm
from timm.layers import get_act_layer, get_norm_layer, trunc_normal_
from torch import nn

#: an activation as timm's ``act_layer`` takes it: a name timm knows, or a module class (or factory)
ActLayer = str | type[nn.Module] | Callable[[], nn.Module]
#: a norm as the layers build it: ``norm_layer(dim, device=..., dtype=...)``
NormLayer = Callable[..., nn.Module]
#: timm's LayerNorm eps (``timm.layers.LayerNorm``, the norm of timm's ViT)
DEFAULT_NORM_EPS = 1e-6


class FactoryKwargs(TypedDict):
    """timm's ``dd``: the device and dtype a layer makes its tensors with, passed on to its sublayers."""

    device: torch.device | str | None
    dtype: torch.dtype | None


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


class RmsNorm(nn.Module):
    """Root-mean-square norm over the last dimension with a learned scale (no bias, no centring), timm's ``RmsNorm``
    (AIMv2's): ``x / sqrt(mean(x²) + eps) * weight``, by torch's ``rms_norm`` as timm's computes it."""

    def __init__(
        self,
        channels: int,
        eps: float = DEFAULT_NORM_EPS,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = (channels,)
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


#: the model's norm kinds by the names a file gives ``norm_layer`` (``choices.NORM_NAMES``): timm's LayerNorm and
#: RmsNorm, each built here with the one eps (a name states none: ``norm_eps`` does)
NORM_KINDS: dict[str, type[nn.Module]] = {"layernorm": nn.LayerNorm, "rmsnorm": RmsNorm}


def _norm_kind_eps(norm_layer: Any) -> tuple[str, float | None]:
    """The kind of timm's ``norm_layer`` argument (a LayerNorm with weight and bias, or an RmsNorm with weight), and
    the eps it states (None for a name)."""
    if isinstance(norm_layer, str) and norm_layer.lower() in NORM_KINDS:
        return norm_layer.lower(), None
    try:
        factory = get_norm_layer(norm_layer)
        layer = factory(8) if factory is not None else None
    except (AssertionError, KeyError, TypeError, ValueError):
        layer = None
    if isinstance(layer, (TimmRmsNorm, RmsNorm)) and type(layer) in (TimmRmsNorm, RmsNorm) and layer.weight is not None:
        return "rmsnorm", float(layer.eps)
    if (
        not isinstance(layer, nn.LayerNorm)
        or type(layer) not in (nn.LayerNorm, TimmLayerNorm)
        or not layer.elementwise_affine
        or layer.bias is None
    ):
        raise ValueError(
            f"norm_layer must be a LayerNorm or an RmsNorm (nn.LayerNorm, timm.layers.LayerNorm or RmsNorm, "
            f"'layernorm', 'rmsnorm', or a partial of one with eps=...), got {norm_layer!r}; the model's norms are "
            f"LayerNorms with weight and bias or RmsNorms with weight (their eps is also norm_eps)"
        )
    return "layernorm", float(layer.eps)


def resolve_norm_eps(norm_layer: Any, norm_eps: float = DEFAULT_NORM_EPS) -> float:
    """The one eps of every norm of the model, from timm's ``norm_layer`` or our ``norm_eps``.

    ``norm_layer`` is timm's argument: ``nn.LayerNorm`` (eps 1e-5), timm's ``LayerNorm`` or ``RmsNorm``, a name
    (``'layernorm'``, ``'rmsnorm'``), or a partial of one with ``eps`` (timm's CLIP towers pass
    ``partial(LayerNorm, eps=1e-5)``), resolved by timm's ``get_norm_layer``; its eps is the
    model's. ``norm_eps`` states the eps as a number, the form a config.json records; at its
    default (timm's 1e-6) it leaves the choice to ``norm_layer``, and otherwise the two must agree. A name states no
    eps: ``norm_eps`` is its eps.
    """
    if norm_layer is None:
        return norm_eps
    layer_eps = _norm_kind_eps(norm_layer)[1]
    if layer_eps is None:
        return norm_eps
    if norm_eps not in (DEFAULT_NORM_EPS, layer_eps):
        raise ValueError(f"norm_layer has eps {layer_eps:g} but norm_eps is {norm_eps:g}; pass one of them")
    return layer_eps


def resolve_norm_layer(norm_layer: Any, norm_eps: float = DEFAULT_NORM_EPS) -> NormLayer:
    """The model's norm layer from timm's ``norm_layer`` (None: LayerNorm) with the one eps (:func:`resolve_norm_eps`)."""
    kind = "layernorm" if norm_layer is None else _norm_kind_eps(norm_layer)[0]
    return functools.partial(NORM_KINDS[kind], eps=resolve_norm_eps(norm_layer, norm_eps))


def embed_norm(embed_norm_layer: Any, norm_layer: Any, norm_eps: float = DEFAULT_NORM_EPS) -> NormLayer | None:
    """The patch tokens' norm (timm's ``embed_norm_layer``): of its own kind, with the model's one eps; None: none."""
    if embed_norm_layer is None:
        return None
    return functools.partial(
        NORM_KINDS[_norm_kind_eps(embed_norm_layer)[0]], eps=resolve_norm_eps(norm_layer, norm_eps)
    )


def layer_norm(eps: float = DEFAULT_NORM_EPS) -> NormLayer:
    """The model's norm layer: ``nn.LayerNorm`` with the one eps, as timm's layers take ``norm_layer``."""
    return functools.partial(nn.LayerNorm, eps=eps)


#: the layers' default norm: timm's LayerNorm eps
DEFAULT_NORM_LAYER = layer_norm(DEFAULT_NORM_EPS)


def to_2tuple(value: int | tuple[int, int], name: str) -> tuple[int, int]:
    """Return ``value`` as an (height, width) pair, accepting an int or a pair."""
    if isinstance(value, int):
        return value, value
    pair = tuple(value)
    if len(pair) != 2 or not isinstance(pair[0], int) or not isinstance(pair[1], int):
        raise ValueError(f"{name} must be an int or a pair of ints (height, width), got {value!r}")
    return pair[0], pair[1]


def normal_init_(tensor: torch.Tensor, std: float = 0.02) -> torch.Tensor:
    """A new Linear weight as timm's default scheme draws it: N(0, std²) truncated at ±2 (timm's ``trunc_normal_``)."""
    return trunc_normal_(tensor, std=std)


class LayerScale(nn.Module):
    """Learned per-channel scale of a residual branch (CaiT / DeiT-III), initialised to ``init_values``."""

    def __init__(
        self,
        dim: int,
        *,
        init_values: float = 1e-5,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.init_values = init_values
        self.gamma = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.gamma, self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def _inner_norm(norm_layer: NormLayer | None, width: int, dd: FactoryKwargs) -> nn.Module:
    """The MLPs' ``norm`` between the activation and fc2: a LayerNorm with EVA02's ``scale_mlp``, else an
    Identity (timm's hook point)."""
    return norm_layer(width, **dd) if norm_layer is not None else nn.Identity()


class Mlp(nn.Module):
    """Two-layer perceptron: fc1 -> act (GELU unless ``act_layer`` says) -> drop -> norm -> fc2 -> drop."""

    #: for the weight-init schemes: both layers are an MLP's ('jax' draws their biases)
    init_roles: ClassVar[dict[str, str]] = {"fc1": "mlp", "fc2": "mlp"}
    #: matrices of width x hidden it multiplies by (for FLOPs and memory estimates)
    num_matrices: ClassVar[int] = 2

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        *,
        act_layer: Callable[[], nn.Module] = nn.GELU,
        norm_layer: NormLayer | None = None,
        bias: bool = True,
        drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        hidden_features = hidden_features or in_features
        self.hidden_features = hidden_features
        self.fc1 = nn.Linear(in_features, hidden_features, bias=bias, **dd)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = _inner_norm(norm_layer, hidden_features, dd)
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias, **dd)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class SwiGLU(nn.Module):
    """Gated MLP: fc2(silu(fc1_g(x)) * fc1_x(x)), timm's ``SwiGLU`` names (``fc1_g``, ``fc1_x``, ``act``, ``fc2``).

    ``align_to`` rounds the hidden width up to a multiple (DINOv3's S+, H+ and 7B use 8 and 64)."""

    init_roles: ClassVar[dict[str, str]] = {"fc1_g": "mlp", "fc1_x": "mlp", "fc2": "mlp"}
    num_matrices: ClassVar[int] = 3

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        *,
        align_to: int = 0,
        norm_layer: NormLayer | None = None,
        bias: bool = True,
        drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        hidden_features = hidden_features or in_features
        if align_to:
            hidden_features += -hidden_features % align_to
        self.hidden_features = hidden_features
        self.fc1_g = nn.Linear(in_features, hidden_features, bias=bias, **dd)
        self.fc1_x = nn.Linear(in_features, hidden_features, bias=bias, **dd)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(drop)
        self.norm = _inner_norm(norm_layer, hidden_features, dd)
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias, **dd)
        self.drop2 = nn.Dropout(drop)

    def init_weights(self) -> None:
        """timm's ``SwiGLU`` hook, which its ViT init calls after the layers' draws (AIMv2): the gate ``fc1_g``
        starts near zero (weights N(0, 1e-6)) with bias one. (timm's ``Eva`` init does not call it.)"""
        if self.fc1_g.bias is not None:
            nn.init.ones_(self.fc1_g.bias)
        nn.init.normal_(self.fc1_g.weight, std=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1_g(x)) * self.fc1_x(x)))))


class PackedSwiGLU(nn.Module):
    """The same gated MLP with the two input layers as one: ``fc1`` (width -> 2 x hidden), its first half
    gated by SiLU times its second half, then ``fc2``; timm's ``GluMlp`` as DINOv2 giant (``SwiGLUPacked``)
    and EVA02 tiny / small build it, with its names (``fc1``, ``act``, ``drop1``, ``norm``, ``fc2``, ``drop2``).
    ``hidden_features`` is the gated width, fc2's input, as for :class:`SwiGLU`."""

    init_roles: ClassVar[dict[str, str]] = {"fc1": "mlp", "fc2": "mlp"}
    num_matrices: ClassVar[int] = 3

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        *,
        norm_layer: NormLayer | None = None,
        bias: bool = True,
        drop: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        dd: FactoryKwargs = {"device": device, "dtype": dtype}
        hidden_features = hidden_features or in_features
        self.hidden_features = hidden_features
        self.fc1 = nn.Linear(in_features, 2 * hidden_features, bias=bias, **dd)
        self.act = nn.SiLU()
        self.drop1 = nn.Dropout(drop)
        self.norm = _inner_norm(norm_layer, hidden_features, dd)
        self.fc2 = nn.Linear(hidden_features, in_features, bias=bias, **dd)
        self.drop2 = nn.Dropout(drop)

    def init_weights(self) -> None:
        """timm's ``GluMlp`` hook, which its ViT init calls after fc1's draw: the multiplied half of ``fc1``
        starts near zero (weights N(0, 1e-6)) with bias one. (timm's ``Eva`` init does not call it.)"""
        half = self.hidden_features
        with torch.no_grad():
            if self.fc1.bias is not None:
                nn.init.ones_(self.fc1.bias[half:])
            nn.init.normal_(self.fc1.weight[half:], std=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(gate) * value))))


#: the blocks' MLP kinds
MlpLayer = Mlp | SwiGLU | PackedSwiGLU


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

    def __init__(self, prob: float = 0.5, *, num_prefix_tokens: int = 1) -> None:
        super().__init__()
        if not 0.0 <= prob < 1.0:
            raise ValueError(f"patch_drop_rate must be in [0, 1), got {prob}")
        self.prob = prob
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with_indices(x)[0]

    def forward_with_indices(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The kept tokens and, when any were dropped, the (B, kept) indices of the kept patches."""
        if not self.training or self.prob == 0.0:
            return x, None
        prefix, patches = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
        batch, tokens = patches.shape[0], patches.shape[1]
        num_keep = max(1, int(tokens * (1.0 - self.prob)))
        keep = torch.randn(batch, tokens, device=x.device).argsort(dim=-1)[:, :num_keep]
        patches = patches.gather(1, keep.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
        return torch.cat([prefix, patches], dim=1), keep

    def extra_repr(self) -> str:
        return f"prob={self.prob}, num_prefix_tokens={self.num_prefix_tokens}"


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
