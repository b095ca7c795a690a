"""transformers' ``Dinov2Model`` / ``Dinov2WithRegistersModel``: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.transformers_dinov2`), for the ``transformers`` source: the config.json's facts,
the reference model, and the config written on export.

The config's fields are checked inside our options' bounds, then against the weights, before anything is built;
the weights decide only what they hold (widths, registers, the MLP form), and a config that disagrees with them
is one error naming every field that does. ``Dinov2Config`` takes an integer ``mlp_ratio``: the plain MLP is
``hidden_size x mlp_ratio`` wide, the SwiGLU ``(int(hidden_size x mlp_ratio x 2 / 3) + 7) // 8 * 8``.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import ConversionError, shown
from ..layouts.checkpoint import Checkpoint
from ..layouts.transformers_dinov2 import (
    CURRENT_NAMES,
    CURRENT_SWIGLU,
    HUB_NAMES,
    HUB_SWIGLU,
    LAYER,
    STEM,
    has_registers,
    is_current,
    is_swiglu,
)
from ..models.architecture import Arch
from ..models.layers import to_2tuple
from .source_format import Reference, ReferenceSpec, round_parameters
from .transformers_dinov3 import (
    VIT_CONFIG_FIELDS,
    WHERE,
    bounded_fields,
    config_choice,
    config_flags,
    config_model_type,
    quiet_transformers,
)

#: model_type -> whether the weights hold registers
MODEL_TYPES = {"dinov2": False, "dinov2_with_registers": True}
#: Dinov2Config's fields -> the model option whose bounds each keeps
BOUNDED_FIELDS = {**VIT_CONFIG_FIELDS, "num_register_tokens": "reg_tokens", "mlp_ratio": "mlp_ratio"}
#: Dinov2Config's yes/no fields that the weights also tell
FLAGS = ("use_swiglu_ffn", "qkv_bias", "use_mask_token")
#: Dinov2Config's own LayerNorm eps, which a bare state dict without config.json was made with
NORM_EPS = 1e-6
#: the integer mlp_ratio values export tries for a SwiGLU's width (Dinov2Config takes no other kind)
MAX_RATIO = 64


def dinov2_mlp_width(embed_dim: int, mlp_ratio: float, swiglu: bool) -> int:
    """The MLP's hidden width transformers builds for ``hidden_size`` ``embed_dim`` and ``mlp_ratio``."""
    width = int(embed_dim * mlp_ratio)
    return (int(width * 2 / 3) + 7) // 8 * 8 if swiglu else width


def dinov2_mlp_ratio(embed_dim: int, hidden: int, swiglu: bool) -> int | None:
    """The integer ``mlp_ratio`` with which ``Dinov2Config`` builds an MLP ``hidden`` wide, or None."""
    return next((r for r in range(1, MAX_RATIO + 1) if dinov2_mlp_width(embed_dim, r, swiglu) == hidden), None)


