"""A fresh client process for the Hub tests: ``python hub_client.py JOBS.json``.

Runs the jobs in order with the real timm and huggingface_hub, configured only by the environment
(HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE, ...). With the plugin installed, ``import timm`` registers it
(zero-import autoload); with ``TIMM_VITSCRATCH_NO_AUTOLOAD=1`` it is imported only at the first job
that needs it, so earlier jobs run with stock timm. Writes ``results.json`` beside JOBS.json: per job id either
``{"ok": true, ...}`` or ``{"error": "<type>: <message>"}``.

Jobs: ``{"id", "kind": "logits", "model", "kwargs", "input", "output", "plugin"}`` saves
``logits`` (and the model's state dict under ``sd.<name>``) to ``output``;
``{"id", "kind": "register_tag", "model_tag", "repo_id"}``; ``{"id", "kind": "cli", "argv"}``.
"""

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import timm
import torch
from safetensors.torch import load_file, save_file


def run(job: dict[str, Any]) -> dict[str, Any]:
    if job.get("plugin", True) and "timm_vitscratch" not in sys.modules:
        import timm_vitscratch  # noqa: F401  (registers the scratch_* models)
    if job["kind"] == "logits":
        model = timm.create_model(job["model"], pretrained=True, **job.get("kwargs", {})).eval()
        x = load_file(job["input"])["x"]
        with torch.no_grad():
            out = {"logits": model(x).contiguous()}
        out.update({f"sd.{k}": v.contiguous() for k, v in model.state_dict().items()})
        save_file(out, job["output"])
        return {"plugin_imported": "timm_vitscratch" in sys.modules}
    if job["kind"] == "register_tag":
        from timm_vitscratch.hub.client import register_tag_from_hub

        return {"hf_hub_id": register_tag_from_hub(job["model_tag"], job["repo_id"])}
    if job["kind"] == "cli":
        from timm_vitscratch.cli import main

        return {"exit_code": main(job["argv"])}
    raise ValueError(f"unknown job kind {job['kind']!r}")


def main(spec_file: str) -> None:
    torch.set_num_threads(1)  # the same arithmetic as the test process's reference logits
    spec_path = Path(spec_file)
    results: dict[str, dict[str, Any]] = {}
    for job in json.loads(spec_path.read_text()):
        try:
            results[job["id"]] = {"ok": True, **run(job)}
        except Exception as error:  # reported to the test, which decides
            traceback.print_exc()
            results[job["id"]] = {"error": f"{type(error).__name__}: {error}"}
    (spec_path.parent / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
