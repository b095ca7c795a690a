"""timm ViT / DeiT state dicts, and timm's ``Eva`` (DINOv3, EVA02, Perception Encoder). Our parameter names are
timm's names, so the key map is the identity.

timm's newer options (register tokens, LayerScale, ``no_embed_class``, ``norm_pre``, ``fc_norm``,
qk-norm, ``map`` pooling, no class token) are read from key names and shapes and recorded as
``model_args``, when the model can express them. Features it cannot hold are refused by name. Heads
come from a timm ``config.json`` beside the weights or a train.py checkpoint's ``args``.

Eva's own names tell DINOv3 (no position table) and EVA02 apart from the classic ViT, and are read as the
``baai_eva`` source reads them (:mod:`timm_vitscratch.convert.eva`). A Perception Encoder without layer scale has
the classic names of a pre-norm ViT with an attention pool, and its rotary position leaves no trace in the weights:
only the architecture a config.json beside the weights (or ``--model``) names tells it, and weights that look like
one are refused without.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ..choices import ACT_NAMES
from ..errors import ConversionError, ModelArgsError
from ..layouts.checkpoint import Checkpoint
from ..layouts.keymap import KeyMap, Rule
from ..layouts.timm import TimmLayout
from ..models.architecture import Arch
from ..models.model_args import DEFAULTS, check_architecture, check_model_args
from ..models.variants import ARCHITECTURES
from .dinov3 import dinov3_options, has_eva_names, timm_eva
from .eva import EVA02_KEYS, NORM_EPS, eva_family, eva_options, eva_variant, variant_family, variant_options
from .eva import timm_eva as timm_eva02_pe
from .shape_inference import variant_args
from .source_format import (
    M,
    Reference,
    ReferenceSpec,
    SourceFormat,
    round_parameters,
    timm_reference,
    without_init,
)

LAYER_SCALE = re.compile(r"^blocks\.\d+\.(ls[12]\.gamma|gamma_[12])$")
#: init_values recorded for a LayerScale checkpoint: any value builds the gammas, which are then loaded
LAYER_SCALE_INIT = 1e-5
#: preprocessing fields of a timm config.json's pretrained_cfg that a re-conversion keeps
KEPT_CFG = (
    "mean",
    "std",
    "interpolation",
    "crop_pct",
    "crop_mode",
    "license",
    "origin_url",
    "paper_ids",
    "paper_name",
    "notes",
)


def _is_square(n: int) -> bool:
    return n > 0 and math.isqrt(n) ** 2 == n


def _act_name(module: torch.nn.Module) -> str | None:
    """timm's name for a built MLP activation (None: GELU, the default), by timm's own ``get_act_layer``."""
    from timm.layers import get_act_layer

    if (type(module) is torch.nn.GELU and module.approximate == "none") or type(module) is get_act_layer("gelu"):
        return None
    for name in ACT_NAMES:
        if type(module) is get_act_layer(name):
            return name
    raise ConversionError(
        f"this timm model's MLP activation is {type(module).__name__}, which has no timm name "
        f"the scratch ViT takes as act_layer ({', '.join(ACT_NAMES)}, or GELU)"
    )


def architecture_facts(architecture: Any, kwargs: Any, where: str) -> dict[str, Any]:
    """What a registered timm model name (ours or timm's) built with ``kwargs`` says: ``num_heads``,
    ``norm_eps`` and ``act_layer`` (None for GELU, the default: a known activation is always a key, so that
    what is known can be told from what is assumed), which shapes cannot tell, and ``depth`` / ``embed_dim``,
    which the weights must agree with. ``kwargs`` come from a file (``where``): they pass the allow-list and
    bounds of :mod:`timm_vitscratch.models.model_args` before anything is built. Read from the model built
    on ``meta``; a name or kwargs timm cannot build here leave only what ``kwargs`` state themselves."""
    import timm

    try:
        kwargs = check_model_args(kwargs, where)
        if architecture in ARCHITECTURES:
            check_architecture({**ARCHITECTURES[architecture], **kwargs}, where)
    except ModelArgsError as err:
        raise ConversionError(str(err)) from None
    facts: dict[str, Any] = {k: kwargs[k] for k in ("depth", "embed_dim") if k in kwargs}
    if architecture in ARCHITECTURES:  # ours: the variant says whether it has a representation layer
        facts["representation_size"] = kwargs.get(
            "representation_size", ARCHITECTURES[architecture].get("representation_size")
        )
    if isinstance(kwargs.get("num_heads"), int):
        facts["num_heads"] = kwargs["num_heads"]
    elif architecture in ARCHITECTURES:
        facts["num_heads"] = ARCHITECTURES[architecture]["num_heads"]
    if isinstance(kwargs.get("act_layer"), str):
        facts["act_layer"] = None if kwargs["act_layer"] in ("", "gelu") else kwargs["act_layer"]
    if isinstance(kwargs.get("norm_eps"), float):
        facts["norm_eps"] = kwargs["norm_eps"]
    if not isinstance(architecture, str) or not timm.is_model(architecture):
        return facts
    model: Any  # any timm architecture: read below by duck typing, refused when it has no ViT blocks
    try:
        with torch.device("meta"):
            model = timm.create_model(architecture, **{k: v for k, v in kwargs.items() if k != "pretrained"})
    except Exception as err:  # whatever timm's constructors raise for args they cannot take
        raise ConversionError(
            f"{where}: timm cannot build {architecture!r} with {kwargs} ({type(err).__name__}: {err}), so the heads, "
            f"activation and norm eps it stands for are unknown; correct the args or remove the file"
        ) from None
    try:
        block = model.blocks[0]
        heads, eps = int(block.attn.num_heads), float(block.norm1.eps)
        act = None if hasattr(block.mlp, "fc1_g") else block.mlp.act  # SwiGLU's SiLU is part of it, not a choice
        depth, width = len(model.blocks), int(model.embed_dim)
    except (AttributeError, IndexError, TypeError):
        raise ConversionError(
            f"{where} names {architecture!r}, which is not a Vision Transformer with blocks of attention and MLP"
        ) from None
    facts.update(num_heads=heads, norm_eps=eps, depth=depth, embed_dim=width)
    if not isinstance(kwargs.get("act_layer"), str):  # the architecture's own activation, named back
        facts["act_layer"] = None if act is None else _act_name(act)
    return facts


def eva_named(shapes: dict[str, tuple[int, ...]]) -> bool:
    """Names only timm's ``Eva`` gives (``gamma_1``, ``q_bias``, ``fc1_g``, separate ``q_proj``, the norms inside)."""
    return has_eva_names(shapes) or any(key in shapes for key in EVA02_KEYS)


def looks_like_pe(shapes: dict[str, tuple[int, ...]]) -> bool:
    """Classic names as timm's Perception Encoder without layer scale has them: a LayerNorm before the blocks, no
    patch bias, and PE core's attention pool or PE spatial's bare tokens (no final norm, no head). A classic
    pre-norm ViT (CLIP's) pools its class token through a final norm."""
    pooled = "attn_pool.latent" in shapes or not any(
        k in shapes for k in ("norm.weight", "fc_norm.weight", "head.weight")
    )
    return "norm_pre.weight" in shapes and "patch_embed.proj.bias" not in shapes and pooled


class TimmFormat(TimmLayout, SourceFormat):
    reference_name = "timm's VisionTransformer"
    export_suffixes = (".safetensors", ".pth", ".pt", ".bin")

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        if eva_named(shapes):  # timm's Eva: DINOv3 has no position table, EVA02 / PE (with layer scale) have one
            return eva_options(shapes) if "pos_embed" in shapes else dinov3_options(shapes)
        found: dict[str, Any] = {}
        if "reg_token" in shapes:
            found["reg_tokens"] = shapes["reg_token"][1]
        if "cls_token" not in shapes:
            found["class_token"] = False
        prefix = (0 if "cls_token" not in shapes else 1) + ("dist_token" in shapes) + found.get("reg_tokens", 0)
        tokens = shapes.get("pos_embed", (1, 0))[1]
        if prefix and _is_square(tokens) and not _is_square(tokens - prefix):
            found["no_embed_class"] = True
        if "norm_pre.weight" in shapes:
            found["pre_norm"] = True
        if "attn_pool.latent" in shapes:
            found["global_pool"] = "map"
        elif "fc_norm.weight" in shapes or "cls_token" not in shapes:
            found["global_pool"] = "avg"
        if "norm.weight" not in shapes and "fc_norm.weight" not in shapes:
            found["final_norm"] = False
        if "blocks.0.attn.q_norm.weight" in shapes:
            found["qk_norm"] = True
        if "blocks.0.attn.qkv.weight" in shapes and "blocks.0.attn.qkv.bias" not in shapes:
            found["qkv_bias"] = False
        if "blocks.0.attn.proj.weight" in shapes and "blocks.0.attn.proj.bias" not in shapes:
            found["proj_bias"] = False
        fc1, fc2 = shapes.get("blocks.0.mlp.fc1.weight"), shapes.get("blocks.0.mlp.fc2.weight")
        if fc1 and fc2 and len(fc2) == 2 and fc1[0] == 2 * fc2[1]:  # packed SwiGLU (DINOv2 giant's SwiGLUPacked)
            found["swiglu_mlp"] = True
        if any(LAYER_SCALE.match(k) for k in shapes) and "init_values" in DEFAULTS:
            found["init_values"] = LAYER_SCALE_INIT
        return {k: v for k, v in found.items() if k in DEFAULTS}

    def settle_family(
        self, shapes: dict[str, tuple[int, ...]], hints: dict[str, Any], model: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """EVA02 and PE: the variant a config names (else ``--model``, else the family's names) fixes what no
        weight records: the rotary position, the norms' eps. Weights that look like PE and name nothing are
        refused: read as a classic ViT, they would convert without rotary position."""
        variant = hints.get("variant") if "stated_by" in hints else eva_variant(model)
        named = eva_named(shapes) and "pos_embed" in shapes
        if variant is None and not named:
            if looks_like_pe(shapes) and "stated_by" not in hints and model is None:
                raise ConversionError(
                    "these timm weights look like a Perception Encoder (norm_pre, no patch bias, an attention pool "
                    "or bare tokens), whose rotary position is not in the weights: convert the directory with "
                    "timm's config.json beside them, or pass --model (scratch_pe_* for PE, a classic variant for a "
                    "pre-norm ViT without rotary position); Meta's original files convert with --from meta_pe"
                )
            return self.options(shapes), hints
        if variant is None:
            family, options = eva_family(shapes), eva_options(shapes)
            stated = {"norm_eps": NORM_EPS[family], "stated_by": f"{family.upper()} in timm Eva's names"}
        else:
            family, options = variant_family(variant), variant_options(shapes, variant)
            stated = {"norm_eps": float(variant_args(variant)["norm_eps"]), "stated_by": f"--model {variant}"}
        # EVA02's SwiGLU has its SiLU in its names; PE's MLP is GELU (None: timm's default) unless a config says
        hints = {**stated, "act_layer": None, **hints}
        return options, {**hints, "act_layer": None} if family == "eva02" else hints

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        """Heads, LayerNorm eps, MLP activation (and image size) from a timm config.json beside the weights or
        a train.py checkpoint's args: what the shapes cannot tell. Without either, timm's defaults hold."""
        config, args = checkpoint.side_config, checkpoint.train_args
        hints: dict[str, Any] = {}
        if "architecture" in config:
            model_args = config.get("model_args") or {}
            hints.update(architecture_facts(config["architecture"], model_args, "config.json model_args"))
            hints["stated_by"] = "config.json beside the weights"
            hints["variant"] = eva_variant(config["architecture"])
            if "num_classes" in config:
                hints["num_classes"] = config["num_classes"]
            if model_args.get("img_size") is not None:
                hints["img_size"] = model_args["img_size"]
        elif args.get("model"):
            kwargs = args.get("model_kwargs") or {}
            hints.update(architecture_facts(args["model"], kwargs, "the checkpoint's train.py args (model_kwargs)"))
            hints["stated_by"] = f"train.py args (model {args['model']!r})"
            hints["variant"] = eva_variant(args["model"])
        return hints

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        cfg = checkpoint.side_config.get("pretrained_cfg")
        if not isinstance(cfg, dict):
            return {}
        return {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items() if k in KEPT_CFG}

    def label_names(self, checkpoint: Checkpoint) -> list[str] | None:
        config = checkpoint.side_config
        cfg = config.get("pretrained_cfg")
        if not isinstance(cfg, dict):
            cfg = {}
        names = config.get("label_names", cfg.get("label_names"))
        if names is None:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ConversionError(
                f"config.json beside the weights has label_names {str(names)[:60]!r}; expected a "
                f"list of strings, one per class",
                checkpoint.path,
            )
        return names

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        from timm.models.deit import VisionTransformerDistilled
        from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

        arch = spec.arch
        if arch.options.get("rope_type") == "dinov3":  # timm builds DINOv3 with its Eva; the names are the same
            eva = timm_eva(spec)
            eva.load_state_dict(checkpoint.state_dict(), strict=True)
            round_parameters(eva.eval(), spec.round_to)
            return timm_reference(eva, "timm's Eva")
        if arch.options.get("rope_type") == "cat":  # EVA02 and PE: timm's Eva, whose names are ours
            eva = timm_eva02_pe(spec)
            eva.load_state_dict(checkpoint.state_dict(), strict=True)
            round_parameters(eva.eval(), spec.round_to)
            return timm_reference(eva, "timm's Eva")
        cls = VisionTransformerDistilled if arch.distilled else VisionTransformer
        model = timm_vit(cls, spec, **timm_options(arch))
        state_dict = checkpoint.state_dict()
        if not arch.options.get("init_values"):  # identity gammas the scratch model drops
            state_dict = {k: v for k, v in state_dict.items() if not LAYER_SCALE.match(k)}
        heads = {
            k: state_dict.pop(k)
            for k in list(state_dict)
            if k.startswith(("head.", "pre_logits.")) and arch.representation_size
        }
        model.load_state_dict(checkpoint_filter_fn(state_dict, model), strict=True)
        round_parameters(model.eval(), spec.round_to)
        if not arch.representation_size:
            return timm_reference(model, f"timm's {cls.__name__}")
        return representation_head(
            model,
            heads["pre_logits.fc.weight"],
            heads["pre_logits.fc.bias"],
            heads.get("head.weight"),
            heads.get("head.bias"),
            spec.round_to,
            f"timm's {cls.__name__} + the checkpoint's representation layer",
        )

    def export_map(self, arch: Arch, keys: set[str]) -> KeyMap:
        if arch.representation_size:
            raise ConversionError(
                "timm's VisionTransformer has no representation layer (pre_logits), so a "
                "has_logits model cannot be exported to it; export to torchvision or jax instead"
            )
        return {key: Rule.rename(key) for key in keys}


def timm_vit(cls: Callable[..., M], spec: ReferenceSpec, **options: Any) -> M:
    """timm's ``cls`` (a VisionTransformer) for ``spec``'s architecture, storage uninitialised; without a classifier
    when the architecture has a representation layer, which timm's class no longer holds."""
    arch = spec.arch
    return without_init(
        cls,
        img_size=spec.img_size,
        patch_size=arch.patch_size,
        in_chans=arch.in_chans,
        num_classes=0 if arch.representation_size else arch.num_classes,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_heads=arch.num_heads,
        **{"mlp_ratio": arch.mlp_ratio, **options},
    )


def timm_options(arch: Arch) -> dict[str, Any]:
    """timm VisionTransformer arguments for ``arch``'s options (the names are timm's own) and its LayerNorm eps;
    a packed SwiGLU as timm builds DINOv2 giant's (``SwiGLUPacked``, whose ratio counts both halves of fc1)."""
    from timm.layers import LayerNorm, SwiGLUPacked

    options = {"qkv_bias": True, "norm_layer": partial(LayerNorm, eps=arch.norm_eps), **arch.options}
    if options.get("swiglu_mlp") and not options.get("swiglu_align_to"):
        del options["swiglu_mlp"]
        options.pop("swiglu_align_to", None)
        options.update(mlp_layer=SwiGLUPacked, act_layer=torch.nn.SiLU, mlp_ratio=2 * arch.mlp_ratio)
    return options


def representation_head(
    features_model: torch.nn.Module,
    fc_weight: torch.Tensor,
    fc_bias: torch.Tensor,
    head_weight: Any,
    head_bias: Any,
    round_to: Any,
    description: str,
) -> Reference:
    """Reference for has_logits models whose library dropped the layer: pooled features -> Linear+Tanh -> head.

    ``features_model`` is the library's model built without a head (``num_classes=0``); the weights are
    the checkpoint's own tensors.
    """
    params = [fc_weight, fc_bias] + ([head_weight, head_bias] if head_weight is not None else [])
    if round_to is not None:
        params = [p.to(round_to).float() for p in params]

    def features(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.nn.functional.linear(features_model(x), params[0], params[1]))

    def logits(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(features(x), params[2], params[3])

    return Reference(features, logits if len(params) == 4 else None, description)


#: what conversion reads and writes of source timm (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = TimmFormat()
