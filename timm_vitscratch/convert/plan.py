"""Planning a conversion: every check that needs no tensor data, done before anything is written.

The plan says which format the checkpoint is, which variant it becomes (with the ``model_args``
that rebuild it exactly), and for every tensor of our model the source keys and operation that make
it, with its final shape and dtype. Missing keys, unexpected keys and shapes that do not fit are
all reported here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from timm.layers import resample_abs_pos_embed
from torch import nn

from ..choices import DTYPE_NAMES
from ..errors import ConversionError, ModelArgsError, ModelDirectoryError, listed
from ..gate.weight_dtypes import check_weight_dtypes, is_weight_dtype
from ..layouts.checkpoint import Checkpoint
from ..layouts.keymap import KeyMap, Rule, available
from ..licenses import UNKNOWN, Statement, known_license, resolve_license, source_statements
from ..model_dir import config_model_args, model_config
from ..models.architecture import Arch
from ..models.build import build_on_meta
from ..models.checkpoint_filter import NAFLEXVIT_NAMES, to_naflexvit
from ..models.layers import to_2tuple
from ..models.model_args import check_architecture, check_option
from ..models.variants import ARCHITECTURES
from ..tensor_writer import TensorSpec
from .shape_inference import choose_variant, infer_arch, model_args, settle_heads, settle_mlp
from .source_format import SourceFormat

#: the dtypes weights can be written in (``--dtype``)
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass
class Target:
    spec: TensorSpec
    rule: Rule


@dataclass
class ConversionPlan:
    fmt: SourceFormat
    arch: Arch
    model_name: str
    model_args: dict[str, Any]
    img_size: tuple[int, int]
    meta_model: nn.Module
    targets: list[Target]
    ignored: set[str] = field(default_factory=set)
    label_names: list[str] | None = None

    @property
    def specs(self) -> list[TensorSpec]:
        return [t.spec for t in self.targets]

    @property
    def resampled(self) -> bool:
        return tuple(self.img_size) != tuple(self.arch.img_size)


def parse_dtype(dtype: Any) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        if dtype is not None and dtype not in DTYPES.values():
            raise ConversionError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype}")
        return dtype
    if dtype not in DTYPES:
        raise ConversionError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def _pair(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    try:
        return to_2tuple(check_option("img_size", size, "img_size"), "img_size")
    except ModelArgsError as err:
        raise ConversionError(str(err)) from None


def meta_output(rule: Rule, checkpoint: Checkpoint, target: str) -> torch.Tensor:
    """Run a rule on storage-less tensors: the output's shape and dtype, or a clear error."""
    try:
        return rule.op(*[checkpoint.meta(s) for s in rule.sources])
    except (RuntimeError, ValueError, IndexError, TypeError) as err:
        shapes = ", ".join(f"{s} {checkpoint.shape(s)}" for s in rule.sources)
        raise ConversionError(f"cannot make {target!r} from {shapes}: the shapes do not fit ({err})") from None


