"""Several runs of ``timm_vitscratch.train`` in one process (group), to start as few ``torchrun`` jobs as a test can.

    python -m tests.support.train_runs RUNS.json

``RUNS.json`` holds a list of runs, each ``{"args": [...], "full_weights": PATH, "builds": PATH, "cli": true}``
(all but ``args`` optional): one ``train()`` call each (``cli``: ``vitscratch train ARGS`` instead), in order, in the same process group. ``full_weights`` has rank 0 write the
trained model's whole state dict there (gathered by ``get_model_state_dict``), for a test to compare with what was
exported; ``builds`` (a folder) has every rank write ``RANK.json`` there: the device of each model
``timm.create_model`` built during the run (``meta`` for a model without storage).
Also: a tiny synthetic image folder (``write_image_folder``) for those runs, and :func:`run_job`, which starts one
such process (group) for a test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def write_image_folder(root: Path, classes: int = 4, per_class: int = 8, size: int = 16, seed: int = 0) -> Path:
    """``root/train/class_K/N.png``: random pictures whose colour says their class (learnable)."""
    from PIL import Image

    generator = np.random.default_rng(seed)
    for label in range(classes):
        folder = root / "train" / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            pixels = generator.integers(0, 256, (size, size, 3), dtype=np.uint8)
            pixels[..., label % 3] = pixels[..., label % 3] // 2 + 128 * (label // 3 % 2)
            Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


@contextlib.contextmanager
def _recording_builds(path: str | None) -> Iterator[None]:
    """Wrap ``timm.create_model`` to note where each model it builds holds its parameters."""
    if not path:
        yield
        return
    import timm

    original, devices = timm.create_model, []

    def create_model(*args: Any, **kwargs: Any) -> Any:
        model = original(*args, **kwargs)
        devices.append(str(next(model.parameters()).device.type))
        return model

    timm.create_model = create_model
    try:
        yield
    finally:
        timm.create_model = original
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / f"{os.environ.get('RANK', '0')}.json").write_text(json.dumps(devices), encoding="utf-8")


def run_job(runs: list[dict[str, Any]], path: Path, processes: int) -> None:
    """Write ``runs`` to ``path`` and run them in one process, or under ``torchrun`` with ``processes`` ranks."""
    from tests.support import time_limits

    path.write_text(json.dumps(runs), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    if os.path.isdir("/sys/class/net/lo"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's sockets on the loopback interface only
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else []
    command = [sys.executable, *launcher, "-m", "tests.support.train_runs", str(path)]
    result = time_limits.run(command, cwd=path.parent, env=env, capture_output=True, text=True, quiet_seconds=60)
    # torchrun's own log lines (E1128 12:00:00 ...) would push what a rank printed out of the message
    own = "\n".join(line for line in result.stderr.splitlines() if not re.match(r"[EWI]\d{4} ", line))
    assert result.returncode == 0, result.stdout[-3000:] + own[-5000:]


def main(argv: list[str]) -> int:
    import safetensors.torch
    import torch
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from timm_vitscratch.train import parallel
    from timm_vitscratch.train.options import build_parser
    from timm_vitscratch.train.run import train

    runs = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        for run in runs:
            if run.get("cli"):  # through the console script's ``vitscratch train``
                import timm_vitscratch_cli

                assert timm_vitscratch_cli.main(["train", *run["args"]]) == 0
                continue
            with _recording_builds(run.get("builds")):
                trained = train(build_parser().parse_args(run["args"]))
            if run.get("full_weights"):
                options = StateDictOptions(full_state_dict=True, cpu_offload=True)
                state = get_model_state_dict(trained.model, options=options)
                if trained.summary["world_size"] == 1 or parallel.dist.get_rank() == 0:
                    tensors = {k: v.contiguous() for k, v in state.items() if isinstance(v, torch.Tensor)}
                    safetensors.torch.save_file(tensors, run["full_weights"])
    finally:
        parallel.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
