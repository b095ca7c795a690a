"""Parameter accounting: the true count, the leaf-module count torchsummary prints, and the formulas.

The true count is ``models.model_args.true_param_count``, which also bounds what a file may ask for (the
model it describes, built on ``meta`` and counted); the formulas here explain it and are tested against it.

torchsummary hooks every module except the model itself and containers and sums each one's
``weight`` and ``bias``. Parameters the model or a block holds directly (class, register and
distillation tokens, the position table, Eva's layer scales ``gamma_1``/``gamma_2`` and ``q_bias``/``v_bias``)
are never any module's weight or bias, so torchsummary does not see them; nor the weight of a module whose
forward never runs (Eva's ``qkv`` with the split bias, which the attention applies through ``F.linear``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ..models import Block
from ..models.layers import LayerScale
from ..models.model_args import true_param_count  # the one count; the size bound counts a meta model with it
from ..models.variants import ARCHITECTURES, TIMM_NAMES

#: torchvision builders with the same architecture as a registered variant.
TORCHVISION_EQUIVALENTS = {
    "scratch_vit_b16": "vit_b_16",
    "scratch_vit_b32": "vit_b_32",
    "scratch_vit_l16": "vit_l_16",
    "scratch_vit_l32": "vit_l_32",
    "scratch_vit_h14": "vit_h_14",
    "scratch_vit_b16_in21k": "vit_b_16",
    "scratch_vit_b32_in21k": "vit_b_32",
    "scratch_vit_l16_in21k": "vit_l_16",
    "scratch_vit_l32_in21k": "vit_l_32",
    "scratch_vit_h14_in21k": "vit_h_14",
}


def _bypassed_weights(model: nn.Module) -> set[str]:
    """Weights of modules whose forward never runs, so no hook sees them: an attention's ``qkv`` where the bias
    is split into ``q_bias``/``v_bias`` (timm's Eva, and ours with ``eva_names``, call ``F.linear`` with
    ``qkv.weight`` and the three biases)."""
    return {
        f"{name}.qkv.weight"
        for name, module in model.named_modules()
        if getattr(module, "q_bias", None) is not None and isinstance(getattr(module, "qkv", None), nn.Linear)
    }


def hidden_parameters(model: nn.Module) -> dict[str, int]:
    """Parameters torchsummary cannot see: those that are not a submodule's ``weight``/``bias``, and the weight
    of a module whose forward never runs."""
    hidden = OrderedDict()
    bypassed = _bypassed_weights(model)
    for name, param in model.named_parameters():
        owner, _, attr = name.rpartition(".")
        if not owner or attr not in ("weight", "bias") or name in bypassed:
            hidden[name] = param.numel()
    return hidden


def leaf_module_param_count(model: nn.Module) -> int:
    """The "Total params" torchsummary prints: the true count minus the hidden parameters."""
    return true_param_count(model) - sum(hidden_parameters(model).values())


def mlp_hidden_width(embed_dim: int, mlp_ratio: float = 4.0, swiglu_mlp: bool = False, swiglu_align_to: int = 0) -> int:
    """The MLP's hidden width M: ``int(h * mlp_ratio)``, a SwiGLU's rounded up to a multiple of ``swiglu_align_to``."""
    hidden = int(embed_dim * mlp_ratio)
    return hidden + (-hidden % swiglu_align_to if swiglu_mlp and swiglu_align_to else 0)


def block_part_formulas(
    embed_dim: int, mlp_hidden: int | None = None, mlp_matrices: int = 2, qkv_biases: int = 3, layer_scale: bool = False
) -> dict[str, int]:
    """One block's parameters by part, from its shape alone (h = ``embed_dim``, M = ``mlp_hidden``, 4h by default).

    attention: qkv 3h² plus ``qkv_biases`` bias vectors (3: one fused qkv bias; 2: Eva's q and v biases; 0: none),
    projection h²+h; MLP: ``mlp_matrices`` matrices of h x M (2: fc1 and fc2; 3: SwiGLU's fc1_g, fc1_x and fc2),
    each but fc2 with an M bias, fc2 an h bias; two LayerNorms 4h; layer scale 2h (when the block has it).
    The classic block: attention 4h²+4h, MLP 8h²+5h, norms 4h, 12h²+13h in all.
    """
    h, m = embed_dim, 4 * embed_dim if mlp_hidden is None else mlp_hidden
    return OrderedDict(
        attention=4 * h * h + (qkv_biases + 1) * h,
        mlp=mlp_matrices * h * m + (mlp_matrices - 1) * m + h,
        norms=4 * h,
        layer_scale=2 * h if layer_scale else 0,
    )


def block_param_formula(embed_dim: int, **shape: Any) -> int:
    """Parameters of one pre-norm block (:func:`block_part_formulas`); the classic one, MLP ratio 4 with a
    qkv bias: 12h² + 13h."""
    return sum(block_part_formulas(embed_dim, **shape).values())


def block_shape(block: nn.Module) -> dict[str, Any]:
    """The :func:`block_part_formulas` arguments of a built block: MLP width and matrices, qkv biases, layer scale."""
    assert isinstance(block, Block)  # a VisionTransformer's blocks; nn.Sequential types them as Module
    qkv = block.attn.qkv
    qkv_biases = 3 if qkv.bias is not None else 2 if block.attn.q_bias is not None else 0
    layer_scale = block.gamma_1 is not None or isinstance(block.ls1, LayerScale)
    hidden, matrices = block.mlp_shape
    return dict(mlp_hidden=hidden, mlp_matrices=matrices, qkv_biases=qkv_biases, layer_scale=layer_scale)


def _terms(h2: int, hm: int, m: int, h: int) -> str:
    """a·h² + b·hM + c·M + d·h written out, terms with a zero coefficient left out."""
    terms = [(h2, "h²"), (hm, "hM"), (m, "M"), (h, "h")]
    return "+".join(f"{'' if c == 1 else c}{unit}" for c, unit in terms if c) or "0"


def block_formula_text(
    embed_dim: int, mlp_hidden: int | None = None, mlp_matrices: int = 2, qkv_biases: int = 3, layer_scale: bool = False
) -> dict[str, str]:
    """:func:`block_part_formulas` as formulas in h (and M, the MLP width, where it is not 4h), with ``block``
    their sum: the classic block reads attention 4h²+4h, mlp 8h²+5h, norms 4h, block 12h²+13h."""
    width_is_4h = mlp_hidden is None or mlp_hidden == 4 * embed_dim
    parts = dict(
        attention=(4, 0, 0, qkv_biases + 1),
        mlp=(0, mlp_matrices, mlp_matrices - 1, 1),
        norms=(0, 0, 0, 4),
        layer_scale=(0, 0, 0, 2 if layer_scale else 0),
    )
    if width_is_4h:  # M = 4h: hM = 4h², M = 4h
        parts = {k: (h2 + 4 * hm, 0, 0, h + 4 * m) for k, (h2, hm, m, h) in parts.items()}
    text = OrderedDict((k, _terms(*c)) for k, c in parts.items() if any(c))
    text["block"] = _terms(*(sum(c[i] for c in parts.values()) for i in range(4)))
    return text


def block_param_breakdown(block: nn.Module) -> dict[str, int]:
    """One block's parameters by part: attention (qkv + proj, Eva's q/v biases), MLP, norms (norm1 + norm2),
    layer scale (``gamma_1``/``gamma_2`` or ``ls1``/``ls2``)."""
    parts = OrderedDict(attention=0, mlp=0, norms=0, layer_scale=0)
    for name, param in block.named_parameters():
        top = name.split(".", 1)[0]
        if top == "attn":
            parts["attention"] += param.numel()
        elif top == "mlp":
            parts["mlp"] += param.numel()
        elif top in ("norm1", "norm2"):
            parts["norms"] += param.numel()
        elif top in ("gamma_1", "gamma_2", "ls1", "ls2"):
            parts["layer_scale"] += param.numel()
        else:
            raise ValueError(f"block parameter {name!r} is in none of attention / MLP / norms / layer scale")
    return parts


def analytic_param_count(
    patch_size: int,
    embed_dim: int,
    depth: int,
    num_classes: int = 1000,
    img_size: int = 224,
    in_chans: int = 3,
    representation_size: int | None = None,
    distilled: bool = False,
    reg_tokens: int = 0,
    pos_embed: str = "learn",
    qkv_bias: bool = True,
    eva_names: bool = False,
    init_values: float | None = None,
    mlp_ratio: float = 4.0,
    swiglu_mlp: bool = False,
    swiglu_align_to: int = 0,
    mlp_hidden: int | None = None,
    class_token: bool = True,
    no_embed_class: bool = False,
    global_pool: str = "token",
    **_: Any,
) -> int:
    """The true count from the architecture alone (the keyword arguments of ``ARCHITECTURES``): patch projection,
    class/distillation/register tokens, a learned position table (none for ``pos_embed`` 'none' or 'sincos',
    rotary position has no parameters), the blocks (:func:`block_part_formulas`), final norm, representation, head(s).
    ``mlp_hidden`` gives the MLP width outright (else ``mlp_ratio`` and the SwiGLU alignment give it).
    ``global_pool='map'`` adds the attention pool (SigLIP): a latent query, q / kv / output projections, a norm, an MLP.
    """
    prefix = int(class_token) + int(distilled)
    patches = (img_size // patch_size) ** 2
    count = patch_size**2 * in_chans * embed_dim + embed_dim  # patch projection
    count += (prefix + reg_tokens) * embed_dim  # tokens
    if pos_embed == "learn":  # a row per patch, and per prefix token unless they have none (no_embed_class)
        count += (patches + (0 if no_embed_class else prefix + reg_tokens)) * embed_dim
    if global_pool == "map":
        pool_hidden = int(embed_dim * mlp_ratio)
        count += 4 * embed_dim**2 + 2 * embed_dim * pool_hidden + pool_hidden + 8 * embed_dim
    shape = dict(
        mlp_hidden=mlp_hidden or mlp_hidden_width(embed_dim, mlp_ratio, swiglu_mlp, swiglu_align_to),
        mlp_matrices=3 if swiglu_mlp else 2,
        qkv_biases=(2 if eva_names else 3) if qkv_bias else 0,
        layer_scale=init_values is not None,
    )
    count += depth * block_param_formula(embed_dim, **shape) + 2 * embed_dim  # blocks + final norm
    head_in = embed_dim
    if representation_size:
        count += embed_dim * representation_size + representation_size
        head_in = representation_size
    if num_classes:
        count += (2 if distilled else 1) * (head_in * num_classes + num_classes)
    return count


def param_breakdown(model: nn.Module) -> dict[str, int]:
    """The tally a reader makes by hand: patch embedding, tokens, encoder blocks, final norm, head."""
    groups = OrderedDict(
        (k, 0)
        for k in (
            "patch embedding (conv)",
            "class/dist/register tokens",
            "position embedding",
            "encoder blocks",
            "final norm",
            "representation (pre_logits)",
            "classifier head(s)",
        )
    )
    for name, param in model.named_parameters():
        if name.startswith("patch_embed."):
            key = "patch embedding (conv)"
        elif name in ("cls_token", "dist_token", "reg_token"):
            key = "class/dist/register tokens"
        elif name == "pos_embed":
            key = "position embedding"
        elif name.startswith("blocks."):
            key = "encoder blocks"
        elif name.startswith("norm."):
            key = "final norm"
        elif name.startswith("pre_logits."):
            key = "representation (pre_logits)"
        else:
            key = "classifier head(s)"
        groups[key] += param.numel()
    return groups


def torchvision_reference(model_name: str, num_classes: int | None = None, device: Any = "meta") -> nn.Module | None:
    """torchvision's model of the same architecture (on ``meta`` by default), or None (DeiT, DINOv2 / v3 and SigLIP
    have none).

    Uses torchvision's named builder (``vit_b_16`` ...) where one exists, else its generic
    ``VisionTransformer`` class (ViT-Ti/S). The benchmarks build their torchvision contestant here.
    """
    arch = ARCHITECTURES[model_name]
    if arch.get("distilled") or model_name in TIMM_NAMES:
        return None
    import torchvision

    default_classes = 21843 if model_name.endswith("_in21k") else 1000
    kwargs: dict[str, Any] = dict(num_classes=default_classes if num_classes is None else num_classes)
    if arch.get("representation_size"):
        kwargs["representation_size"] = arch["representation_size"]
    with torch.device(device):
        builder = TORCHVISION_EQUIVALENTS.get(model_name)
        if builder is not None:
            return getattr(torchvision.models, builder)(**kwargs)
        h = arch["embed_dim"]
        return torchvision.models.VisionTransformer(
            image_size=224,
            patch_size=arch["patch_size"],
            num_layers=arch["depth"],
            num_heads=arch["num_heads"],
            hidden_dim=h,
            mlp_dim=4 * h,
            **kwargs,
        )


def torchvision_param_count(model_name: str, num_classes: int | None = None) -> int | None:
    """True count of torchvision's equivalent model, or None if it has none."""
    reference = torchvision_reference(model_name, num_classes)
    return None if reference is None else true_param_count(reference)


def timm_reference(model_name: str, num_classes: int, device: Any = "meta") -> nn.Module | None:
    """timm's own model of the same architecture (``TIMM_NAMES``: its ``Eva`` for DINOv3, its ``VisionTransformer``
    under another name for DINOv2 and SigLIP), on ``meta`` by default,
    with ``num_classes`` classes; None for a variant without one there."""
    timm_name = TIMM_NAMES.get(model_name)
    if timm_name is None:
        return None
    import timm

    with torch.device(device):
        return timm.create_model(timm_name, num_classes=num_classes)


def reference_param_count(model_name: str, num_classes: int) -> tuple[str, int] | None:
    """The library and model a variant's count is set beside, and that model's true count at ``num_classes``:
    torchvision's for the classic ViT, timm's for DINOv2 / v3 and SigLIP; None where neither has the architecture
    (DeiT)."""
    if model_name in TIMM_NAMES:
        reference = timm_reference(model_name, num_classes)
        return None if reference is None else (f"timm {TIMM_NAMES[model_name]}", true_param_count(reference))
    count = torchvision_param_count(model_name, num_classes)
    label = f"torchvision {TORCHVISION_EQUIVALENTS.get(model_name, 'VisionTransformer')}"
    return None if count is None else (label, count)
