"""What a file may ask of the model: the allow-list of constructor options, with their bounds.

A ``config.json`` (its ``model_args`` and top-level ``num_classes`` / ``label_names``), a side file
beside a checkpoint and a ``train.py`` checkpoint's ``model_kwargs`` are data from strangers. Each
option they set must be one of :data:`OPTIONS`, of the right type and inside its bounds, checked
here before anything is built; anything else (``pretrained``, ``cache_dir``, ``checkpoint_path``,
``pretrained_cfg_overlay``, ``device`` ...) is refused by name, so no network call, file read or
file write ever follows from a config. Where weights exist, the architecture must also agree with
their shapes (:func:`shape_problems`) before a model is built, even on ``meta``.

:func:`bounds_table` prints the table docs/guarantees.md shows.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ModelArgsError
from ..layouts.safetensors_file import safetensors_header

#: bounds for sizes a file may ask for; the largest published ViTs (ViT-H, ViT-G, ViT-22B) fit inside
MAX_DEPTH = 64
MAX_EMBED_DIM = 8192
MAX_HEADS = 128
MAX_NUM_CLASSES = 100_000
MAX_IMG_SIDE = 4096
MAX_PATCH_SIZE = 64
MAX_PATCHES = 16_384  # patch-grid cells of one image (a 128x128 grid: 2048 px at patch 16)
MAX_IN_CHANS = 64
MAX_REG_TOKENS = 64
MAX_MLP_RATIO = 16.0
#: the whole model, estimated before building: 2e9 parameters is 8 GB in fp32 (ViT-G has 1.8e9)
MAX_PARAMETERS = 2_000_000_000
#: timm activation names a file may give as act_layer ('' and 'gelu': GELU, the default)
ACT_NAMES = ("", "gelu", "quick_gelu", "gelu_tanh", "silu", "swish", "relu")


@dataclass(frozen=True)
class Option:
    """One constructor option a file may set: its kind, bounds and meaning."""

    kind: str  # int | size | float | bool | choice
    low: Any = None
    high: Any = None
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    open_high: bool = False  # the upper bound itself is excluded (rates < 1)
    open_low: bool = False  # the lower bound itself is excluded (eps > 0)

    def expected(self) -> str:
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        else:
            low, high = ("(" if self.open_low else "["), (")" if self.open_high else "]")
            what = {
                "int": "an integer",
                "float": "a finite number",
                "size": "an integer or [height, width] of integers",
            }[self.kind]
            text = f"{what} in {low}{self.low:,}, {self.high:,}{high}"
        return text + (", or null" if self.nullable else "")


def _int(low: int, high: int, nullable: bool = False) -> Option:
    return Option("int", low, high, nullable=nullable)


def _rate() -> Option:
    return Option("float", 0.0, 1.0, open_high=True)


_BOOL = Option("bool")
#: every option a file may set, with its bounds (names, meanings and defaults are the constructor's)
OPTIONS: dict[str, Option] = {
    "img_size": Option("size", 1, MAX_IMG_SIDE),
    "patch_size": Option("size", 1, MAX_PATCH_SIZE),
    "in_chans": _int(1, MAX_IN_CHANS),
    "num_classes": _int(0, MAX_NUM_CLASSES),
    "global_pool": Option("choice", choices=("token", "avg", "avgmax", "max", "map", "")),
    "embed_dim": _int(1, MAX_EMBED_DIM),
    "depth": _int(1, MAX_DEPTH),
    "num_heads": _int(1, MAX_HEADS),
    "mlp_ratio": Option("float", 0.0, MAX_MLP_RATIO, open_low=True),
    "qkv_bias": _BOOL,
    "qk_norm": _BOOL,
    "proj_bias": _BOOL,
    "init_values": Option("float", 0.0, 10.0, nullable=True),
    "class_token": _BOOL,
    "pos_embed": Option("choice", choices=("learn", "sincos", "none", "")),
    "no_embed_class": _BOOL,
    "reg_tokens": _int(0, MAX_REG_TOKENS),
    "pre_norm": _BOOL,
    "final_norm": _BOOL,
    "fc_norm": Option("bool", nullable=True),
    "pool_include_prefix": _BOOL,
    "dynamic_img_size": _BOOL,
    "dynamic_img_pad": _BOOL,
    "drop_rate": _rate(),
    "pos_drop_rate": _rate(),
    "patch_drop_rate": _rate(),
    "proj_drop_rate": _rate(),
    "attn_drop_rate": _rate(),
    "drop_path_rate": _rate(),
    "weight_init": Option("choice", choices=("", "jax", "jax_nlhb", "moco", "reset", "skip")),
    "norm_layer": Option("choice", choices=("layernorm",), nullable=True),
    "act_layer": Option("choice", choices=ACT_NAMES, nullable=True),
    "qk_scale": Option("float", 0.0, 100.0, nullable=True, open_low=True),
    "representation_size": _int(1, MAX_EMBED_DIM, nullable=True),
    "distilled": _BOOL,
    "distilled_training": _BOOL,
    "attn_impl": Option("choice", choices=("sdpa", "eager"), nullable=True),
    "norm_eps": Option("float", 0.0, 0.1, open_low=True),
    "pooled_forward": _BOOL,
    "patchify_channels_last": _BOOL,
}


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
    if value < option.low or (option.open_low and value == option.low):
        return False
    return value < option.high or (not option.open_high and value == option.high)


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
    """``args`` (a file's ``model_args`` / ``model_kwargs``) checked option by option, then as a whole.

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
    """Cross-option bounds of a complete argument set (the variant's table entry under the file's options):
    heads divide the width, patches fit the image, and the model is small enough to build."""
    dim, heads = args.get("embed_dim", 768), args.get("num_heads", 12)
    if dim % heads:
        raise ModelArgsError(f"{where}: num_heads {heads} does not divide embed_dim {dim}")
    img, patch = _pair(args.get("img_size", 224)), _pair(args.get("patch_size", 16))
    if img[0] < patch[0] or img[1] < patch[1]:
        raise ModelArgsError(f"{where}: img_size {img} is smaller than patch_size {patch}")
    patches = (img[0] // patch[0]) * (img[1] // patch[1])
    if patches > MAX_PATCHES:
        raise ModelArgsError(
            f"{where}: img_size {img} at patch_size {patch} makes {patches:,} patches; expected at most {MAX_PATCHES:,}"
        )
    estimate = estimated_parameters(args)
    if estimate > MAX_PARAMETERS:
        raise ModelArgsError(
            f"{where}: these options describe a model of about {estimate:,} parameters; expected "
            f"at most {MAX_PARAMETERS:,}"
        )


def estimated_parameters(args: Mapping[str, Any]) -> int:
    """Parameters of the model ``args`` describe, to within the small terms (norms, biases of the stem)."""
    dim, depth = args.get("embed_dim", 768), args.get("depth", 12)
    hidden = int(dim * args.get("mlp_ratio", 4.0))
    img, patch = _pair(args.get("img_size", 224)), _pair(args.get("patch_size", 16))
    tokens = (img[0] // patch[0]) * (img[1] // patch[1]) + 1 + args.get("reg_tokens", 0)
    width = args.get("representation_size") or dim
    block = 4 * dim * dim + 2 * dim * hidden + 9 * dim + hidden
    stem = args.get("in_chans", 3) * patch[0] * patch[1] * dim
    head = (args.get("num_classes", 1000) + 1) * width + (width * dim if args.get("representation_size") else 0)
    return depth * block + tokens * dim + stem + head * (2 if args.get("distilled") else 1)


def check_label_names(names: Any, num_classes: int, where: str) -> list[str]:
    """A file's ``label_names``: a list of strings, one per class."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ModelArgsError(
            f"{where}: label_names is {type(names).__name__}"
            f"{'' if not isinstance(names, (list, tuple)) else ' with entries that are not strings'}"
            f"; expected a list of {num_classes} strings, one per class"
        )
    if len(names) != num_classes:
        raise ModelArgsError(
            f"{where}: {len(names)} label_names for a classifier of {num_classes} classes; expected one per class"
        )
    return list(names)


_BLOCK = re.compile(r"^blocks\.(\d+)\.")
Shape = tuple[int, ...]


def shape_problems(args: Mapping[str, Any], shapes: Mapping[str, Shape]) -> list[str]:
    """Where a complete argument set disagrees with weights in our layout (names -> shapes), read from the
    tensors that fix each fact: blocks, width, patch, classes, representation layer, registers, position table.
    Checked before a model is built; the built model's exact shapes are compared afterwards."""
    problems = []
    blocks = {int(m.group(1)) for m in map(_BLOCK.match, shapes) if m}
    if args.get("depth", 12) != len(blocks):
        problems.append(f"depth {args.get('depth', 12)!r}, but the weights hold {len(blocks)} blocks")
    stem = shapes.get("patch_embed.proj.weight")
    if stem is not None and len(stem) == 4:
        if stem[0] != args.get("embed_dim", 768):
            problems.append(f"embed_dim {args.get('embed_dim', 768)!r}, but patch_embed.proj.weight is {stem}")
        if tuple(stem[2:]) != _pair(args.get("patch_size", 16)):
            problems.append(f"patch_size {args.get('patch_size', 16)!r}, but patch_embed.proj.weight is {stem}")
    head = shapes.get("head.weight")
    classes = args.get("num_classes", 1000)
    if (head[0] if head else 0) != classes:
        problems.append(f"num_classes {classes!r}, but " + (f"head.weight is {head}" if head else "there is no head"))
    rep = shapes.get("pre_logits.fc.weight")
    if (rep[0] if rep else None) != args.get("representation_size"):
        problems.append(
            f"representation_size {args.get('representation_size')!r}, but "
            + (f"pre_logits.fc.weight is {rep}" if rep else "there is no representation layer")
        )
    reg = shapes.get("reg_token")
    if (reg[1] if reg and len(reg) == 3 else 0) != args.get("reg_tokens", 0):
        problems.append(f"reg_tokens {args.get('reg_tokens', 0)!r}, but reg_token is {reg}")
    pos = shapes.get("pos_embed")
    if pos is not None and len(pos) == 3 and args.get("pos_embed", "learn") == "learn":
        img, patch = _pair(args.get("img_size", 224)), _pair(args.get("patch_size", 16))
        prefix = (
            0
            if args.get("no_embed_class")
            else (int(args.get("class_token", True)) + int(bool(args.get("distilled"))) + args.get("reg_tokens", 0))
        )
        need = (img[0] // patch[0]) * (img[1] // patch[1]) + prefix
        if pos[1] != need:
            problems.append(
                f"img_size {args.get('img_size', 224)!r} needs a position table of {need} rows, but pos_embed is {pos}"
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
        "num_classes", cfg.get("num_classes", args.get("num_classes", 1000)), f"{where} num_classes"
    )
    if args.get("num_classes", num_classes) != num_classes:
        raise ModelArgsError(
            f"{where}: num_classes is {num_classes} but model_args say {args['num_classes']}; "
            f"expected one classifier size"
        )
    input_size = cfg.get("input_size")
    if input_size is not None:
        if not isinstance(input_size, (list, tuple)) or len(input_size) != 3:
            raise _fail(where, "pretrained_cfg.input_size", input_size, "[channels, height, width]")
        check_option("in_chans", input_size[0], f"{where} pretrained_cfg.input_size")
        check_option("img_size", list(input_size[1:]), f"{where} pretrained_cfg.input_size")
    if cfg.get("label_names") is not None:
        check_label_names(cfg["label_names"], num_classes, where)
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
        f"Together: at most {MAX_PATCHES:,} patches per image, `num_heads` divides `embed_dim`, and at "
        f"most {MAX_PARAMETERS:,} parameters (estimated before anything is built).",
    ]
    return "\n".join(rows)
