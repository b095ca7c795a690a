"""transformers' ``DINOv3ViTModel``: what conversion adds to its layout (:mod:`timm_vitscratch.layouts.transformers_dinov3`),
for the ``transformers`` source: the config.json's facts, the reference model, and the config written on export.

The gated MLP's flag is ``use_gated_mlp`` in ``DINOv3ViTConfig``; ``use_swiglu_ffn`` (DINOv2's name for it) is
read too. Either must agree with the weights (``gate_proj`` present or not), as must the sizes.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..choices import MAX_EMBED_DIM, MAX_MLP_RATIO
from ..errors import ConversionError, ModelArgsError, listed, shown
from ..layouts.checkpoint import Checkpoint
from ..layouts.transformers_dinov3 import BLOCK_PATTERN, block_prefix, is_gated
from ..models.architecture import Arch
from ..models.model_args import check_option
from .source_format import Reference, ReferenceSpec, round_parameters

WHERE = "config.json beside the weights"
#: the fields transformers' ViT configs share (ViTConfig, DINOv3ViTConfig) -> the model option whose bounds each keeps
VIT_CONFIG_FIELDS = {
    "num_hidden_layers": "depth",
    "hidden_size": "embed_dim",
    "num_attention_heads": "num_heads",
    "image_size": "img_size",
    "patch_size": "patch_size",
    "num_channels": "in_chans",
    "layer_norm_eps": "norm_eps",
}
#: DINOv3ViTConfig's fields -> the model option whose bounds each keeps
BOUNDED_FIELDS = {**VIT_CONFIG_FIELDS, "num_register_tokens": "reg_tokens", "rope_theta": "rope_temperature"}
#: the gated-MLP flag, as DINOv3ViTConfig spells it and as DINOv2's config (and some DINOv3 ports) spell it
GATED_FLAGS = ("use_gated_mlp", "use_swiglu_ffn")
#: DINOv3ViTConfig's bias flags -> the per-block modules (after ``layer.N.``) whose ``.bias`` each builds
BIAS_FLAGS = {
    "query_bias": (r"attention\.q_proj",),
    "key_bias": (r"attention\.k_proj",),
    "value_bias": (r"attention\.v_proj",),
    "proj_bias": (r"attention\.o_proj",),
    "mlp_bias": (r"mlp\.up_proj", r"mlp\.down_proj", r"mlp\.gate_proj"),
}
#: the widest MLP a config may state: our widest embedding times our largest MLP ratio
MAX_MLP_WIDTH = int(MAX_EMBED_DIM * MAX_MLP_RATIO)
#: what a config's name field (``model_type``, an activation) may hold when any name is allowed
CONFIG_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: DINOv3ViTConfig's own defaults, which a bare state dict without config.json was made with
CONFIG_DEFAULTS = {"layer_norm_eps": 1e-5, "rope_theta": 100.0}


def bounded_fields(config: Mapping[str, Any], bounded: Mapping[str, str], path: Path) -> dict[str, Any]:
    """The fields of a transformers config.json that ``bounded`` names (config field -> the model option whose
    bounds it keeps) and the config has, each checked inside that option's bounds before anything is built (a file
    is data); a value outside them is one ConversionError naming the config's field."""
    fields: dict[str, Any] = {}
    for field, option in bounded.items():
        if field in config:
            try:
                fields[field] = check_option(option, config[field], WHERE)
            except ModelArgsError as err:
                raise ConversionError(str(err).replace(f": {option} is", f": {field} is"), path) from None
    return fields


def config_flags(config: Mapping[str, Any], flags: Iterable[str], path: Path) -> dict[str, bool]:
    """The yes/no fields of a transformers config.json that ``flags`` names and the config has, each true or false
    (anything else is one ConversionError showing the value escaped and cut)."""
    found: dict[str, bool] = {}
    for flag in flags:
        if flag in config:
            if type(config[flag]) is not bool:
                raise ConversionError(f"{WHERE}: {flag} is {shown(config[flag])}; expected true or false", path)
            found[flag] = config[flag]
    return found


def config_integers(config: Mapping[str, Any], highs: Mapping[str, int], path: Path) -> dict[str, int]:
    """The integer fields ``highs`` names (field -> its largest value) that the config has, each in [1, high]."""
    found: dict[str, int] = {}
    for field, high in highs.items():
        value = config.get(field)
        if value is not None:
            if type(value) is not int or not 1 <= value <= high:
                raise ConversionError(f"{WHERE}: {field} is {shown(value)}; expected an integer in [1, {high:,}]", path)
            found[field] = value
    return found


