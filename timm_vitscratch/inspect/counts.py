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

import inspect
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ..models import TransformerBlock, VisionTransformer
from ..models.architecture import describe_model
from ..models.attention import Attention, SeparateQkvAttention
from ..models.meta_init import SkipInitOnMeta
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
    embed_dim: int,
    mlp_hidden: int | None = None,
    mlp_matrices: int = 2,
    qkv_biases: int = 3,
    layer_scale: bool = False,
    mlp_norm: bool = False,
    attn_norm: bool = False,
    proj_bias: bool = True,
    norm_size: int = 2,
) -> dict[str, int]:
    """One block's parameters by part, from its shape alone (h = ``embed_dim``, M = ``mlp_hidden``, 4h by default).

    attention: q, k and v 3h² (fused or not) plus ``qkv_biases`` bias vectors (3: a fused qkv bias; 2: Eva's q and v
    biases, fused or on its separate q / v projections; 0: none), a LayerNorm 2h on the merged heads with
    ``attn_norm`` (EVA02-CLIP's ``scale_attn_inner``), projection h²+h;
    MLP: ``mlp_matrices`` matrices of h x M (2: fc1 and fc2; 3: a SwiGLU's gate, value and fc2, as separate layers
    or packed in one fc1 of 2M), each but fc2 with an M bias, fc2 an h bias, and a LayerNorm 2M before fc2 with
    ``mlp_norm`` (EVA02's ``scale_mlp``); two LayerNorms 4h; layer scale 2h (when the block has it).
    Without ``proj_bias`` the projection and the MLP's layers have no bias (AIMv2); ``norm_size`` is each norm's
    parameters per channel: 2 for a LayerNorm (weight and bias), 1 for an RmsNorm (weight).
    The classic block: attention 4h²+4h, MLP 8h²+5h, norms 4h, 12h²+13h in all.
    """
    h, m, n, b = embed_dim, 4 * embed_dim if mlp_hidden is None else mlp_hidden, norm_size, int(proj_bias)
    return OrderedDict(
        attention=4 * h * h + (qkv_biases + b + (n if attn_norm else 0)) * h,
        mlp=mlp_matrices * h * m + (b * (mlp_matrices - 1) + (n if mlp_norm else 0)) * m + b * h,
        norms=2 * n * h,
        layer_scale=2 * h if layer_scale else 0,
    )


def block_param_formula(embed_dim: int, **shape: Any) -> int:
    """Parameters of one pre-norm block (:func:`block_part_formulas`); the classic one, MLP ratio 4 with a
    qkv bias: 12h² + 13h."""
    return sum(block_part_formulas(embed_dim, **shape).values())


def _norm_size(module: nn.Module | None) -> int:
    """A norm layer's parameters per channel: 2 for a LayerNorm (weight and bias), 1 for an RmsNorm (weight); 0 for
    the Identity in a norm's place."""
    return 0 if module is None else len(list(module.parameters()))


def _is_norm(module: nn.Module | None) -> bool:
    return _norm_size(module) > 0


#: parameters per channel of the norms ``norm_layer`` names (a LayerNorm's 2 unless named here), and back
_NORM_SIZES = {"rmsnorm": 1}
_NORM_NAMES = {1: "rmsnorm", 2: "layernorm"}


def _named_norm_size(norm_layer: Any) -> int:
    return _NORM_SIZES.get(norm_layer, 2) if isinstance(norm_layer, str) else 2