def _fields(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The config's architecture fields that are present, each inside our option's bounds (a file is data)."""
    fields = bounded_fields(config, BOUNDED_FIELDS, path)
    fields.update(config_flags(config, FLAGS, path))
    return fields


def _config_of(checkpoint: Checkpoint, registers: bool) -> dict[str, Any]:
    """The side config when it is a Dinov2 one that fits the weights' registers; {} when there is none."""
    side = checkpoint.side_config
    if not side:
        return {}
    found = side.get("model_type")
    expected = "dinov2_with_registers" if registers else "dinov2"
    if not isinstance(found, str) or found not in MODEL_TYPES or MODEL_TYPES[found] != registers:
        held = "a Dinov2WithRegistersModel's (register_tokens)" if registers else "a Dinov2Model's (no registers)"
        raise ConversionError(
            f"{WHERE} is model_type {config_model_type(side)}, but the weights are {held}; expected {expected!r}",
            checkpoint.path,
        )
    return side


def _shape(checkpoint: Checkpoint, key: str, dims: int) -> tuple[int, ...]:
    """The shape of ``key``, which must be present with ``dims`` dimensions (read before the key map checks)."""
    if key not in checkpoint:
        raise ConversionError(f"missing key: {key!r}, which every Dinov2Model has", checkpoint.path)
    shape = tuple(checkpoint.shape(key))
    if len(shape) != dims:
        raise ConversionError(f"{key!r} has shape {shape}; expected {dims} dimensions", checkpoint.path)
    return shape


def dinov2_hints(checkpoint: Checkpoint, keys: set[str], depth: int) -> dict[str, Any]:
    """Heads, eps and image size from a Dinov2Config beside the weights, every field it states checked against
    them first."""
    registers, swiglu = has_registers(keys), is_swiglu(keys)
    config = _config_of(checkpoint, registers)
    fields = _fields(config, checkpoint.path)
    # Dinov2SwiGLUFFN is SiLU whatever hidden_act says (a string all the same)
    why = "the scratch DINOv2 MLP is exact GELU, or SwiGLU"
    config_choice(config, "hidden_act", None if swiglu else ("gelu",), "gelu", why, checkpoint.path)
    layer = LAYER.format(0)
    names, (_, swiglu_out) = (CURRENT_NAMES, CURRENT_SWIGLU) if is_current(keys) else (HUB_NAMES, HUB_SWIGLU)
    stem = _shape(checkpoint, STEM, 4)
    table = _shape(checkpoint, "embeddings.position_embeddings", 3)
    hidden = _shape(checkpoint, f"{layer}{swiglu_out if swiglu else 'mlp.fc2'}.weight", 2)[1]
    found: dict[str, Any] = {
        "num_hidden_layers": depth,
        "hidden_size": stem[0],
        "num_channels": stem[1],
        "patch_size": (stem[2], stem[3]),
        "num_register_tokens": _shape(checkpoint, "embeddings.register_tokens", 3)[1] if registers else 0,
        "use_swiglu_ffn": swiglu,
        "qkv_bias": f"{layer}{names['q']}.bias" in keys,
        "use_mask_token": "embeddings.mask_token" in keys,
    }
    stated = dict(fields)
    if "patch_size" in stated:
        stated["patch_size"] = to_2tuple(stated["patch_size"], "patch_size")
    wrong = [f"{k} {shown(config[k])} (the weights: {v})" for k, v in found.items() if k in stated and stated[k] != v]
    if "mlp_ratio" in fields and dinov2_mlp_width(stem[0], fields["mlp_ratio"], swiglu) != hidden:
        wrong.append(f"mlp_ratio {shown(config['mlp_ratio'])} (the weights: an MLP {hidden} wide)")
    if "num_attention_heads" in fields and stem[0] % fields["num_attention_heads"]:
        wrong.append(f"num_attention_heads {fields['num_attention_heads']} (does not divide width {stem[0]})")
    if "image_size" in fields:
        size, patch = to_2tuple(fields["image_size"], "image_size"), (stem[2], stem[3])
        rows = (size[0] // patch[0]) * (size[1] // patch[1]) + 1
        if rows != table[1]:
            wrong.append(f"image_size {shown(config['image_size'])} (the weights: a position table of {table[1]} rows)")
    if wrong:
        raise ConversionError(
            f"{WHERE} does not describe these weights: {'; '.join(wrong)}; expected the config saved with them",
            checkpoint.path,
        )
    hints: dict[str, Any] = {"norm_eps": fields.get("layer_norm_eps", NORM_EPS)}
    if "num_attention_heads" in fields:
        hints["num_heads"] = fields["num_attention_heads"]
    if "image_size" in fields:
        hints["img_size"] = to_2tuple(fields["image_size"], "image_size")
    if config:
        hints["stated_by"] = WHERE
    return hints


def dinov2_recorded(checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
    """A config.json records eps and activation (its own or Dinov2Config's defaults, which transformers builds)."""
    found = checkpoint.side_config.get("model_type")
    if not isinstance(found, str) or found not in MODEL_TYPES:
        return {"num_heads"} & set(hints)
    return {"act_layer", "norm_eps"} | ({"num_heads"} & set(hints))


def dinov2_options(shapes: dict[str, tuple[int, ...]], timm_options: dict[str, Any]) -> dict[str, Any]:
    """The model options of DINOv2 weights in our (timm's) names: timm's reading of the shapes
    (``timm_options``: LayerScale, the packed SwiGLU ...), with the registers' table said outright (patches
    only) rather than guessed from its length, which a 3x3 grid with 4 registers would get wrong."""
    options = {k: v for k, v in timm_options.items() if k != "no_embed_class"}
    if "reg_token" in shapes:
        options["no_embed_class"] = True
    return options


def dinov2_config(arch: Arch) -> Any:
    """The ``Dinov2Config`` (``Dinov2WithRegistersConfig`` with registers) of an architecture: for the reference
    model, and written by export. ``arch.options`` are the model's (``swiglu_mlp``, ``reg_tokens``, ...)."""
    import transformers

    if arch.num_heads is None:
        raise ConversionError("the head count is unknown: pass --num-heads")
    swiglu = bool(arch.options.get("swiglu_mlp"))
    ratio = dinov2_mlp_ratio(arch.embed_dim, arch.mlp_hidden, swiglu)
    if ratio is None:
        form = "(int(width x mlp_ratio x 2 / 3) + 7) // 8 * 8" if swiglu else "width x mlp_ratio"
        raise ConversionError(
            f"transformers' Dinov2 builds an MLP {form} wide for an integer mlp_ratio, and none gives this "
            f"model's {arch.mlp_hidden} at width {arch.embed_dim}"
        )
    registers = int(arch.options.get("reg_tokens") or 0)
    size = arch.img_size
    kwargs: dict[str, Any] = dict(
        hidden_size=arch.embed_dim,
        num_hidden_layers=arch.depth,
        num_attention_heads=arch.num_heads,
        mlp_ratio=ratio,
        hidden_act="gelu",
        layer_norm_eps=arch.norm_eps,
        image_size=size[0] if size[0] == size[1] else list(size),
        patch_size=arch.patch_size,
        num_channels=arch.in_chans,
        qkv_bias=bool(arch.options.get("qkv_bias", True)),
        layerscale_value=float(arch.options.get("init_values") or 1.0),
        use_swiglu_ffn=swiglu,
    )
    if registers:
        return transformers.Dinov2WithRegistersConfig(num_register_tokens=registers, **kwargs)
    return transformers.Dinov2Config(**kwargs)


def dinov2_reference(checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
    """transformers' own Dinov2Model (or WithRegisters) with the checkpoint's tensors under their stored names
    (transformers renames the Hub's), from a config made of the architecture read and checked here."""
    import transformers

    config = dinov2_config(spec.arch)
    cls = (
        transformers.Dinov2WithRegistersModel
        if config.model_type == "dinov2_with_registers"
        else transformers.Dinov2Model
    )
    with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
        config.save_pretrained(tmp)
        save_file(
            {k: v.contiguous() for k, v in checkpoint.state_dict().items()},
            str(Path(tmp) / "model.safetensors"),
            metadata={"format": "pt"},
        )
        model = cls.from_pretrained(tmp, attn_implementation="eager")
    round_parameters(model.float().eval(), spec.round_to)

    def features(x: torch.Tensor) -> torch.Tensor:
        return model(pixel_values=x).pooler_output  # the class token after the final norm

    return Reference(features, None, f"transformers' {cls.__name__}")


#: model options a Dinov2Model has no place for, with the values it builds
NOT_IN_DINOV2: dict[str, tuple[Any, ...]] = {
    "distilled": (False,),
    "qk_norm": (False,),
    "qk_scale": (None,),
    "representation_size": (None,),
    "pre_norm": (False,),
    "final_norm": (True,),
    "proj_bias": (True,),
    "class_token": (True,),
    "norm_layer": (None, "layernorm"),
    "scale_mlp": (False,),
}


def dinov2_export_config(arch: Arch, args: dict[str, Any]) -> tuple[Any, list[str]]:
    """The Dinov2Config a scratch model ``args`` (its full constructor arguments) is written with, and notes;
    refuses what a Dinov2Model cannot hold."""
    if not args.get("init_values") or args.get("pos_embed") != "learn" or args.get("rope_type"):
        raise ConversionError(
            "transformers export writes a DINOv3ViTModel or a Dinov2Model, and this model is not DINOv3 (rotary "
            f"position) nor DINOv2 (LayerScale and a learned position table: init_values {args.get('init_values')!r}, "
            f"pos_embed {args.get('pos_embed')!r}); export it to timm, torchvision or jax"
        )
    odd = [f"{k}={args.get(k)!r}" for k, built in NOT_IN_DINOV2.items() if args.get(k, built[0]) not in built]
    if args.get("act_layer") not in (None, "", "gelu") and not args.get("swiglu_mlp"):
        odd.append(f"act_layer={args['act_layer']!r}")
    if args.get("reg_tokens") and not args.get("no_embed_class"):
        odd.append("registers with rows in the position table (Dinov2WithRegisters gives them none)")
    fc_norm = args.get("fc_norm")
    if fc_norm or (fc_norm is None and args.get("global_pool") == "avg"):
        odd.append("a norm after pooling (fc_norm) instead of on every token")
    if arch.grid[0] != arch.grid[1]:
        odd.append(f"a non-square position table ({arch.grid[0]}x{arch.grid[1]} patches)")
    if odd:
        raise ConversionError(f"transformers' Dinov2Model has no place for {', '.join(odd)}")
    if arch.num_classes:
        raise ConversionError(
            f"transformers' Dinov2Model has no classifier (Dinov2ForImageClassification's reads the class token "
            f"beside the mean patch token), and this model has one of {arch.num_classes} classes; export it to "
            f"timm, or export a num_classes=0 model"
        )
    options: dict[str, Any] = {k: args[k] for k in ("swiglu_mlp", "qkv_bias", "reg_tokens", "init_values") if k in args}
    notes = []
    if args.get("global_pool") != "token":
        notes.append(
            f"this model pools with global_pool={args.get('global_pool')!r}; Dinov2Model's pooler_output is the "
            f"class token (its last_hidden_state holds every token)"
        )
    if args.get("dynamic_img_size") and not args.get("reg_tokens"):
        notes.append(
            "at other input sizes Dinov2Model resamples its position table bicubic without antialiasing, where "
            "this model (dynamic_img_size, as timm) antialiases: the outputs differ there"
        )
    return dinov2_config(replace(arch, options=options)), notes
