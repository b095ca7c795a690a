"""``python -m timm_vitscratch.cli``: the ``vitscratch`` console script, for environments without it on PATH.

The script itself is :mod:`timm_vitscratch_cli`, outside this package so that ``--help`` imports no torch.
"""

import sys

from timm_vitscratch_cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
