"""The ``vitscratch`` console script: parses arguments and calls the library.

This module lives outside the ``timm_vitscratch`` package on purpose: importing the package
registers the models with timm, which imports torch and timm (seconds). Parsing, ``--help`` and
``--version`` need neither, so they import nothing beyond the standard library; each command
imports what it needs when it runs. ``python -m timm_vitscratch.cli`` runs the same ``main``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

PROG = "vitscratch"
MODEL_HELP = (
    "a registered name (scratch_vit_b16), a pretrained tag (scratch_vit_b16.tv_in1k), a model "
    "directory (config.json + model.safetensors), local-dir:DIR or hf-hub:ORG/NAME"
)


def _package_dir() -> Path | None:
    """The package's directory, found without importing the package (which imports torch)."""
    from importlib.util import find_spec

    spec = find_spec("timm_vitscratch")
    return None if spec is None or spec.origin is None else Path(spec.origin).parent


def _read_choices() -> ModuleType:
    """``timm_vitscratch/choices.py`` run on its own (it imports nothing): the library's own lists of sources,
    export targets and dtypes for ``--help``, without importing the package."""
    return _read_standalone("choices.py")


def _read_standalone(relative: str) -> ModuleType:
    """A module of the package that imports nothing from it at its top (``choices.py``, ``gate/picture_kind.py``,
    ``inspect/zoo_counts.py``), run on its own from its file: what it holds, without importing the package (and
    torch)."""
    from importlib.util import module_from_spec, spec_from_file_location

    package = _package_dir()
    name = "timm_vitscratch_" + relative.removesuffix(".py").replace("/", "_")
    spec = spec_from_file_location(name, (package or Path(".")) / relative)
    if package is None or spec is None or spec.loader is None:
        raise SystemExit(f"{PROG}: error: timm_vitscratch is not importable")
    module = module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass in it looks its module up
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from timm_vitscratch import choices
else:
    choices = _read_choices()