def qkv_bias_vectors(attn: Attention) -> int:
    """How many of q, k and v an attention adds a learned bias of width h to: the fused ``qkv``'s bias (3), Eva's
    ``q_bias`` / ``v_bias`` (2; its key bias is a zero buffer), or the biases of its separate projections."""
    if isinstance(attn, SeparateQkvAttention):
        return sum(proj.bias is not None for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    if attn.qkv.bias is not None:
        return 3
    return sum(isinstance(bias, nn.Parameter) for bias in (attn.q_bias, attn.k_bias, attn.v_bias))


def block_shape(block: nn.Module) -> dict[str, Any]:
    """The :func:`block_part_formulas` arguments of a built block, read from its layers: MLP width and matrices,
    qkv biases, layer scale, and the LayerNorms inside the MLP and the attention."""
    assert isinstance(block, TransformerBlock)  # a VisionTransformer's blocks; nn.Sequential types them as Module
    hidden, matrices = block.mlp_shape
    return dict(
        mlp_hidden=hidden,
        mlp_matrices=matrices,
        qkv_biases=qkv_bias_vectors(block.attn),
        layer_scale=block.layer_scale,
        mlp_norm=_is_norm(block.mlp.norm),
        attn_norm=_is_norm(block.attn.norm),
        proj_bias=block.attn.proj.bias is not None,
        norm_size=_norm_size(block.norm1),
    )


def block_layers(block: nn.Module) -> dict[str, str]:
    """What the formulas do not tell apart: the attention's q/k/v layout (``'fused'``: one ``qkv`` with its bias;
    ``'eva'``: ``qkv`` with Eva's ``q_bias`` / ``v_bias``; ``'separate'``: ``q_proj`` / ``k_proj`` / ``v_proj``) and
    the MLP's class (``Mlp``, ``SwiGLU``, ``PackedSwiGLU``)."""
    assert isinstance(block, TransformerBlock)
    attn = block.attn
    layout = "separate" if isinstance(attn, SeparateQkvAttention) else "eva" if attn.q_bias is not None else "fused"
    return dict(qkv=layout, mlp=type(block.mlp).__name__)


def _terms(h2: int, hm: int, m: int, h: int) -> str:
    """a·h² + b·hM + c·M + d·h written out, terms with a zero coefficient left out."""
    terms = [(h2, "h²"), (hm, "hM"), (m, "M"), (h, "h")]
    return "+".join(f"{'' if c == 1 else c}{unit}" for c, unit in terms if c) or "0"


def block_formula_text(
    embed_dim: int,
    mlp_hidden: int | None = None,
    mlp_matrices: int = 2,
    qkv_biases: int = 3,
    layer_scale: bool = False,
    mlp_norm: bool = False,
    attn_norm: bool = False,
    proj_bias: bool = True,
    norm_size: int = 2,
) -> dict[str, str]:
    """:func:`block_part_formulas` as formulas in h (and M, the MLP width, where it is not 4h), with ``block``
    their sum: the classic block reads attention 4h²+4h, mlp 8h²+5h, norms 4h, block 12h²+13h."""
    width_is_4h = mlp_hidden is None or mlp_hidden == 4 * embed_dim
    n, b = norm_size, int(proj_bias)
    parts = dict(
        attention=(4, 0, 0, qkv_biases + b + (n if attn_norm else 0)),
        mlp=(0, mlp_matrices, b * (mlp_matrices - 1) + (n if mlp_norm else 0), b),
        norms=(0, 0, 0, 2 * n),
        layer_scale=(0, 0, 0, 2 if layer_scale else 0),
    )
    if width_is_4h:  # M = 4h: hM = 4h², M = 4h
        parts = {k: (h2 + 4 * hm, 0, 0, h + 4 * m) for k, (h2, hm, m, h) in parts.items()}
    text = OrderedDict((k, _terms(*c)) for k, c in parts.items() if any(c))
    text["block"] = _terms(*(sum(c[i] for c in parts.values()) for i in range(4)))
    return text


def block_param_breakdown(block: nn.Module) -> dict[str, int]:
    """One block's parameters by part: attention (its q/k/v projections or qkv, Eva's q/v biases, the inner norm,
    proj), MLP (its inner norm too), norms (norm1 + norm2), layer scale (``gamma_1``/``gamma_2`` or ``ls1``/``ls2``)."""
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


def options_block_shape(
    embed_dim: int,
    mlp_ratio: float = 4.0,
    swiglu_mlp: bool = False,
    swiglu_align_to: int = 0,
    mlp_hidden: int | None = None,
    qkv_bias: bool = True,
    eva_names: bool = False,
    attn_type: str = "eva",
    init_values: float | None = None,
    scale_mlp: bool = False,
    scale_attn_inner: bool = False,
    mlp_layer: str = "",
    proj_bias: bool = True,
    norm_layer: Any = None,
) -> dict[str, Any]:
    """The :func:`block_part_formulas` arguments that the model's options give (what :func:`block_shape` reads
    from a built block): with ``eva_names`` the qkv bias is Eva's q and v biases (fused or separate projections)
    unless ``attn_type='rope'`` (timm's ``AttentionRope``: one fused bias); a SwiGLU has three matrices, packed
    or not (``swiglu_mlp``, or ``mlp_layer='swiglu'``); ``mlp_hidden`` gives the MLP width outright."""
    swiglu = swiglu_mlp or mlp_layer == "swiglu"
    return dict(
        mlp_hidden=mlp_hidden or mlp_hidden_width(embed_dim, mlp_ratio, swiglu, swiglu_align_to),
        mlp_matrices=3 if swiglu else 2,
        qkv_biases=(2 if eva_names and attn_type != "rope" else 3) if qkv_bias else 0,
        layer_scale=bool(init_values),
        mlp_norm=scale_mlp,
        attn_norm=scale_attn_inner,
        proj_bias=proj_bias,
        norm_size=_named_norm_size(norm_layer),
    )


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
    class_token: bool = True,
    no_embed_class: bool = False,
    pre_norm: bool = False,
    final_norm: bool = True,
    global_pool: str = "token",
    mlp_ratio: float = 4.0,
    attn_pool_mlp_ratio: float | None = None,
    pool_mlp_hidden: int | None = None,
    norm_layer: Any = None,
    embed_norm_layer: Any = None,
    block: dict[str, Any] | None = None,
    **block_options: Any,
) -> int:
    """The true count from the architecture alone (the keyword arguments of ``ARCHITECTURES``): patch projection
    (no bias under ``pre_norm``, which adds the LayerNorm ``norm_pre``), class/distillation/register tokens, a
    learned position table (none for ``pos_embed`` 'none' or 'sincos'; rotary position has no parameters), the
    blocks (:func:`block_part_formulas` of ``block``, a built block's :func:`block_shape`, or else of the block
    options: :func:`options_block_shape`), one final LayerNorm (``norm`` or ``fc_norm``; none without
    ``final_norm``), representation, head(s). ``global_pool='map'`` adds the attention pool (SigLIP, PE core): a
    latent query, q / kv / output projections, a norm and an MLP of width ``pool_mlp_hidden`` (else
    ``attn_pool_mlp_ratio`` or ``mlp_ratio`` times h); its head count changes no count. Options that change no
    count (position kinds, pooling of the prefix, dropout rates ...) are taken and ignored.
    """
    prefix = int(class_token) + int(distilled)
    patches = (img_size // patch_size) ** 2
    norm = _named_norm_size(norm_layer) * embed_dim  # one norm's parameters: LayerNorm 2h, RmsNorm h
    count = patch_size**2 * in_chans * embed_dim + (0 if pre_norm else embed_dim)  # patch projection
    count += 0 if embed_norm_layer is None else _named_norm_size(embed_norm_layer) * embed_dim  # its norm
    count += norm if pre_norm else 0  # norm_pre
    count += (prefix + reg_tokens) * embed_dim  # tokens
    if pos_embed == "learn":  # a row per patch, and per prefix token unless they have none (no_embed_class)
        count += (patches + (0 if no_embed_class else prefix + reg_tokens)) * embed_dim
    if global_pool == "map":
        pool_hidden = pool_mlp_hidden or int(embed_dim * (attn_pool_mlp_ratio or mlp_ratio))
        count += 4 * embed_dim**2 + 2 * embed_dim * pool_hidden + pool_hidden + 8 * embed_dim
    option_names = inspect.signature(options_block_shape).parameters
    shape = block or options_block_shape(
        embed_dim,
        mlp_ratio=mlp_ratio,
        norm_layer=norm_layer,
        **{k: v for k, v in block_options.items() if k in option_names},
    )
    count += depth * block_param_formula(embed_dim, **shape)
    count += norm if final_norm else 0
    head_in = embed_dim
    if representation_size:
        count += embed_dim * representation_size + representation_size
        head_in = representation_size
    if num_classes:
        count += (2 if distilled else 1) * (head_in * num_classes + num_classes)
    return count


def model_count_args(model: nn.Module) -> dict[str, Any]:
    """The :func:`analytic_param_count` arguments read from a built model (it may live on ``meta``): its shape,
    which tokens and tables it holds, its norms, the attention pool's MLP width and its first block's
    :func:`block_shape`. The image must be square (the formula takes one size)."""
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"model_count_args takes a scratch VisionTransformer, not {type(model).__name__}")
    arch = describe_model(model)
    if arch.img_size[0] != arch.img_size[1]:
        raise ValueError(f"the formula takes square images, this model's are {arch.img_size}")
    pool, block = model.attn_pool, block_shape(model.blocks[0])
    return dict(
        patch_size=arch.patch_size,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_classes=arch.num_classes,
        img_size=arch.img_size[0],
        in_chans=arch.in_chans,
        representation_size=arch.representation_size,
        distilled=arch.distilled,
        reg_tokens=model.num_reg_tokens,
        pos_embed="learn" if isinstance(model.pos_embed, nn.Parameter) else "none",
        class_token=model.has_class_token,
        no_embed_class=model.no_embed_class,
        pre_norm=_is_norm(model.norm_pre),
        final_norm=_is_norm(model.norm) or _is_norm(model.fc_norm),
        global_pool="map" if pool is not None else model.global_pool,
        pool_mlp_hidden=pool.mlp.hidden_features if pool is not None else None,
        norm_layer=_NORM_NAMES[block["norm_size"]],
        embed_norm_layer=_NORM_NAMES.get(_norm_size(model.patch_embed.norm)),
        block=block,
    )


