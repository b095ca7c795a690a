"""``hub_configs/<model>.json``: timm's Hub ``config.json`` of every registered variant, from the registry.

Each file is what timm's ``save_config_for_hf`` writes for the variant at its defaults (built on
``meta``): ``architecture``, ``num_classes``, ``num_features``, ``global_pool``, ``model_args`` and
``pretrained_cfg`` (input size, interpolation, crop, mean/std, ``first_conv``, ``classifier``, license).
Regenerate with ``python -m timm_vitscratch.hub.variant_configs hub_configs``;
``--check`` reports files that are missing, stale or foreign instead of writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..files import PathLike, atomic_write
from ..model_dir import model_config
from ..models.build import build_on_meta
from ..models.variants import ARCHITECTURES


def variant_config(name: str) -> dict[str, Any]:
    """timm's Hub config of a registered variant at its default arguments."""
    return model_config(build_on_meta(name))


def render(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2) + "\n"


def write_hub_configs(directory: PathLike) -> list[Path]:
    """Write one ``<model>.json`` per registered variant into ``directory`` (atomically, each)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ARCHITECTURES:
        path = directory / f"{name}.json"
        with atomic_write(path, "w") as handle:
            handle.write(render(variant_config(name)))
        written.append(path)
    return written


def out_of_sync(directory: PathLike) -> list[str]:
    """What differs between ``directory`` and the registry: one line per missing, stale or foreign file."""
    directory = Path(directory)
    problems = []
    for name in ARCHITECTURES:
        path = directory / f"{name}.json"
        if not path.is_file():
            problems.append(f"missing {path}")
        elif path.read_text() != render(variant_config(name)):
            problems.append(f"stale {path}")
    problems += [
        f"foreign {p} (no registered variant {p.stem})"
        for p in sorted(directory.glob("*.json"))
        if p.stem not in ARCHITECTURES
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timm_vitscratch.hub.variant_configs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", nargs="?", default="hub_configs", help="directory of <model>.json files")
    parser.add_argument("--check", action="store_true", help="report differences instead of writing")
    args = parser.parse_args(argv)
    if args.check:
        problems = out_of_sync(args.out_dir)
        print("\n".join(problems) if problems else f"{args.out_dir}: {len(ARCHITECTURES)} configs in sync")
        return 1 if problems else 0
    for path in write_hub_configs(args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
