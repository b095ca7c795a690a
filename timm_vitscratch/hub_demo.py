"""The Hub part of ``make demo``: push a model to a local Hub-protocol server and load it back with timm.

Starts the local Hub (test/demo infrastructure on 127.0.0.1, not huggingface.co) and then runs, in
child processes as a user would, ``vitscratch push``, ``vitscratch pull`` and
``timm.create_model("hf-hub:...")``, with ``HF_ENDPOINT`` pointing at it, ``HF_HUB_DISABLE_XET=1``
(it speaks the classic LFS upload protocol only) and ``HF_HOME`` in a temporary directory.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List

from .local_hub import LocalHub

REPO = "demo-org/scratch_vit_ti16.random_init"
LOAD = """
import timm, torch
import timm_vitscratch  # registers the scratch_* models
from_hub = timm.create_model("hf-hub:{repo}", pretrained=True).eval()
from_dir = timm.create_model("local-dir:{out}", pretrained=True).eval()
x = torch.randn(2, 3, 224, 224)
with torch.no_grad():
    diff = (from_hub(x) - from_dir(x)).abs().max().item()
print(f"hf-hub:{repo} vs local-dir:{out}: logits max-abs-diff {{diff}}")
"""


def _run(shown: List[str], argv: List[str], env: Dict[str, str]) -> None:
    print(f"$ {' '.join(shlex.quote(a) for a in shown)}", flush=True)
    subprocess.run(argv, env=env, check=True)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="vitscratch-hub-demo-") as tmp, LocalHub(Path(tmp) / "repos") as server:
        work = Path(tmp)
        client = server.client_env(work / "hf-home")
        env = {**os.environ, **client}
        env.pop("HF_TOKEN", None)
        env.pop("HF_HUB_OFFLINE", None)
        out = work / "pulled"
        print(f"local Hub (test/demo server, not huggingface.co) at {server.url}, storage at {server.storage_url}")
        print("client environment: " + " ".join(f"{k}={v}" for k, v in client.items()), flush=True)
        cli = [sys.executable, "-m", "timm_vitscratch.cli"]
        _run(["vitscratch", "push", "scratch_vit_ti16", REPO], cli + ["push", "scratch_vit_ti16", REPO], env)
        _run(["vitscratch", "pull", REPO, str(out)], cli + ["pull", REPO, str(out)], env)
        print("$ python -c 'timm.create_model(\"hf-hub:...\") ...'", flush=True)
        subprocess.run([sys.executable, "-c", LOAD.format(repo=REPO, out=out)], env=env, check=True)
        calls = Counter(f"{method} {_route(path)}" for _, method, path, _ in server.requests)
        print("requests the real huggingface_hub client made: " + ", ".join(f"{k} x{n}" for k, n in calls.items()))
    return 0


def _route(path: str) -> str:
    """The Hub endpoint a request path belongs to (``/api/models/*/preupload``, ``/*/resolve`` ...)."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "models"] and len(parts) > 4:
        return f"/api/models/*/{parts[4]}"
    if parts[:2] == ["api", "models"]:
        return "/api/models/*"
    if parts[0] == "api":
        return "/" + "/".join(parts[:2])
    if len(parts) > 2 and parts[2] == "resolve":
        return "/*/resolve"
    if path.endswith("/lfs/objects/batch"):
        return "/*.git/info/lfs/objects/batch"
    return f"/{parts[0]}/* (storage)" if parts[0] in ("lfs", "upload") else path


if __name__ == "__main__":
    sys.exit(main())
