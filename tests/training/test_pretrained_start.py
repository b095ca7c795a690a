"""A run that starts from pretrained weights under FSDP: rank 0 reads them from the cache (laid where a download
puts them), every rank gets its shards; the export carries the starting weights' licence and its text, and loads
with ``local-dir:`` and, laid into the Hub cache, with ``hf-hub:``, equal to the trained weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch
from timm.models import get_pretrained_cfg

from tests.support import pretrained_caches
from tests.support.dinov3_pairs import perturbed
from tests.support.pretrained_caches import lay_in_hf_cache, save_safetensors
from tests.support.train_runs import run_job, write_image_folder
from timm_vitscratch.licenses import license_files
from timm_vitscratch.models.pretrained import TIMM_TAGS

pytestmark = pytest.mark.slow  # a torchrun job of two ranks

TAG = "scratch_dinov3_s16.lvd1689m"  # DINOv3 weights: their licence's text goes with every copy
KWARGS = {"img_size": 32, "num_classes": 4}  # rotary positions: the pretrained weights at any size


def _arguments(data: Path, output: Path, *extra: str) -> list[str]:
    kwargs = [f"{key}={value}" for key, value in KWARGS.items() if key != "num_classes"]
    return ["--model", TAG, "--pretrained", "--model-kwargs", *kwargs, "--num-classes", "4", "--data-dir", str(data),
            "-b", "4", "--output", str(output), "--no-aug", "-j", "0", "--opt", "sgd", "--epochs", "1", "--seed", "5",
            "--fsdp", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrained")
    with pytest.MonkeyPatch.context() as monkeypatch:
        caches = pretrained_caches.offline_caches(root / "caches", monkeypatch)
        timm_name = TIMM_TAGS[TAG]
        source = perturbed(timm.create_model(timm_name.split(".")[0], pretrained=False))
        weights = {"model.safetensors": save_safetensors(source.state_dict())}
        lay_in_hf_cache(caches, get_pretrained_cfg(timm_name).hf_hub_id, weights)
        data = write_image_folder(root / "data")
        runs = [
            {
                "args": _arguments(
                    data, root / "still", "--lr", "0", "--checkpoint-every", "0", "--export", str(root / "still_export")
                )
            },
            {
                "args": _arguments(data, root / "tuned", "--lr", "0.05", "--export", str(root / "export")),
                "full_weights": str(root / "tuned.safetensors"),
            },
        ]
        run_job(runs, root / "runs.json", 2)
        torch.manual_seed(5)  # the run's seed: the new head's draws
        start = timm.create_model(TAG, pretrained=True, **KWARGS).state_dict()
        yield root, start, caches


def test_every_rank_starts_from_the_pretrained_weights(started):
    root, start, _ = started
    # learning rate 0: what was exported is what the two ranks started from, gathered from their shards
    exported = safetensors.torch.load_file(root / "still_export" / "model.safetensors")
    assert set(exported) == set(start)
    for name, tensor in start.items():
        assert torch.equal(exported[name], tensor), name


def test_the_export_carries_the_starting_weights_licence_and_loads_as_trained(started):
    root, _, caches = started
    config = json.loads((root / "export" / "config.json").read_text(encoding="utf-8"))
    licence = timm.create_model(TAG, pretrained=False).pretrained_cfg["license"]
    assert licence == "dinov3-license"
    assert config["pretrained_cfg"]["license"] == licence
    for name, text in license_files(licence).items():
        assert (root / "export" / name).read_bytes() == text
    trained = safetensors.torch.load_file(root / "tuned.safetensors")
    local = timm.create_model(f"local-dir:{root / 'export'}", pretrained=True)
    for name, tensor in local.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    # the same directory as a Hub repo, laid into the cache where a download would put it
    files = {
        entry.name: (lambda path, entry=entry: shutil.copyfile(entry, path)) for entry in (root / "export").iterdir()
    }
    lay_in_hf_cache(caches, "someone/dinov3-s16-tuned", files)
    hub = timm.create_model("hf-hub:someone/dinov3-s16-tuned", pretrained=True)
    assert hub.pretrained_cfg["license"] == licence
    for name, tensor in hub.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
