"""The ``vitscratch`` console script: parses arguments and calls the library."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from .variants import ARCHITECTURES, unknown_model_message


def _model_name(value: str) -> str:
    if value not in ARCHITECTURES:
        raise argparse.ArgumentTypeError(unknown_model_message(value))
    return value


def _cmd_list(args: argparse.Namespace) -> int:
    from .summary import zoo_table

    print(zoo_table(reference=not args.no_reference))
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from .report import build_report
    from .summary import render_report

    report = build_report(args.model, num_classes=args.num_classes, img_size=args.img_size, batch=args.batch,
                          layers=args.layers)
    print(json.dumps(report, indent=2) if args.json else render_report(report).rstrip("\n"))
    return 0


def _cmd_attention(args: argparse.Namespace) -> int:
    from .attention_maps import write_attention_png

    out = args.out or f"{Path(args.image).stem}.attention.png"
    maps = write_attention_png(args.image, args.model, out, img_size=args.img_size)
    print(f"wrote {out}: {len(maps.blocks)} blocks, {maps.grid_size[0]}x{maps.grid_size[1]} patch grid")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitscratch", description="From-scratch ViTs for timm.")
    commands = parser.add_subparsers(dest="command", required=True)

    p_list = commands.add_parser("list", help="the zoo with true and torchsummary parameter counts")
    p_list.add_argument("--no-reference", action="store_true", help="skip torchvision's reference counts")
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
