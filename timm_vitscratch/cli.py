"""The ``vitscratch`` console script: parses arguments and calls the library."""
from __future__ import annotations

import argparse
import difflib
import sys
from typing import List, Optional

from .variants import ARCHITECTURES


def _model_name(value: str) -> str:
    if value not in ARCHITECTURES:
        close = difflib.get_close_matches(value, list(ARCHITECTURES), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(ARCHITECTURES)}"
        raise argparse.ArgumentTypeError(f"unknown model {value!r}{hint}")
    return value


def _cmd_list(args: argparse.Namespace) -> int:
    from .summary import zoo_table

    print(zoo_table(reference=not args.no_reference))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from .summary import count_summary

    print(count_summary(args.model, num_classes=args.num_classes))
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    result = convert(args.src, args.out_dir, source=args.source, model=args.model, img_size=args.img_size,
                     dtype=args.dtype, ema=args.ema, verify=args.verify)
    how = "detected from its keys" if result.detected else "as given by --from"
    wrapper = f", weights from {result.wrapper!r}" if result.wrapper else ""
    print(f"source: {args.src} ({result.source_format} format, {how}{wrapper})")
    print(f"model: {result.model_name} ({result.description})")
    if result.resampled_from:
        print(f"position embedding resampled from {result.resampled_from[0]}x{result.resampled_from[1]} "
              f"to img_size {result.model_args['img_size']}")
    print(f"wrote {result.out_dir}/model.safetensors (sha256 {result.sha256}) and {result.out_dir}/config.json")
    if result.verification is not None:
        check = result.verification
        print(f"verify: max-abs-diff {check.max_abs_diff:.3g} against {check.reference} on a fixed random "
              f"batch (tolerance {check.tolerance:g}): ok")
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
    p_list.set_defaults(func=_cmd_list)

    p_summary = commands.add_parser("summary", help="parameter counts of one model, explained")
    p_summary.add_argument("model", type=_model_name, help="a registered scratch_* model name")
    p_summary.add_argument("--num-classes", type=int, default=None, help="classifier size (default: the cfg's)")
    p_summary.set_defaults(func=_cmd_summary)

    dtypes = ("float32", "float16", "bfloat16")
    p_convert = commands.add_parser(
        "convert", help="timm / torchvision / transformers / JAX weights -> a scratch model directory")
    p_convert.add_argument("src", help="checkpoint file (.safetensors, .pth/.pt/.bin/.pth.tar, .npz) or model directory")
    p_convert.add_argument("out_dir", help="directory for model.safetensors + config.json (created if missing)")
    p_convert.add_argument("--from", dest="source", default="auto",
                           choices=("auto", "timm", "torchvision", "transformers", "jax"),
                           help="checkpoint format (default: recognised from its keys)")
    p_convert.add_argument("--model", type=_model_name, default=None,
                           help="scratch_* variant to convert to (default: inferred from the shapes, checked if given)")
    p_convert.add_argument("--img-size", type=_img_size, default=None,
                           help="input size of the converted model; the position embedding is resampled")
    p_convert.add_argument("--dtype", choices=dtypes, default=None, help="dtype of the written weights (default: as stored)")
    p_convert.add_argument("--ema", action="store_true",
                           help="take the EMA weights (state_dict_ema) of a timm train.py checkpoint")
    p_convert.add_argument("--verify", action="store_true",
                           help="compare logits with the source library's model; fail (write nothing) above 1e-4")
    p_convert.set_defaults(func=_cmd_convert)

    p_export = commands.add_parser("export", help="a scratch model directory -> timm / torchvision / JAX weights")
    p_export.add_argument("model_dir", help="directory written by convert (model.safetensors + config.json)")
    p_export.add_argument("--to", required=True, choices=("timm", "torchvision", "jax"), help="target layout")
    p_export.add_argument("out", help="output file: .safetensors or .pth (timm, torchvision), .npz (jax)")
    p_export.add_argument("--dtype", choices=dtypes, default=None, help="dtype of the written weights (default: as stored)")
    p_export.set_defaults(func=_cmd_export)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as err:
        print(f"vitscratch: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
