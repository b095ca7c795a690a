"""The ``pretrained_cfg`` fields a config file may set: preprocessing, labels, licence and provenance.

timm reads a model directory's or a Hub repo's ``config.json`` and hands its ``pretrained_cfg`` to the
model's entry function, which then loads weights as that cfg says. Some of timm's fields choose what is
loaded or run: ``hf_hub_filename`` sends ``hf-hub:`` to another file of the repo, ``file``, ``url`` and
``hf_hub_id`` send it elsewhere, ``custom_load`` to a model's own loader. A file written by someone else
may set only the fields of :data:`DATA_FIELDS`; any other field is refused by name, before anything is
built or fetched, on every route that reads a config (``vitscratch pull`` / ``push`` / ``summary`` /
``attention``, timm's ``local-dir:`` and ``hf-hub:``, ``register_tag_from_hub``).

The file's layout is read here too: where its ``pretrained_cfg`` is (:func:`file_pretrained_cfg`: timm's
``pretrained_cfg`` object, or the top-level fields of its older single-object layout), and the form of the
fields whose values the model's options then bound (``label_names``: one string per class; ``input_size``:
``[channels, height, width]``, whose entries :mod:`timm_vitscratch.models.model_args` checks as ``in_chans`` /
``img_size``).

A few data fields describe the model rather than the weights: ``first_conv`` and ``classifier`` may only
name our models' stem and heads, and ``custom_load`` may only be false (what timm's own exports write). Text fields must be text (they reach the model
card, escaped, see ``hub.model_card``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .files import ErrorType, PathLike, read_text

#: fields a config file may set, by what they hold
PREPROCESSING = (
    "input_size",
    "test_input_size",
    "min_input_size",
    "fixed_input_size",
    "interpolation",
    "crop_pct",
    "test_crop_pct",
    "crop_mode",
    "mean",
    "std",
    "pool_size",
    "test_pool_size",
)
LABELS = ("num_classes", "label_offset", "label_names", "label_descriptions")
PROVENANCE = ("license", "description", "origin_url", "paper_name", "paper_ids", "notes", "tag", "architecture")
MODEL = ("first_conv", "classifier", "custom_load")
DATA_FIELDS = frozenset(PREPROCESSING + LABELS + PROVENANCE + MODEL)
#: timm's fields that choose what is loaded or run: named in the refusal, so that it says why
LOADING_FIELDS = frozenset(
    ("url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "state_dict_key", "checkpoint_path")
)
#: what the model-describing fields may say of our models (timm's names of their stem and heads): the classic
#: ViT's stem, or timm NaFlexVit's (``embeds.proj``, the SigLIP 2 NaFlex rows)
FIRST_CONV = "patch_embed.proj"
FIRST_CONVS = (FIRST_CONV, "embeds.proj")
CLASSIFIERS = ("head", "head_dist")
#: top-level keys of a config.json that are structure, not pretrained-cfg fields (timm's ``save_config_for_hf``
#: writes the first six, ``model_dir`` adds its ``vitscratch`` block; ``labels`` is timm's old name of label_names)
CONFIG_STRUCTURE = (
    "architecture",
    "num_features",
    "global_pool",
    "model_args",
    "pretrained_cfg",
    "vitscratch",
    "labels",
)
_TEXT = ("license", "description", "origin_url", "paper_name", "tag", "architecture", "interpolation", "crop_mode")
_TEXTS = ("paper_ids", "notes")


def check_pretrained_cfg(
    cfg: Mapping[str, Any], where: str, error: ErrorType, set_by_timm: Collection[str] = ()
) -> None:
    """Refuse ``cfg`` (a config file's ``pretrained_cfg``) unless it sets only data fields, each of its kind.

    ``set_by_timm``: fields timm itself fills in on the route (``source`` and ``hf_hub_id`` for ``hf-hub:``,
    ``source`` and ``file`` for ``local-dir:``), overwriting what the file says; they are not the file's.
    ``where`` starts the message (``DIR: config.json``).
    """
    for name, value in cfg.items():
        if name in set_by_timm:
            continue
        loads = name in LOADING_FIELDS or (name == "custom_load" and value not in (False, None))
        if loads or name not in DATA_FIELDS:
            why = "chooses what is loaded or run" if loads else "is not a pretrained_cfg field a file may set"
            raise error(
                f"{where} pretrained_cfg: field {name!r} {why}; a config is data and may set only "
                f"preprocessing, labels and licence ({', '.join(sorted(DATA_FIELDS))})"
            )
        expected = _expected(name, value)
        if expected:
            shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
            raise error(f"{where} pretrained_cfg.{name} is {shown}; expected {expected}")


def _expected(name: str, value: Any) -> str:
    """What ``value`` of field ``name`` should have been, or '' when it is fine."""
    if value is None:
        return ""
    if name in _TEXT and not isinstance(value, str):
        return "a string"
    if name in _TEXTS and not (
        isinstance(value, str) or (isinstance(value, list | tuple) and all(isinstance(v, str) for v in value))
    ):
        return "a string or a list of strings"
    if name == "first_conv" and value not in FIRST_CONVS:
        return f"{FIRST_CONV!r} or {FIRST_CONVS[1]!r} (the stems of timm_vitscratch models)"
    if name == "classifier":
        heads = [value] if isinstance(value, str) else value
        if not isinstance(heads, list | tuple) or not heads or not all(h in CLASSIFIERS for h in heads):
            return f"{CLASSIFIERS[0]!r} or {list(CLASSIFIERS)!r} (the heads of timm_vitscratch models)"
    return ""


def file_pretrained_cfg(config: Mapping[str, Any]) -> Any:
    """The pretrained-cfg fields a ``config.json`` sets: its ``pretrained_cfg``, or, in timm's older
    single-object layout (no ``pretrained_cfg`` key, which timm still reads), its top-level fields."""
    if "pretrained_cfg" in config:
        return config["pretrained_cfg"]
    return {k: v for k, v in config.items() if k not in CONFIG_STRUCTURE}


def checked_pretrained_cfg(config: Mapping[str, Any], where: str, error: ErrorType) -> dict[str, Any]:
    """A ``config.json``'s pretrained-cfg fields (:func:`file_pretrained_cfg`), an object setting data fields only
    (:func:`check_pretrained_cfg`)."""
    cfg = file_pretrained_cfg(config)
    if not isinstance(cfg, dict):
        raise error(f"{where} pretrained_cfg is a {type(cfg).__name__}; expected an object")
    check_pretrained_cfg(cfg, where, error)
    return cfg


def check_label_names(names: Any, num_classes: int, where: str, error: ErrorType) -> list[str]:
    """A file's ``label_names``: a list of strings, one per class."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise error(
            f"{where}: label_names is {type(names).__name__}"
            f"{'' if not isinstance(names, (list, tuple)) else ' with entries that are not strings'}"
            f"; expected a list of {num_classes} strings, one per class"
        )
    if len(names) != num_classes:
        raise error(
            f"{where}: {len(names)} label_names for a classifier of {num_classes} classes; expected one per class"
        )
    return list(names)


def label_lines(path: PathLike, error: ErrorType) -> list[str]:
    """The label names in a text file, one per line (blank lines skipped), read bounded as UTF-8 text."""
    return [line.strip() for line in read_text(path, error).splitlines() if line.strip()]


def check_input_size_form(value: Any, where: str, error: ErrorType) -> list[Any]:
    """A file's ``pretrained_cfg.input_size`` as three entries, ``[channels, height, width]`` (their values are
    model options, bounded as ``in_chans`` and ``img_size`` by the caller)."""
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise error(f"{where}: pretrained_cfg.input_size is {shown}; expected [channels, height, width]")
    return list(value)