#: :func:`param_breakdown`'s groups, in the order a reader meets them
BREAKDOWN_GROUPS = (
    "patch embedding (conv)",
    "class/dist/register tokens",
    "position embedding",
    "norm before the blocks",
    "encoder blocks",
    "final norm",
    "representation (pre_logits)",
    "classifier head(s)",
)


def param_breakdown(model: nn.Module) -> dict[str, int]:
    """The tally a reader makes by hand: patch embedding, tokens, position table, the norm before the blocks
    (``norm_pre``), encoder blocks, final norm (``norm``, or ``fc_norm`` after pooling), representation, head (with
    the attention pool, which belongs to it)."""
    groups = OrderedDict((k, 0) for k in BREAKDOWN_GROUPS)
    for name, param in model.named_parameters():
        if name.startswith("patch_embed."):
            key = "patch embedding (conv)"
        elif name in ("cls_token", "dist_token", "reg_token"):
            key = "class/dist/register tokens"
        elif name == "pos_embed":
            key = "position embedding"
        elif name.startswith("norm_pre."):
            key = "norm before the blocks"
        elif name.startswith("blocks."):
            key = "encoder blocks"
        elif name.startswith(("norm.", "fc_norm.")):
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

    with torch.device(device), SkipInitOnMeta():  # the skip touches only meta tensors
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