def _resampler(
    fmt: SourceFormat, checkpoint: Checkpoint, arch: Arch, img_size: tuple[int, int]
) -> Callable[[torch.Tensor], torch.Tensor]:
    grid = [img_size[0] // arch.patch_size, img_size[1] // arch.patch_size]

    def resample(pos: torch.Tensor) -> torch.Tensor:
        return resample_abs_pos_embed(
            pos,
            new_size=grid,
            old_size=list(arch.grid),
            num_prefix_tokens=arch.pos_prefix_tokens,
            **fmt.resample_of(checkpoint).kwargs(),
        )

    return resample


def read_arch(checkpoint: Checkpoint, fmt: SourceFormat, model: str | None = None) -> tuple[Arch, KeyMap, set[str]]:
    """The architecture a checkpoint holds (heads as far as the source says), its key map, and the keys
    that may be dropped; ``model`` is the variant the user names, where the weights leave the family open."""
    keys = set(checkpoint.keys())
    ignored = fmt.ignorable_keys(checkpoint)
    depth = fmt.depth(keys)
    rules: KeyMap = fmt.key_map(keys, depth)
    # the architecture is what the kept keys make: droppable ones (zero q/v biases, say) may fill a model that
    # asks for them (--model), but do not ask for it
    shapes = {
        target: tuple(meta_output(rule, checkpoint, target).shape)
        for target, rule in rules.items()
        if available(rule, keys - ignored)
    }
    sources = {target: rule.sources for target, rule in rules.items()}
    options, hints = fmt.settle_family(shapes, checked_hints(fmt.hints(checkpoint, keys)), model)
    arch = infer_arch(shapes, depth, hints, sources, options, fmt.recorded_facts(checkpoint, hints))
    return arch, rules, ignored


#: architecture facts a side file may state, and the model option whose bounds each must keep
HINT_OPTIONS = {
    "num_heads": "num_heads",
    "img_size": "img_size",
    "norm_eps": "norm_eps",
    "act_layer": "act_layer",
    "depth": "depth",
    "embed_dim": "embed_dim",
    "num_classes": "num_classes",
    "representation_size": "representation_size",
    "rope_temperature": "rope_temperature",
}


def checked_hints(hints: dict[str, Any]) -> dict[str, Any]:
    """A format's side-file facts, each inside the bounds a config's own option has (a side file is data)."""
    where = hints.get("stated_by", "the config beside the weights")
    try:
        return {k: check_option(HINT_OPTIONS[k], v, where) if k in HINT_OPTIONS else v for k, v in hints.items()}
    except ModelArgsError as err:
        raise ConversionError(str(err)) from None


#: pretrained-cfg fields that describe where a tag's weights come from
TAG_PROVENANCE = ("tag", "description", "origin_url", "paper_ids", "paper_name", "notes", "license")


def source_license(checkpoint: Checkpoint, fmt: SourceFormat, recorded: Any, given: str | None = None) -> str:
    """The license the converted directory records: what the source's files say (:mod:`timm_vitscratch.licenses`)
    and the format's own record ``recorded`` (a timm config's, or the family's for a layout only its publisher
    releases) must agree; ``given`` (``--license``) names it where they name none; ``unknown`` where nothing does."""
    statements = source_statements(checkpoint.directory, checkpoint.path, ConversionError)
    if recorded is not None and str(recorded).strip().lower() != UNKNOWN:
        cfg = checkpoint.side_config.get("pretrained_cfg")
        where = "config.json" if isinstance(cfg, dict) and "license" in cfg else f"the {fmt.name} layout (its family's)"
        statements.append(Statement(where, known_license(recorded), f"license: {str(recorded)[:80]}"))
    try:
        return resolve_license(statements, given)
    except ValueError as err:
        raise ConversionError(f"{err}; nothing was written", checkpoint.path) from None


def check_readable(meta_model: nn.Module, targets: list[Target], labels: list[str] | None) -> None:
    """The config.json and tensor shapes the plan would write pass the check a model directory gets when it
    is read (:func:`timm_vitscratch.model_dir.config_model_args`): what convert writes, the package reads."""
    config = model_config(meta_model, label_names=labels)
    shapes = {t.spec.name: tuple(t.spec.shape) for t in targets}
    try:
        config_model_args(config, shapes, "the converted model")
    except ModelDirectoryError as err:
        raise ConversionError(f"{err}; nothing was written (such a model directory is refused when read)") from None


def plan_conversion(
    checkpoint: Checkpoint,
    fmt: SourceFormat,
    model: str | None = None,
    img_size: Any = None,
    dtype: torch.dtype | None = None,
    num_heads: int | None = None,
    label_names: list[str] | None = None,
    license: str | None = None,
) -> ConversionPlan:
    keys = set(checkpoint.keys())
    arch, rules, ignored = read_arch(checkpoint, fmt, model)
    name = choose_variant(arch, model)
    settle_heads(arch, name, num_heads)
    settle_mlp(arch, name)
    target_size = _pair(img_size) or arch.img_size
    for side in target_size:
        if side % arch.patch_size:
            raise ConversionError(f"img_size {target_size} is not a multiple of the patch size {arch.patch_size}")
    args = model_args(arch, name, target_size)
    # what a model directory is checked against when read (patches per image, parameters, heads): the same
    # function, before anything is built, so that convert never writes a directory the package then refuses
    where = f"--img-size {target_size[0]}x{target_size[1]}" if img_size is not None else "the converted model"
    try:
        check_architecture({**ARCHITECTURES[name], **args}, where)
    except ModelArgsError as err:
        raise ConversionError(
            f"{err}; nothing was written (a model directory past this bound is refused when read)"
        ) from None
    # the variant's cfg is its default tag's: converted weights are not that tag, so none of its provenance
    # is kept; what the source itself records (a timm config.json's origin, license ...) comes back below
    overlay = {**dict.fromkeys(TAG_PROVENANCE), **fmt.preprocessing(checkpoint)}
    overlay["license"] = source_license(checkpoint, fmt, overlay["license"], license)
    labels = label_names if label_names is not None else fmt.label_names(checkpoint)
    if labels is not None and len(labels) != arch.num_classes:
        raise ConversionError(
            f"{len(labels)} label names for a classifier of {arch.num_classes} classes; expected one per class"
        )
    try:
        meta_model = build_on_meta(name, pretrained_cfg_overlay=overlay, **args)
    except (ValueError, TypeError) as err:
        raise ConversionError(f"the shapes describe a model timm cannot build ({name} with {args}): {err}") from None

    if tuple(target_size) != tuple(arch.img_size) and "pos_embed" in rules:
        rules = {**rules, "pos_embed": rules["pos_embed"].then(_resampler(fmt, checkpoint, arch, target_size))}
    own = meta_model.state_dict()
    if any(name in own for name in NAFLEXVIT_NAMES):  # a NaFlex row (--model): timm NaFlexVit's names and shapes
        rules = _naflexvit_rules(rules, meta_model)
    targets, missing = [], []
    for target, expected in own.items():
        rule = rules.get(target)
        if rule is None or not available(rule, keys):
            missing.extend([s for s in rule.sources if s not in keys] if rule else [target])
            continue
        out = meta_output(rule, checkpoint, target)
        if not is_weight_dtype(out.dtype):  # the gate's one rule on weights' dtypes
            sources = [(source, checkpoint.dtype(source)) for source in rule.sources if source in checkpoint]
            check_weight_dtypes(sources or [(target, out.dtype)], "", lambda m: ConversionError(m, checkpoint.path))
        if tuple(out.shape) != tuple(expected.shape):
            raise ConversionError(
                f"{listed(list(rule.sources))} has shape {tuple(out.shape)} in our layout, but "
                f"{name} ({arch.describe()}) needs {tuple(expected.shape)} for {target!r}"
            )
        out_dtype = dtype if dtype is not None and out.dtype.is_floating_point else out.dtype
        targets.append(Target(TensorSpec(target, tuple(expected.shape), out_dtype), rule))
    if missing:
        raise ConversionError(
            f"missing keys for a {name} in {fmt.name} layout: {listed(sorted(set(missing)))}", checkpoint.path
        )
    check_readable(meta_model, targets, labels)
    used = {s for t in targets for s in t.rule.sources} | ignored
    unexpected = sorted(keys - used)
    if unexpected:
        raise ConversionError(
            f"unexpected keys (no place for them in {name}, {arch.describe()}): {listed(unexpected)}", checkpoint.path
        )
    return ConversionPlan(
        fmt,
        arch,
        name,
        args,
        target_size,
        meta_model,
        targets,
        ignored,
        list(labels) if labels is not None else None,
    )


def _naflexvit_rules(rules: KeyMap, model: nn.Module) -> KeyMap:
    """A key map onto the classic names, onto a NaFlex row's (timm ``NaFlexVit``'s ``embeds``) as well: the patch
    kernel as the model's Linear over flattened patches, the table as its (1, H, W, D) grid (the same functions as
    :func:`~timm_vitscratch.models.checkpoint_filter.checkpoint_filter_fn`)."""
    out = dict(rules)
    for theirs, classic in NAFLEXVIT_NAMES.items():
        if classic in rules:

            def reshaped(tensor: torch.Tensor, classic: str = classic, theirs: str = theirs) -> torch.Tensor:
                return torch.as_tensor(to_naflexvit({classic: tensor}, model)[theirs])

            out[theirs] = rules[classic].then(reshaped)
    return out