def config_choice(
    config: Mapping[str, Any], field: str, allowed: Collection[str] | None, default: str, why: str, path: Path
) -> str:
    """A text field of the config (``default`` when absent): one of ``allowed`` (any name, when None); anything
    else is one ConversionError showing the value escaped and cut, and ``why`` (what the models have)."""
    value = config.get(field, default)
    if not isinstance(value, str) or not (CONFIG_NAME.fullmatch(value) if allowed is None else value in allowed):
        expected = "a name (letters, digits, '_', '-', '.')" if allowed is None else " or ".join(map(repr, allowed))
        raise ConversionError(f"{WHERE}: {field} is {shown(value)}; expected {expected} ({why})", path)
    return value


def config_model_type(config: Mapping[str, Any]) -> str:
    """The config's ``model_type``, shown for a message (escaped and cut: it is the file's)."""
    return shown(config.get("model_type"))


def _fields(config: dict[str, Any], path: Path) -> dict[str, Any]:
    fields = bounded_fields(config, BOUNDED_FIELDS, path)
    flags = config_flags(config, GATED_FLAGS, path)
    if len(set(flags.values())) > 1:
        raise ConversionError(f"{WHERE}: use_gated_mlp and use_swiglu_ffn disagree ({flags}); expected one", path)
    if flags:
        fields["gated"] = next(iter(flags.values()))
    return fields


def check_bias_flags(config: Mapping[str, Any], keys: set[str], path: Path) -> None:
    """A DINOv3ViTConfig whose bias flag is false builds no such bias, so transformers drops the tensor: weights that
    hold one are another model's than the config describes (refused, naming the flag and the tensors)."""
    flags = config_flags(config, BIAS_FLAGS, path)
    wrong = []
    for flag, names in BIAS_FLAGS.items():
        if flags.get(flag) is False:
            held = sorted(k for k in keys if re.match(BLOCK_PATTERN + rf"(?:{'|'.join(names)})\.bias$", k))
            if held:
                wrong.append(f"{flag} false, but the weights hold {listed(held, limit=2)}")
    if wrong:
        raise ConversionError(
            f"{WHERE} says {'; '.join(wrong)}; expected the config saved with them (transformers would drop those "
            f"biases, the conversion would keep them)",
            path,
        )


def dinov3_hints(checkpoint: Checkpoint, keys: set[str], depth: int) -> dict[str, Any]:
    """Heads, eps, image size and rotary base from a DINOv3ViTConfig beside the weights, checked against them."""
    config = checkpoint.side_config if checkpoint.side_config.get("model_type") == "dinov3_vit" else {}
    if checkpoint.side_config and not config:
        raise ConversionError(
            f"{WHERE} is model_type {config_model_type(checkpoint.side_config)}, but the weights are a "
            f"DINOv3ViTModel's; expected 'dinov3_vit'",
            checkpoint.path,
        )
    fields = _fields(config, checkpoint.path)
    gated = is_gated(keys)
    act = "silu" if gated else "gelu"
    why = (
        f"in a {'gated' if gated else 'plain'} MLP the scratch models use {'SiLU (SwiGLU)' if gated else 'exact GELU'}"
    )
    config_choice(config, "hidden_act", (act,), act, why, checkpoint.path)
    fields.update(config_integers(config, {"intermediate_size": MAX_MLP_WIDTH}, checkpoint.path))
    check_bias_flags(config, keys, checkpoint.path)
    stem = checkpoint.shape("embeddings.patch_embeddings.weight")
    up = checkpoint.shape(block_prefix(keys).format(0) + "mlp.up_proj.weight")
    regs = checkpoint.shape("embeddings.register_tokens")[1] if "embeddings.register_tokens" in keys else 0
    found = {
        "num_hidden_layers": depth,
        "hidden_size": stem[0],
        "num_channels": stem[1],
        "patch_size": stem[2],
        "intermediate_size": up[0],
        "num_register_tokens": regs,
        "gated": gated,
    }
    stated = fields
    wrong = [f"{k} {stated[k]} (the weights: {v})" for k, v in found.items() if k in stated and stated[k] != v]
    if "num_attention_heads" in fields and stem[0] % fields["num_attention_heads"]:
        wrong.append(f"num_attention_heads {fields['num_attention_heads']} (does not divide width {stem[0]})")
    if wrong:
        raise ConversionError(
            f"{WHERE} does not describe these weights: {'; '.join(wrong)}; expected the config saved with them",
            checkpoint.path,
        )
    hints: dict[str, Any] = {"norm_eps": fields.get("layer_norm_eps", CONFIG_DEFAULTS["layer_norm_eps"])}
    hints["rope_temperature"] = float(fields.get("rope_theta", CONFIG_DEFAULTS["rope_theta"]))
    if "num_attention_heads" in fields:
        hints["num_heads"] = fields["num_attention_heads"]
    if "image_size" in fields:
        size = fields["image_size"]
        hints["img_size"] = (size, size) if isinstance(size, int) else size
    if config:
        hints["stated_by"] = WHERE
    return hints


