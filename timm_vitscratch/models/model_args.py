"""What a file may ask of the model: the allow-list of constructor options, with their bounds.

A ``config.json`` (its ``model_args`` and top-level ``num_classes`` / ``label_names``), a side file
beside a checkpoint and a ``train.py`` checkpoint's ``model_kwargs`` are data from strangers. Each
option they set must be one of :data:`OPTIONS`, of the right type and inside its bounds, checked
here before anything is built; anything else (``pretrained``, ``cache_dir``, ``checkpoint_path``,
``pretrained_cfg_overlay``, ``device`` ...) is refused by name, so no network call, file read or
file write ever follows from a config. Where weights exist, the architecture must also agree with
their shapes (:func:`shape_problems`) before a model is built, even on ``meta``.

The options, their types and defaults are ``VisionTransformer``'s constructor signature; the names a
named option takes and the size bounds are :mod:`timm_vitscratch.choices`; what is ours alone is here:
the range of each number (:data:`RANGES`). :func:`bounds_table` prints the table docs/guarantees.md shows.
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from .. import choices
from ..errors import ModelArgsError
from ..gate.config_fields import check_input_size_form, check_label_names
from ..layouts.safetensors_file import safetensors_header
from .vision_transformer import VisionTransformer


@dataclass(frozen=True)
class Option:
    """One constructor option a file may set: its kind and what it may be."""

    kind: str  # int | size | float | bool | choice
    low: Any = None
    high: Any = None
    ends: str = "[]"  # which ends of [low, high] are included: "[)" for rates < 1, "(]" for eps > 0
    choices: tuple[str, ...] = ()
    nullable: bool = False

    def expected(self) -> str:
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            what = {
                "int": "an integer",
                "float": "a finite number",
                "size": "an integer or [height, width] of integers",
            }
            text = f"{what[self.kind]} in {self.ends[0]}{self.low:,}, {self.high:,}{self.ends[1]}"
        return text + (", or null" if self.nullable else "")


#: the range of every number a file may set, ends included as marked (a number without one is not settable)
RANGES: dict[str, tuple[float, float, str]] = {
    "img_size": (1, choices.MAX_IMG_SIDE, "[]"),
    "patch_size": (1, choices.MAX_PATCH_SIZE, "[]"),
    "in_chans": (1, choices.MAX_IN_CHANS, "[]"),
    "num_classes": (0, choices.MAX_NUM_CLASSES, "[]"),
    "embed_dim": (1, choices.MAX_EMBED_DIM, "[]"),
    "depth": (1, choices.MAX_DEPTH, "[]"),
    "num_heads": (1, choices.MAX_HEADS, "[]"),
    "mlp_ratio": (0.0, choices.MAX_MLP_RATIO, "(]"),
    "init_values": (0.0, 10.0, "[]"),
    "reg_tokens": (0, choices.MAX_REG_TOKENS, "[]"),
    **dict.fromkeys(
        ("drop_rate", "pos_drop_rate", "patch_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate"),
        (0.0, 1.0, "[)"),
    ),
    "qk_scale": (0.0, 100.0, "(]"),
    "representation_size": (1, choices.MAX_EMBED_DIM, "[]"),
    "norm_eps": (0.0, 0.1, "(]"),
    "swiglu_align_to": (0, 1024, "[]"),
    "rope_temperature": (0.0, 1e6, "(]"),
    "rope_grid_offset": (0.0, 4.0, "[]"),
    "ref_feat_shape": (1, choices.MAX_IMG_SIDE, "[]"),
    "attn_pool_num_heads": (1, choices.MAX_HEADS, "[]"),
    "attn_pool_mlp_ratio": (0.0, choices.MAX_MLP_RATIO, "(]"),
}
#: the names a file may give a named option (the constructor takes more for some: module classes, callables)
NAMES: dict[str, tuple[str, ...]] = {
    "global_pool": choices.GLOBAL_POOLS,
    "pos_embed": choices.POS_EMBEDS,
    "pos_embed_interp_mode": choices.POS_EMBED_INTERP_MODES,
    "weight_init": choices.WEIGHT_INITS,
    "attn_impl": choices.ATTN_IMPLS,
    "act_layer": choices.GELU_NAMES + choices.ACT_NAMES,
    "norm_layer": choices.NORM_NAMES,
    "embed_norm_layer": choices.NORM_NAMES,
    "mlp_layer": choices.MLP_LAYERS,
    "rope_type": choices.ROPE_TYPES,
    "rope_grid_indexing": choices.ROPE_GRID_INDEXINGS,
    "attn_type": choices.ATTN_TYPES,
}
#: constructor arguments that say where the model is made, not what it is: never set by a file
NOT_FROM_FILES = ("device", "dtype")
#: an annotation (less None) -> the kind of value a file gives; other types (modules, callables) are not settable
_KINDS = {"bool": "bool", "int": "int", "float": "float", "int | tuple[int, int]": "size", "str": "choice"}
_PARAMETERS = inspect.signature(VisionTransformer.__init__).parameters


def _option(name: str, parameter: inspect.Parameter) -> Option | None:
    """What a file may give ``name``, from its annotation (text too) and our names and ranges; None: not settable."""
    annotation = parameter.annotation
    members = (annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)).split(" | ")
    kind = "choice" if name in NAMES else _KINDS.get(" | ".join(m for m in members if m != "None"))
    nullable = "None" in members
    if name in NOT_FROM_FILES or kind is None or (kind == "choice") != (name in NAMES):
        return None
    if kind in ("bool", "choice"):
        return Option(kind, choices=NAMES.get(name, ()), nullable=nullable)
    return Option(kind, *RANGES[name], nullable=nullable) if name in RANGES else None


#: every constructor argument's default
DEFAULTS: dict[str, Any] = {n: p.default for n, p in _PARAMETERS.items() if p.default is not inspect.Parameter.empty}
#: every option a file may set, with what it may be, in the constructor's order
OPTIONS: dict[str, Option] = {n: o for n, p in _PARAMETERS.items() if (o := _option(n, p)) is not None}


def _fail(where: str, name: str, value: Any, expected: str) -> ModelArgsError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return ModelArgsError(f"{where}: {name} is {shown}; expected {expected}")


def _check_number(option: Option, value: Any) -> bool:
    if option.kind == "int" or option.kind == "size":
        if type(value) is not int:
            return False
    elif type(value) not in (int, float) or not math.isfinite(value):
        return False
    if value < option.low or (option.ends[0] == "(" and value == option.low):
        return False
    return bool(value < option.high or (option.ends[1] == "]" and value == option.high))


def check_option(name: str, value: Any, where: str) -> Any:
    """``value`` for option ``name`` when it is allowed and in bounds (a [h, w] list becomes a tuple)."""
    option = OPTIONS.get(name)
    if option is None:
        raise ModelArgsError(
            f"{where}: {name!r} is not a model option a file may set (allowed: "
            f"{', '.join(OPTIONS)}); a config is data and never passes arguments to anything else"
        )
    if value is None and option.nullable:
        return None
    if option.kind == "bool":
        ok = type(value) is bool
    elif option.kind == "choice":
        ok = isinstance(value, str) and value in option.choices
    elif option.kind == "size" and isinstance(value, (list, tuple)):
        ok = len(value) == 2 and all(_check_number(option, v) for v in value)
        value = tuple(value) if ok else value
    else:
        ok = _check_number(option, value)
    if not ok:
        raise _fail(where, name, value, option.expected())
    return value


def check_model_args(args: Any, where: str) -> dict[str, Any]:
    """``args`` (a file's ``model_args`` / ``model_kwargs``) checked option by option.

    Raises :class:`ModelArgsError` naming ``where``, the option, its value and what was expected.
    """
    if not isinstance(args, Mapping):
        raise ModelArgsError(f"{where}: model_args is {type(args).__name__}; expected an object of model options")
    checked = {}
    for name, value in args.items():
        if not isinstance(name, str):
            raise ModelArgsError(f"{where}: option name {name!r} is not a string")
        checked[name] = check_option(name, value, where)
    return checked


def _pair(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def check_architecture(args: Mapping[str, Any], where: str) -> None:
    """A complete argument set (the variant's table entry under the file's options), as a whole: each option
    inside its bounds, heads that divide the width, patches that fit the image, and a model small enough to
    build, counted on ``meta`` (the cheap checks first keep that model's size bounded)."""
    args = check_model_args(args, where)
    full = {**DEFAULTS, **args}
    dim, heads = full["embed_dim"], full["num_heads"]
    if dim % heads:
        raise ModelArgsError(f"{where}: num_heads {heads} does not divide embed_dim {dim}")
    img, patch = _pair(full["img_size"]), _pair(full["patch_size"])
    if img[0] < patch[0] or img[1] < patch[1]:
        raise ModelArgsError(f"{where}: img_size {img} is smaller than patch_size {patch}")
    patches = (img[0] // patch[0]) * (img[1] // patch[1])
    if patches > choices.MAX_PATCHES:
        raise ModelArgsError(
            f"{where}: img_size {img} at patch_size {patch} makes {patches:,} patches; expected at most {choices.MAX_PATCHES:,}"
        )
    count = parameter_count(args, where)
    if count > choices.MAX_PARAMETERS:
        raise ModelArgsError(
            f"{where}: these options describe a model of {count:,} parameters; expected at most {choices.MAX_PARAMETERS:,}"
        )


def true_param_count(model: nn.Module) -> int:
    """Every parameter, including those held directly by the model (tokens, position table)."""
    return sum(p.numel() for p in model.parameters())


def parameter_count(args: Mapping[str, Any], where: str) -> int:
    """Parameters of the model checked options ``args`` describe: the model built on ``meta`` (no storage), counted.

    A combination the constructor refuses is a :class:`ModelArgsError` naming ``where``.
    """
    try:
        model = VisionTransformer(**args, device="meta")
    except (ValueError, TypeError) as err:
        raise ModelArgsError(f"{where}: {err}") from None
    return true_param_count(model)


_BLOCK = re.compile(r"^blocks\.(\d+)\.")
Shape = tuple[int, ...]


def shape_problems(args: Mapping[str, Any], shapes: Mapping[str, Shape]) -> list[str]:
    """Where a complete argument set disagrees with weights in our layout (names -> shapes), read from the
    tensors that fix each fact: blocks, width, patch, classes, representation layer, registers, position table.
    Checked before a model is built; the built model's exact shapes are compared afterwards."""
    problems = []
    full = {**DEFAULTS, **args}
    blocks = {int(m.group(1)) for m in map(_BLOCK.match, shapes) if m}
    if full["depth"] != len(blocks):
        problems.append(f"depth {full['depth']!r}, but the weights hold {len(blocks)} blocks")
    stem = shapes.get("patch_embed.proj.weight")
    if stem is not None and len(stem) == 4:
        if stem[0] != full["embed_dim"]:
            problems.append(f"embed_dim {full['embed_dim']!r}, but patch_embed.proj.weight is {stem}")
        if tuple(stem[2:]) != _pair(full["patch_size"]):
            problems.append(f"patch_size {full['patch_size']!r}, but patch_embed.proj.weight is {stem}")
    head = shapes.get("head.weight")
    if (head[0] if head else 0) != full["num_classes"]:
        problems.append(
            f"num_classes {full['num_classes']!r}, but " + (f"head.weight is {head}" if head else "there is no head")
        )
    rep = shapes.get("pre_logits.fc.weight")
    if (rep[0] if rep else None) != full["representation_size"]:
        problems.append(
            f"representation_size {full['representation_size']!r}, but "
            + (f"pre_logits.fc.weight is {rep}" if rep else "there is no representation layer")
        )
    reg = shapes.get("reg_token")
    if (reg[1] if reg and len(reg) == 3 else 0) != full["reg_tokens"]:
        problems.append(f"reg_tokens {full['reg_tokens']!r}, but reg_token is {reg}")
    pos = shapes.get("pos_embed")
    if pos is not None and len(pos) == 3 and full["pos_embed"] == "learn":
        img, patch = _pair(full["img_size"]), _pair(full["patch_size"])
        prefix = 0 if full["no_embed_class"] else int(full["class_token"]) + int(full["distilled"]) + full["reg_tokens"]
        need = (img[0] // patch[0]) * (img[1] // patch[1]) + prefix
        if pos[1] != need:
            problems.append(
                f"img_size {full['img_size']!r} needs a position table of {need} rows, but pos_embed is {pos}"
            )
    return problems


def check_saved_config(
    base: Mapping[str, Any],
    model_args: Any,
    cfg: Mapping[str, Any],
    where: str,
    shapes: Mapping[str, Shape] | None = None,
) -> dict[str, Any]:
    """What a saved ``config.json`` asks of variant ``base`` (its table entry), checked before anything is built.

    ``model_args`` go through the allow-list; ``cfg`` holds the fields timm reads from the file besides them
    (``num_classes``, ``label_names``, ``input_size``). With ``shapes`` (the weights' names -> shapes) the
    architecture must also match the weights. Returns the checked ``model_args``.
    """
    args = check_model_args(model_args, f"{where} model_args")
    num_classes = check_option(
        "num_classes", cfg.get("num_classes", args.get("num_classes", DEFAULTS["num_classes"])), f"{where} num_classes"
    )
    if args.get("num_classes", num_classes) != num_classes:
        raise ModelArgsError(
            f"{where}: num_classes is {num_classes} but model_args say {args['num_classes']}; "
            f"expected one classifier size"
        )
    input_size = cfg.get("input_size")
    if input_size is not None:
        check_input_size_form(input_size, where, ModelArgsError)
        check_option("in_chans", input_size[0], f"{where} pretrained_cfg.input_size")
        check_option("img_size", list(input_size[1:]), f"{where} pretrained_cfg.input_size")
    if cfg.get("label_names") is not None:
        check_label_names(cfg["label_names"], num_classes, where, ModelArgsError)
    full = {**base, **args, "num_classes": num_classes}
    if input_size is not None:  # timm's builder takes the image size and channels from it when args do not say
        full.setdefault("in_chans", input_size[0])
        full["img_size"] = args.get("img_size", tuple(input_size[1:]))
    check_architecture(full, where)
    problems = shape_problems(full, shapes) if shapes is not None else []
    if problems:
        raise ModelArgsError(f"{where} does not describe the weights: {'; '.join(problems)}")
    return args


def safetensors_shapes(path: str) -> dict[str, Shape] | None:
    """Names -> shapes from a safetensors file's header (None when there is no such file: the loader says why)."""
    if not os.path.isfile(path):
        return None
    try:
        return {name: shape for name, (shape, _) in safetensors_header(path).items()}
    except ValueError as err:
        raise ModelArgsError(f"{path} is not a readable safetensors file: {err}") from None


def bounds_table() -> str:
    """The allow-list as a Markdown table (docs/guarantees.md shows it)."""
    rows = ["| option | a file may set |", "|---|---|"]
    rows += [f"| `{name}` | {option.expected()} |" for name, option in OPTIONS.items()]
    rows += [
        "",
        f"Together: at most {choices.MAX_PATCHES:,} patches per image, `num_heads` divides `embed_dim`, and at "
        f"most {choices.MAX_PARAMETERS:,} parameters (counted on `meta`, before anything is built).",
    ]
    return "\n".join(rows)
