"""The ``vitscratch`` console script: parses arguments and calls the library."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from .models.variants import ARCHITECTURES, unknown_model_message


def _model_name(value: str) -> str:
    if value not in ARCHITECTURES:
        raise argparse.ArgumentTypeError(unknown_model_message(value))
    return value


def _cmd_list(args: argparse.Namespace) -> int:
    from .inspect.render import pretrained_table, zoo_table

    print(pretrained_table() if args.pretrained else zoo_table(reference=not args.no_reference))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from .inspect.report import build_report
    from .inspect.render import render_report

    report = build_report(args.model, num_classes=args.num_classes, img_size=args.img_size, batch=args.batch,
                          layers=args.layers)
    print(json.dumps(report, indent=2) if args.json else render_report(report).rstrip("\n"))
    return 0


def _cmd_attention(args: argparse.Namespace) -> int:
    from .inspect.attention_maps import write_attention_png

    out = args.out or f"{Path(args.image).stem}.attention.png"
    maps = write_attention_png(args.image, args.model, out, img_size=args.img_size)
    print(f"wrote {out}: {len(maps.blocks)} blocks, {maps.grid_size[0]}x{maps.grid_size[1]} patch grid")
    return 0


def _hub_failure(error: BaseException, args: argparse.Namespace) -> int:
    from .hub.client import describe_hub_error, is_hub_failure

    if not is_hub_failure(error):
        raise error
    print(f"vitscratch: error: {describe_hub_error(error, args.repo_id, args.revision)}", file=sys.stderr)
    return 2


def _cmd_push(args: argparse.Namespace) -> int:
    from .hub.client import push

    try:
        info = push(args.source, args.repo_id, revision=args.revision, private=args.private,
                    commit_message=args.commit_message, labels=args.labels, replace_card=args.replace_card)
    except Exception as error:
        return _hub_failure(error, args)
    print(f"pushed {args.source} to {args.repo_id}@{args.revision or 'main'}: commit {info.oid}")
    return 0


def _cmd_pull(args: argparse.Namespace) -> int:
    from .hub.client import pull

    try:
        out_dir = pull(args.repo_id, args.out_dir, revision=args.revision, force=args.force)
    except Exception as error:
        return _hub_failure(error, args)
    print(f"installed {args.repo_id}@{args.revision or 'main'} into {out_dir} (sha256 verified)")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    result = convert(args.src, args.out_dir, source=args.source, model=args.model, img_size=args.img_size,
                     dtype=args.dtype, ema=args.ema, verify=args.verify, num_heads=args.num_heads, labels=args.labels,
                     force=args.force)
    how = "detected from its keys" if result.detected else "as given by --from"
    wrapper = f", weights from {result.wrapper!r}" if result.wrapper else ""
    print(f"source: {args.src} ({result.source_format} format, {how}{wrapper})")
    print(f"model: {result.model_name} ({result.description})")
    if result.heads_note:
        print(result.heads_note)
    if result.resampled_from:
        print(f"position embedding resampled from {result.resampled_from[0]}x{result.resampled_from[1]} "
              f"to img_size {result.model_args['img_size']}")
    print(f"wrote {result.out_dir}/model.safetensors (sha256 {result.sha256}) and {result.out_dir}/config.json")
    if result.verification is not None:
        check = result.verification
        logits = "" if check.logits_diff is None else f", logits {check.logits_diff:.3g}"
        print(f"verify: max-abs-diff features {check.features_diff:.3g}{logits} against {check.reference} on a "
              f"fixed random batch (tolerance {check.tolerance:g}): ok")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .convert import export

    result = export(args.model_dir, args.to, args.out, dtype=args.dtype)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {result.out} ({result.tensors} tensors, {result.target} layout) from {result.model_name}")
    return 0


def _img_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"img size must be a positive integer, got {value!r}") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"img size must be a positive integer, got {value!r}")
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitscratch", description="From-scratch ViTs for timm.")
    commands = parser.add_subparsers(dest="command", required=True)

    p_list = commands.add_parser("list", help="the zoo with true and torchsummary parameter counts")
    p_list.add_argument("--no-reference", action="store_true", help="skip torchvision's reference counts")
    p_list.add_argument("--pretrained", action="store_true",
                        help="the pretrained tags instead: weights, classes, preprocessing, license, top-1")
    p_list.set_defaults(func=_cmd_list)

    p_summary = commands.add_parser("summary", help="parameter counts of one model, explained")
    p_summary.add_argument("model", type=_model_name, help="a registered scratch_* model name")
    p_summary.add_argument("--num-classes", type=int, default=None, help="classifier size (default: the cfg's)")
    p_summary.add_argument("--img-size", type=int, default=None, help="image side in pixels (default: the cfg's)")
    p_summary.add_argument("--batch", type=int, default=1, help="batch for FLOPs and training activations")
    p_summary.add_argument("--layers", action="store_true", help="add the per-layer table (torchsummary layout)")
    p_summary.add_argument("--json", action="store_true", help="print the same report as JSON")
    p_summary.set_defaults(func=_cmd_summary)

    p_attention = commands.add_parser("attention", help="PNG of what the model attends to (CLS attention, rollout)")
    p_attention.add_argument("image", help="image file Pillow can read")
    p_attention.add_argument("--model", required=True, help="registered scratch_* name (random weights) or a "
                             "model directory (config.json + model.safetensors)")
    p_attention.add_argument("--out", default=None, help="PNG to write (default: IMAGE_STEM.attention.png here)")
    p_attention.add_argument("--img-size", type=int, default=None, help="image side in pixels (default: the model's)")
    p_attention.set_defaults(func=_cmd_attention)

    p_push = commands.add_parser("push", help="push a model directory (or a registered model) to the Hub")
    p_push.add_argument("source", metavar="DIR_OR_MODEL",
                        help="a model directory (config.json + model.safetensors) or a registered model name[.tag]")
    p_push.add_argument("repo_id", metavar="REPO_ID", help="namespace/name on the Hub (HF_ENDPOINT, HF_TOKEN)")
    p_push.add_argument("--revision", default=None, help="branch to commit to, created if missing (default: main)")
    p_push.add_argument("--private", action="store_true", help="create the repo private")
    p_push.add_argument("--commit-message", default=None, help="commit message")
    p_push.add_argument("--labels", default=None, metavar="FILE_OR_DIR",
                        help="label names for the pushed config.json: a file with one per line, or an image "
                             "folder's class directories (one per class)")
    p_push.add_argument("--replace-card", action="store_true",
                        help="replace the repo's README.md with a generated model card when DIR has none "
                             "(default: an existing card is kept)")
    p_push.set_defaults(func=_cmd_push)

    p_pull = commands.add_parser("pull", help="download a model from the Hub, verify it and install it into OUT_DIR")
    p_pull.add_argument("repo_id", metavar="REPO_ID", help="namespace/name on the Hub")
    p_pull.add_argument("--revision", default=None, help="branch or commit id (default: main)")
    p_pull.add_argument("out_dir", metavar="OUT_DIR", help="directory to create (must be absent or empty)")
    p_pull.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")
    p_pull.set_defaults(func=_cmd_pull)

    from .convert import DTYPE_NAMES, EXPORT_TARGETS, SOURCE_NAMES

    p_convert = commands.add_parser(
        "convert", help="timm / torchvision / transformers / JAX weights -> a scratch model directory")
    p_convert.add_argument("src", help="checkpoint file (.safetensors, .pth/.pt/.bin/.pth.tar, .npz) or model directory")
    p_convert.add_argument("out_dir", help="directory for model.safetensors + config.json (created if missing)")
    p_convert.add_argument("--from", dest="source", default="auto",
                           choices=("auto",) + SOURCE_NAMES,
                           help="checkpoint format (default: recognised from its keys)")
    p_convert.add_argument("--model", type=_model_name, default=None,
                           help="scratch_* variant to convert to (default: inferred from the shapes, checked if given)")
    p_convert.add_argument("--img-size", type=_img_size, default=None,
                           help="input size of the converted model; the position embedding is resampled")
    p_convert.add_argument("--dtype", choices=DTYPE_NAMES, default=None, help="dtype of the written weights (default: as stored)")
    p_convert.add_argument("--ema", action="store_true",
                           help="take the EMA weights (state_dict_ema) of a timm train.py checkpoint")
    p_convert.add_argument("--verify", action="store_true",
                           help="compare features and logits with the source library's model; fail (write nothing) "
                                "above 1e-4 or when the logits cannot tell the weights apart")
    p_convert.add_argument("--num-heads", type=int, default=None,
                           help="attention heads, for checkpoints that do not record them (default: the source's "
                                "config, else assumed and said)")
    p_convert.add_argument("--labels", default=None, metavar="FILE_OR_DIR",
                           help="label names: a file with one per line, or an image folder's class directories")
    p_convert.add_argument("--force", action="store_true",
                           help="write into a non-empty OUT_DIR that is not a model directory (its config.json and "
                                "model.safetensors are replaced, its other files kept)")
    p_convert.set_defaults(func=_cmd_convert)

    p_export = commands.add_parser("export", help="a scratch model directory -> timm / torchvision / JAX weights")
    p_export.add_argument("model_dir", help="directory written by convert (model.safetensors + config.json)")
    p_export.add_argument("--to", required=True, choices=EXPORT_TARGETS, help="target layout")
    p_export.add_argument("out", help="output file: .safetensors or .pth (timm, torchvision), .npz (jax)")
    p_export.add_argument("--dtype", choices=DTYPE_NAMES, default=None, help="dtype of the written weights (default: as stored)")
    p_export.set_defaults(func=_cmd_export)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as err:
        print(f"vitscratch: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
