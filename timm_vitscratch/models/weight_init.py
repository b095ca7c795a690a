"""Weight initialisation: timm's ``weight_init`` schemes, one function per scheme applied per module.

As timm's ``init_weights_vit_timm`` / ``_jax`` / ``_moco``: a scheme is a function of one module,
applied to every submodule, children before their parent and in registration order (timm's
``named_apply``), so that the random draws come in timm's order. A Linear's rule may depend on its
role: the attention's fused qkv, a layer of an MLP, a classifier head. The layer holding the Linear
declares that role in its ``init_roles`` (timm reads the same from module names). A module that a
scheme has no rule for keeps its own init: its ``init_weights()`` where it has one (timm's hook), or
else torch's ``reset_parameters()`` when the caller asks for it (``needs_reset``; the constructor
does not, as every layer was just initialised by its own constructor).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection

import torch
from timm.layers import lecun_normal_, trunc_normal_
from torch import nn

from ..choices import WEIGHT_INITS

#: ``init(module, role, needs_reset)``: one scheme's rule for one module
InitFn = Callable[[nn.Module, str, bool], None]


def check_weight_init(mode: str) -> str:
    if mode not in WEIGHT_INITS:
        raise ValueError(f"weight_init must be one of {WEIGHT_INITS}, got {mode!r}")
    return mode


def _own_init(module: nn.Module, needs_reset: bool) -> None:
    """A module no scheme has a rule for: its ``init_weights()`` (timm's hook), else ``reset_parameters()``."""
    init_weights = getattr(module, "init_weights", None)
    if callable(init_weights):
        init_weights()
    elif needs_reset:
        reset_parameters(module, "", needs_reset)


def _zero_bias(linear: nn.Linear | nn.Conv2d) -> None:
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def init_timm(module: nn.Module, role: str = "", needs_reset: bool = True) -> None:
    """``''`` (timm's default): every Linear N(0, .02) truncated at ±2, zero bias."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        _zero_bias(module)
    else:
        _own_init(module, needs_reset)


def init_eva(module: nn.Module, role: str = "", needs_reset: bool = True) -> None:
    """timm ``Eva``'s pass (its default init): every Linear N(0, .02) truncated, zero bias; any other layer its
    ``reset_parameters()`` when asked (``needs_reset``), never ``init_weights()``, which Eva does not call."""
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        _zero_bias(module)
    else:
        reset_parameters(module, role, needs_reset)


def init_jax(module: nn.Module, role: str = "", needs_reset: bool = True, head_bias: float = 0.0) -> None:
    """``'jax'`` (the original Flax ViT's): Linear Xavier-uniform with zero bias, except MLP biases
    N(0, 1e-6) and the head, zero with bias ``head_bias``; the patch Conv2d lecun normal."""
    if isinstance(module, nn.Linear):
        if role == "head":
            nn.init.zeros_(module.weight)
            nn.init.constant_(module.bias, head_bias)
            return
        nn.init.xavier_uniform_(module.weight)
        if role == "mlp" and module.bias is not None:
            nn.init.normal_(module.bias, std=1e-6)
        else:
            _zero_bias(module)
    elif isinstance(module, nn.Conv2d):
        lecun_normal_(module.weight)
        _zero_bias(module)
    else:
        _own_init(module, needs_reset)


def init_moco(module: nn.Module, role: str = "", needs_reset: bool = True) -> None:
    """``'moco'`` (MoCo v3's): Linear Xavier-uniform, the fused qkv bounded as three layers, zero bias."""
    if isinstance(module, nn.Linear):
        if role == "qkv":  # q, k and v each as their own (dim -> dim) layer
            out_features, in_features = module.weight.shape
            bound = math.sqrt(6.0 / (out_features // 3 + in_features))
            nn.init.uniform_(module.weight, -bound, bound)
        else:
            nn.init.xavier_uniform_(module.weight)
        _zero_bias(module)
    else:
        _own_init(module, needs_reset)


def reset_parameters(module: nn.Module, role: str = "", needs_reset: bool = True) -> None:
    """``'reset'`` / ``'skip'``: every layer's own init, torch's ``reset_parameters()`` (nothing to
    redo when the layers were just built: ``needs_reset=False``)."""
    reset = getattr(module, "reset_parameters", None)
    if needs_reset and callable(reset):
        reset()


def scheme(mode: str, num_classes: int = 0) -> InitFn:
    """The per-module function of ``weight_init`` scheme ``mode``; ``'jax_nlhb'``'s head bias is -log(num_classes)."""
    check_weight_init(mode)
    if mode.startswith("jax"):
        head_bias = -math.log(num_classes) if mode == "jax_nlhb" and num_classes > 0 else 0.0
        return functools.partial(init_jax, head_bias=head_bias)
    if mode == "moco":
        return init_moco
    if mode in ("reset", "skip"):
        return reset_parameters
    return init_timm


def own_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The parameters and buffers ``module`` holds itself (not its children's)."""
    return [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]


def apply_init(
    init: InitFn,
    model: nn.Module,
    needs_reset: bool = True,
    only: Collection[int] | None = None,
    skip: Collection[str] = (),
) -> None:
    """``init`` on every submodule of ``model`` (not ``model`` itself), children first, in timm's order.

    Each submodule gets the role its parent's ``init_roles`` gives it. With ``only`` (the ids of
    tensors just given storage), a module is initialised only if it holds one of them, and its other
    tensors (loaded ones) keep their values: they sit out the init behind scratch stand-ins. ``skip``:
    children of ``model`` the caller initialises itself.
    """

    def visit(module: nn.Module, role: str) -> None:
        roles = getattr(module, "init_roles", {})
        for name, child in module.named_children():
            visit(child, roles.get(name, ""))
        if only is None:
            init(module, role, needs_reset)
            return
        tensors = own_tensors(module)
        if not any(id(tensor) in only for _, tensor in tensors):
            return
        kept = [(name, tensor) for name, tensor in tensors if id(tensor) not in only]
        for name, tensor in kept:
            setattr(module, name, _stand_in(tensor))
        init(module, role, needs_reset)
        for name, tensor in kept:
            setattr(module, name, tensor)

    roles = getattr(model, "init_roles", {})
    for name, child in model.named_children():
        if name not in skip:
            visit(child, roles.get(name, ""))


def _stand_in(tensor: torch.Tensor) -> torch.Tensor:
    scratch = torch.empty_like(tensor)
    return nn.Parameter(scratch, requires_grad=tensor.requires_grad) if isinstance(tensor, nn.Parameter) else scratch