def version() -> str:
    """The package's ``__version__``, read from its source as setuptools reads it for the wheel's metadata.

    Neither imported (that would import torch) nor looked up in the installed metadata (a scan of every
    installed distribution, slower than the rest of ``--version``); and it is the version of the code
    that runs, even from a source tree on ``PYTHONPATH``.
    """
    import ast

    package = _package_dir()
    if package is None:
        return "unknown (timm_vitscratch is not importable)"
    for node in ast.parse((package / "version.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    return "unknown (no __version__ in timm_vitscratch/version.py)"


class _VersionAction(argparse.Action):
    """``--version``: reads the version only when asked."""

    def __init__(
        self,
        option_strings: list[str],
        dest: str = argparse.SUPPRESS,
        default: str = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"{parser.prog} {version()}")
        parser.exit()


# --- commands: each imports the library only when it runs ---------------------------------------------
def _cmd_list(args: argparse.Namespace) -> int:
    reference = not args.no_reference
    if args.pretrained:
        from timm_vitscratch.inspect.render import pretrained_table

        print(pretrained_table())
        return 0
    if args.live:
        return _list_live(reference)
    # the pinned counts, while the registry's sources are those they were generated from: no torch, no model built
    zoo = _read_standalone("inspect/zoo_counts.py")  # the pinned counts, without importing the package
    rows = zoo.pinned_rows()
    if rows is None:  # the registry has changed since: imported, and a variant not pinned built for its row
        from timm_vitscratch.inspect.render import zoo_table

        print(zoo_table(reference=reference))
        return 0
    print(zoo.zoo_text(rows, reference))
    return 0


def _list_live(reference: bool) -> int:
    """Every row built and counted, a column saying whether it equals the pinned one; status 1 where any differs."""
    from timm_vitscratch.inspect import zoo_counts

    live = zoo_counts.live_rows(reference)
    found = zoo_counts.differences(live, reference=reference)
    header = zoo_counts.HEADER + (zoo_counts.REFERENCE_HEADER if reference else []) + ["pinned"]
    cells = [zoo_counts.table_cells(row, reference) + ["NO" if row.name in found else "yes"] for row in live]
    print(zoo_counts.render_table(header, cells))
    print()
    for name, words in found.items():
        print(f"{name}: {words}" if name else words)
    where = f"timm_vitscratch/inspect/{zoo_counts.DATA.name}"
    if found:
        print(f"the pinned counts ({where}) are stale: regenerate them with {zoo_counts.GENERATE}")
    else:
        print(f"all {len(live)} rows equal the pinned counts ({where})")
    return 1 if found else 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from timm_vitscratch.inspect.render import render_report
    from timm_vitscratch.inspect.report import build_report

    try:
        report = build_report(
            args.model, num_classes=args.num_classes, img_size=args.img_size, batch=args.batch, layers=args.layers
        )
    except Exception as error:
        return _model_failure(error, args.model)
    print(json.dumps(report, indent=2) if args.json else render_report(report).rstrip("\n"))
    return 0


def _attention_mistake(image: str, model: str, out: str) -> str | None:
    """What is wrong with the arguments, seen without torch (in about a second, before a model is built)."""
    if Path(model).is_file() and not Path(image).is_file():
        return (
            f"--model got the file {model!r} and the image is {image!r}, which is no file: the image comes first, "
            f"the model after --model (vitscratch attention {model!r} --model {image!r})"
        )
    expected = choices.IMAGE_EXPECTED  # the library's words, as the library says them after
    if not Path(image).exists():
        return f"cannot read image {image!r}: it does not exist; {expected}"
    if not Path(image).is_file():
        return (
            f"cannot read image {image!r}: it is not a regular file (a directory, FIFO, socket or device); {expected}"
        )
    folder = Path(out).parent
    if not folder.is_dir():
        return f"output directory {str(folder)!r} does not exist (for --out {out!r}); create it first"
    if not _read_standalone("gate/picture_kind.py").is_picture(image, choices.IMAGE_FORMATS):
        return f"cannot read image {image!r}: {choices.NOT_A_PICTURE}; {expected}"
    return None


def _cmd_attention(args: argparse.Namespace) -> int:
    out = args.out or f"{Path(args.image).stem}.attention.png"
    # a missing plots extra is the library's to tell first (its one message); find_spec imports nothing
    extras = all(importlib.util.find_spec(name) is not None for name in ("matplotlib", "PIL"))
    mistake = _attention_mistake(args.image, args.model, out) if extras else None
    if mistake is not None:  # said before the package (and torch) is imported; names are shown by repr()
        print(f"{PROG}: error: {mistake}", file=sys.stderr)
        return 2
    from timm_vitscratch.inspect.attention_maps import write_attention_png

    try:
        maps = write_attention_png(args.image, args.model, out, img_size=args.img_size)
    except Exception as error:
        return _model_failure(error, args.model)
    print(f"wrote {out}: {len(maps.blocks)} blocks, {maps.grid_size[0]}x{maps.grid_size[1]} patch grid")
    return 0


def _model_failure(error: BaseException, model: str) -> int:
    """A failure to read an ``hf-hub:`` model is told as push and pull tell theirs; anything else goes on."""
    if not model.startswith("hf-hub:"):
        raise error
    repo_id, _, revision = model[len("hf-hub:") :].partition("@")
    return _hub_failure(error, repo_id, revision or None)


def _hub_failure(error: BaseException, repo_id: str, revision: str | None) -> int:
    from timm_vitscratch.hub.failures import describe_hub_error, is_hub_failure

    if not is_hub_failure(error):
        raise error
    return _error(describe_hub_error(error, repo_id, revision))


def _error(message: str) -> int:
    """The one error line, in the CLI's words (``--force`` where the library says ``force=True``), every
    control character in it escaped (a name or path from the command line, a file or the Hub); exit 2."""
    from timm_vitscratch.errors import in_cli_words, terminal_safe

    print(f"{PROG}: error: {terminal_safe(in_cli_words(message))}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def _hub_output() -> Iterator[None]:
    """huggingface_hub's output during a push or pull: its progress bars (on stderr) only where stderr is a
    terminal, unless HF_HUB_DISABLE_PROGRESS_BARS says otherwise, and none of its log lines (retries,
    skipped files): the command says what happened itself. Both settings are put back afterwards."""
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    from huggingface_hub.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        chosen = constants.HF_HUB_DISABLE_PROGRESS_BARS is not None or are_progress_bars_disabled()
        with contextlib.nullcontext() if chosen or sys.stderr.isatty() else disable_progress_bars():
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


def _cmd_push(args: argparse.Namespace) -> int:
    from timm_vitscratch.errors import PretrainedWeightsUnavailable
    from timm_vitscratch.hub.client import NothingToPush, push

    try:
        with _hub_output():
            info = push(
                args.source,
                args.repo_id,
                revision=args.revision,
                private=args.private,
                commit_message=args.commit_message,
                labels=args.labels,
                replace_card=args.replace_card,
                strict=args.strict,
                license=args.license,
            )
    except PretrainedWeightsUnavailable:
        raise  # the tag's source failed, not REPO_ID: its own message names the repo or URL
    except Exception as error:
        return _hub_failure(error, args.repo_id, args.revision)
    if isinstance(info, NothingToPush):
        print(
            f"nothing to push: the Hub already has these files at {info.oid} ({args.repo_id}@{args.revision or 'main'})"
        )
    else:
        print(f"pushed {args.source} to {args.repo_id}@{args.revision or 'main'}: commit {info.oid}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from timm_vitscratch.hub.client import pull

    try:
        with _hub_output():
            out_dir = pull(
                args.repo_id,
                args.out_dir,
                revision=args.revision,
                force=args.force,
                strict=args.strict,
                online=args.online,
            )
    except Exception as error:
        return _hub_failure(error, args.repo_id, args.revision)
    print(f"installed {args.repo_id}@{args.revision or 'main'} into {out_dir} (sha256 verified)")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from timm_vitscratch.convert import convert

    result = convert(
        args.src,
        args.out_dir,
        source=args.source,
        model=args.model,
        img_size=args.img_size,
        dtype=args.dtype,
        ema=args.ema,
        verify=args.verify,
        num_heads=args.num_heads,
        labels=args.labels,
        strict=args.strict,
        force=args.force,
        license=args.license,
    )
    how = "detected from its keys" if result.detected else "as given by --from"
    wrapper = f", weights from {result.wrapper!r}" if result.wrapper else ""
    print(f"source: {args.src} ({result.source_format} format, {how}{wrapper})")
    print(f"model: {result.model_name} ({result.description})")
    for note in result.assumption_notes:
        print(note)
    if result.resampled_from:
        height, width = result.resampled_from
        print(f"position embedding resampled from the checkpoint's {height}x{width}")
    if result.dropped:
        shown = ", ".join(result.dropped[:4]) + (", ..." if len(result.dropped) > 4 else "")
        print(
            f"left out {len(result.dropped)} of the checkpoint's {result.source_tensors} tensors, which the model "
            f"computes without (all-zero biases, training-only parts or another tower): {shown}"
        )
    print(f"wrote {result.out_dir}/model.safetensors (sha256 {result.sha256}) and {result.out_dir}/config.json")
    if result.verification is not None:
        print(f"verify: {result.verification.summary()}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from timm_vitscratch.convert import export

    result = export(args.model_dir, args.to, args.out, dtype=args.dtype)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {result.out} ({result.tensors} tensors, {result.target} layout) from {result.model_name}")
    if result.license_file is not None:
        what = "the text of the weights' license" if result.license_text else "the weights' license id (SPDX)"
        print(f"wrote {result.license_file}: {what}, which goes with every copy of them")
    return 0


def _cmd_export_checkpoint(args: argparse.Namespace) -> int:
    from timm_vitscratch.train.checkpoint import latest
    from timm_vitscratch.train.export import export_checkpoint

    source = latest(args.checkpoint)
    out = export_checkpoint(source, args.out, ema=args.ema)
    print(f"wrote {out} from {source}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from timm_vitscratch.train.run import run

    return run(args)


# --- the parser: standard library only -----------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    """argparse's parser; a command with a ``required_hint`` adds it to argparse's "arguments are required"
    complaint (``vitscratch attention MODEL IMAGE``, the order a user guesses, is told the right one)."""

    required_hint: str | None = None

    def error(self, message: str) -> NoReturn:
        if self.required_hint and message.startswith("the following arguments are required"):
            message = f"{message} ({self.required_hint})"
        # argparse quotes what it echoes with repr() mostly; escape the rest (no package import: --help stays light)
        super().error("".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in message))


def _positive_int(what: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, got {value!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, got {value!r}")
        return number

    parse.__name__ = what  # argparse names the type in its messages
    return parse


def build_parser() -> argparse.ArgumentParser:
    return _parsers()[0]


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser by name (for the docs test, and anything else that lists the commands)."""
    return _parsers()[1]


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    parser = _Parser(prog=PROG, description="From-scratch ViTs for timm.")
    parser.add_argument("--version", action=_VersionAction, help="show the installed version and exit")
    commands = parser.add_subparsers(dest="command", required=True)

    p_list = commands.add_parser("list", help="the zoo with true and torchsummary parameter counts")
    p_list.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the reference counts, torchvision's or timm's (the last two columns)",
    )
    shown = p_list.add_mutually_exclusive_group()
    shown.add_argument(
        "--pretrained",
        action="store_true",
        help="the pretrained tags instead: weights, classes, preprocessing, license, top-1",
    )
    shown.add_argument(
        "--live",
        action="store_true",
        help="build every model and reference on meta and count them, instead of reading the counts pinned in "
        "the package; say whether each row equals the pinned one (status 1 if any differs)",
    )
    p_list.set_defaults(func=_cmd_list)

    p_summary = commands.add_parser("summary", help="parameter counts of one model, explained")
    p_summary.add_argument("model", help=MODEL_HELP + "; built on meta, no weights are read")
    p_summary.add_argument("--num-classes", type=int, default=None, help="classifier size (default: the model's)")
    p_summary.add_argument("--img-size", type=int, default=None, help="image side in pixels (default: the model's)")
    p_summary.add_argument("--batch", type=int, default=1, help="batch for FLOPs and training activations")
    p_summary.add_argument("--layers", action="store_true", help="add the per-layer table (torchsummary layout)")
    p_summary.add_argument("--json", action="store_true", help="print the same report as JSON")
    p_summary.set_defaults(func=_cmd_summary)

    p_attention = commands.add_parser("attention", help="PNG of what the model attends to (CLS attention, rollout)")
    p_attention.add_argument("image", help="image file Pillow can read")
    p_attention.add_argument(
        "--model", required=True, help=MODEL_HELP + " (a bare name has random weights; a tag loads its weights)"
    )
    p_attention.add_argument("--out", default=None, help="PNG to write (default: IMAGE_STEM.attention.png here)")
    p_attention.add_argument("--img-size", type=int, default=None, help="image side in pixels (default: the model's)")
    p_attention.set_defaults(func=_cmd_attention)
    assert isinstance(p_attention, _Parser)  # subparsers are built by the parent's class
    p_attention.required_hint = (
        "the image comes first and the model after --model: vitscratch attention IMAGE --model MODEL, "
        "e.g. vitscratch attention photo.jpg --model scratch_vit_b16"
    )

    p_push = commands.add_parser("push", help="push a model directory (or a registered model) to the Hub")
    p_push.add_argument(
        "source",
        metavar="DIR_OR_MODEL",
        help="a model directory (config.json + model.safetensors) or a registered model name[.tag]",
    )
    p_push.add_argument("repo_id", metavar="REPO_ID", help="namespace/name on the Hub (HF_ENDPOINT, HF_TOKEN)")
    p_push.add_argument("--revision", default=None, help="branch to commit to, created if missing (default: main)")
    p_push.add_argument("--private", action="store_true", help="create the repo private")
    p_push.add_argument("--commit-message", default=None, help="commit message")
    p_push.add_argument(
        "--labels",
        default=None,
        metavar="FILE_OR_DIR",
        help="label names for the pushed config.json: a file with one per line, or an image "
        "folder's class directories (one per class)",
    )
    p_push.add_argument(
        "--replace-card",
        action="store_true",
        help="replace the repo's README.md with a generated model card when DIR has none "
        "(default: an existing card is kept)",
    )
    p_push.add_argument(
        "--strict", action="store_true", help="refuse weights holding NaN or Inf (default: push them with a warning)"
    )
    p_push.add_argument(
        "--license",
        default=None,
        metavar="ID",
        help="the weights' license (apache-2.0, mit, dinov3-license ...), for a directory whose license is "
        "unknown (refused without it)",
    )
    p_push.set_defaults(func=_cmd_push)

    p_pull = commands.add_parser("pull", help="download a model from the Hub, verify it and install it into OUT_DIR")
    p_pull.add_argument("repo_id", metavar="REPO_ID", help="namespace/name on the Hub")
    p_pull.add_argument("--revision", default=None, help="branch or commit id (default: main)")
    p_pull.add_argument(
        "out_dir", metavar="OUT_DIR", help="directory to create, parents included (must be absent or empty)"
    )
    p_pull.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")
    p_pull.add_argument(
        "--strict", action="store_true", help="refuse weights holding NaN or Inf (default: install them with a warning)"
    )
    p_pull.add_argument(
        "--online",
        action="store_true",
        help="fail when the Hub cannot be asked (default: install the local cache's copy of the revision, "
        "and say which commit and from when)",
    )
    p_pull.set_defaults(func=_cmd_pull)

    p_convert = commands.add_parser(
        "convert", help="timm / torchvision / transformers / JAX / Meta DINOv3 weights -> a scratch model directory"
    )
    p_convert.add_argument(
        "src", help="checkpoint file (.safetensors, .pth/.pt/.bin/.pth.tar, .npz) or model directory"
    )
    p_convert.add_argument("out_dir", help="directory for model.safetensors + config.json (created if missing)")
    p_convert.add_argument(
        "--from",
        dest="source",
        default="auto",
        choices=("auto", *choices.SOURCES),
        help="checkpoint format (default: recognised from its keys)",
    )
    p_convert.add_argument(
        "--model",
        default=None,
        help="scratch_* variant to convert to (default: inferred from the shapes, checked if given)",
    )
    p_convert.add_argument(
        "--img-size",
        type=_positive_int("img size"),
        default=None,
        help="input size of the converted model; the position embedding is resampled",
    )
    p_convert.add_argument(
        "--dtype", choices=choices.DTYPE_NAMES, default=None, help="dtype of the written weights (default: as stored)"
    )
    p_convert.add_argument(
        "--ema", action="store_true", help="take the EMA weights (state_dict_ema) of a timm train.py checkpoint"
    )
    p_convert.add_argument(
        "--verify",
        action="store_true",
        help="compare features and logits with the source library's model; fail (write nothing) "
        "above 1e-4 or when the logits cannot tell the weights apart",
    )
    p_convert.add_argument(
        "--num-heads",
        type=int,
        default=None,
        help="attention heads, for checkpoints that do not record them (default: the source's "
        "config, else assumed and said)",
    )
    p_convert.add_argument(
        "--strict",
        action="store_true",
        help="refuse (write nothing) when any architecture fact (heads, activation, LayerNorm "
        "eps) would be assumed rather than read from the checkpoint or its config",
    )
    p_convert.add_argument(
        "--labels",
        default=None,
        metavar="FILE_OR_DIR",
        help="label names: a file with one per line, or an image folder's class directories",
    )
    p_convert.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty OUT_DIR that is not a model directory (its config.json and "
        "model.safetensors are replaced, its other files kept)",
    )
    p_convert.add_argument(
        "--license",
        default=None,
        metavar="ID",
        help="the weights' license (apache-2.0, mit, dinov3-license ...), for a source that names none "
        "(default: what the source's files say, else unknown)",
    )
    p_convert.set_defaults(func=_cmd_convert)

    p_export = commands.add_parser(
        "export", help="a scratch model directory -> timm / torchvision / JAX weights, or a transformers directory"
    )
    p_export.add_argument("model_dir", help="directory written by convert (model.safetensors + config.json)")
    p_export.add_argument("--to", required=True, choices=choices.EXPORT_TARGETS, help="target layout")
    p_export.add_argument(
        "out",
        help="output file: .safetensors or .pth (timm, torchvision), .npz (jax); "
        "a new or empty directory (transformers: a DINOv3ViTModel, Siglip2VisionModel or Dinov2Model)",
    )
    p_export.add_argument(
        "--dtype", choices=choices.DTYPE_NAMES, default=None, help="dtype of the written weights (default: as stored)"
    )
    p_export.set_defaults(func=_cmd_export)

    p_export_checkpoint = commands.add_parser(
        "export-checkpoint",
        help="a training checkpoint (DCP shards of python -m timm_vitscratch.train) -> a model directory",
    )
    p_export_checkpoint.add_argument(
        "checkpoint", help="a checkpoint directory (OUTPUT/checkpoints/step-N) or a run directory: its latest"
    )
    p_export_checkpoint.add_argument("out", help="the model directory to write (model.safetensors + config.json)")
    p_export_checkpoint.add_argument(
        "--ema", action="store_true", help="the average of the weights (a run with --model-ema), not the weights"
    )
    p_export_checkpoint.set_defaults(func=_cmd_export_checkpoint)

    training = _read_standalone("train/options.py")  # the options of python -m timm_vitscratch.train
    p_train = commands.add_parser(
        "train",
        help="fine-tune in this process (torchrun -m timm_vitscratch.train for several)",
        description=training.DESCRIPTION,
    )
    training.add_arguments(p_train)
    p_train.set_defaults(func=_cmd_train)
    return parser, dict(commands.choices)


def _quiet_closed_pipe() -> int:
    """The reader went away (``vitscratch list | head -1``): stop writing, exit 0 as ``head`` expects.

    stdout is pointed at /dev/null so that the interpreter's final flush does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """The package's own warnings (NaN weights, ...) as one line a person reads; others as Python shows them."""
    if category.__module__.startswith("timm_vitscratch"):
        from timm_vitscratch.errors import terminal_safe

        print(f"{PROG}: warning: {terminal_safe(str(message))}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


class _TerminalSafeOutput:
    """A command's standard output, with every character a terminal would act on escaped as its errors are
    (``errors.terminal_safe``): a name or path echoed in a result line (``wrote ...``) reaches no terminal raw."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if text.replace("\n", "").replace("\t", "").isprintable():  # nothing to escape (and the package unimported)
            return self.stream.write(text)
        from timm_vitscratch.errors import terminal_safe  # a command has imported the package by now

        return self.stream.write(terminal_safe(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    stdout = sys.stdout
    sys.stdout = _TerminalSafeOutput(stdout)
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not at exit
        return status
    except BrokenPipeError:
        return _quiet_closed_pipe()
    except (ValueError, OSError) as err:
        return _error(str(err))
    finally:
        sys.stdout = stdout


if __name__ == "__main__":
    sys.exit(main())