def dinov3_recorded(checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
    """A config.json records eps and activation (its own or DINOv3ViTConfig's defaults, which transformers builds)."""
    if checkpoint.side_config.get("model_type") != "dinov3_vit":
        return {"num_heads"} & set(hints)
    return {"act_layer", "norm_eps"} | ({"num_heads"} & set(hints))


def dinov3_config(arch: Arch, mlp_hidden: int) -> Any:
    """The ``DINOv3ViTConfig`` of an architecture (for the reference model, and written by export)."""
    import transformers

    if arch.num_heads is None:
        raise ConversionError("the head count is unknown: pass --num-heads")
    size = arch.img_size
    gated = bool(arch.options.get("swiglu_mlp"))
    biases = bool(arch.options.get("qkv_bias"))
    return transformers.DINOv3ViTConfig(
        hidden_size=arch.embed_dim,
        num_hidden_layers=arch.depth,
        num_attention_heads=arch.num_heads,
        intermediate_size=mlp_hidden,
        hidden_act="silu" if gated else "gelu",
        use_gated_mlp=gated,
        layer_norm_eps=arch.norm_eps,
        rope_theta=float(arch.options.get("rope_temperature", CONFIG_DEFAULTS["rope_theta"])),
        image_size=size[0] if size[0] == size[1] else list(size),
        patch_size=arch.patch_size,
        num_channels=arch.in_chans,
        num_register_tokens=int(arch.options.get("reg_tokens", 0)),
        query_bias=biases,
        key_bias=False,
        value_bias=biases,
        proj_bias=True,
        mlp_bias=True,
        layerscale_value=float(arch.options.get("init_values") or 1.0),
    )


def dinov3_reference(checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
    """transformers' own DINOv3ViTModel with the checkpoint's tensors (their stored names: transformers renames)."""
    import transformers

    arch = spec.arch
    with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
        dinov3_config(arch, arch.mlp_hidden).save_pretrained(tmp)
        save_file(
            {k: v.contiguous() for k, v in checkpoint.state_dict().items()},
            str(Path(tmp) / "model.safetensors"),
            metadata={"format": "pt"},
        )
        model = transformers.DINOv3ViTModel.from_pretrained(tmp, attn_implementation="eager")
    round_parameters(model.float().eval(), spec.round_to)
    prefix = 1 + int(arch.options.get("reg_tokens", 0))
    pool = arch.options.get("global_pool", "token")

    def features(x: torch.Tensor) -> torch.Tensor:
        tokens = model(pixel_values=x).last_hidden_state  # cls, registers, patches, after the final norm
        return tokens[:, prefix:].mean(dim=1) if pool == "avg" else tokens[:, 0]

    return Reference(features, None, "transformers' DINOv3ViTModel")


#: model options a DINOv3ViTModel has no place for, with the value it builds
NOT_IN_DINOV3_VIT = {
    "distilled": False,
    "qk_norm": False,
    "representation_size": None,
    "no_embed_class": False,
    "pre_norm": False,
    "final_norm": True,
    "proj_bias": True,
    "rope_grid_offset": 0.0,
    "class_token": True,
}


def dinov3_export_config(arch: Arch, args: dict[str, Any]) -> tuple[Any, list[str]]:
    """The DINOv3ViTConfig a scratch model ``args`` (its full constructor arguments) is written with, and notes;
    refuses what a DINOv3ViTModel cannot hold."""
    if args.get("rope_type") != "dinov3" or not args.get("eva_names") or args.get("pos_embed") != "none":
        raise ConversionError(
            "transformers export writes a DINOv3ViTModel, and this model is not DINOv3 (rope_type "
            f"{args.get('rope_type')!r}, pos_embed {args.get('pos_embed')!r}); export it to timm, torchvision or jax"
        )
    odd = [f"{k}={args.get(k)!r}" for k, v in NOT_IN_DINOV3_VIT.items() if args.get(k, v) != v]
    if args.get("act_layer") not in (None, "", "gelu") and not args.get("swiglu_mlp"):
        odd.append(f"act_layer={args['act_layer']!r}")
    if not args.get("init_values"):
        odd.append("no layer scale (init_values=None)")
    if odd:
        raise ConversionError(f"transformers' DINOv3ViTModel has no place for {', '.join(odd)}")
    if arch.num_classes:
        raise ConversionError(
            f"transformers' DINOv3ViTModel has no classifier, and this model has one of {arch.num_classes} classes; "
            f"export it to timm, or export a num_classes=0 model"
        )
    options = {k: args[k] for k in ("swiglu_mlp", "qkv_bias", "rope_temperature", "reg_tokens", "init_values")}
    notes = []
    if args.get("global_pool") != "token":
        notes.append(
            f"this model pools with global_pool={args.get('global_pool')!r}; DINOv3ViTModel's pooler_output is the "
            f"class token (its last_hidden_state holds every token)"
        )
    return dinov3_config(replace(arch, options=options), arch.mlp_hidden), notes


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging and progress bars off, for models built here as references."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
