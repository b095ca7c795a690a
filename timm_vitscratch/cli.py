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


def _cmd_demo(args: argparse.Namespace) -> int:
    from .examples.digits import run_from_args

    return run_from_args(args)


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

    from .examples.digits import add_arguments as add_demo_arguments

    p_demo = commands.add_parser("demo", help="train, save, reload and fine-tune on scikit-learn's digits")
    add_demo_arguments(p_demo)
    p_demo.set_defaults(func=_cmd_demo)
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
