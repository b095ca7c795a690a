"""Every route by which outside bytes reach the package passes the gate: each route is run on a tiny input with a
profiler that records which ``timm_vitscratch.gate`` modules ran, and must have run the gate modules of the input
kinds it takes in. (test_gate.py proves the other half: no module outside the gate holds a parser.)

The routes: the model-directory check (push, pull, export), ``local-dir:``, ``hf-hub:``, ``register_tag_from_hub``,
``pull``, ``push``, ``convert`` from each container, timm's ``load_checkpoint`` of a JAX ``.npz``, ``summary`` and
``attention`` on a directory, and the model's ``forward`` of a NaFlex batch.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file

import timm_vitscratch.gate
from tests.support import TINY, tiny
from tests.support.hub_fixtures import model_dir, repo_for
from tests.support.sources import google_npz, timm_vit
from timm_vitscratch import hub
from timm_vitscratch.cli import main
from timm_vitscratch.model_dir import check_model_directory
from timm_vitscratch.models.registry import unregister_hub_weights

pytestmark = pytest.mark.slow  # every route run under a profiler, push and pull included

GATE = Path(timm_vitscratch.gate.__file__).parent

#: the gate modules each kind of input passes
CONFIG = {"json_data", "config_fields"}
WEIGHTS = {"safetensors_data", "checkpoints"}
TORCH_FILE = {"torch_save", "torch_pickle", "zip_archive", "checkpoints"}
NPZ = {"npz_data", "zip_archive", "checkpoints"}
HUB = {"hub_answers"}


@contextlib.contextmanager
def gate_modules() -> Iterator[set[str]]:
    """The names of the gate modules whose functions run inside the block (in any thread)."""
    seen: set[str] = set()
    gate = str(GATE)

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(gate):
            seen.add(Path(frame.f_code.co_filename).stem)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def directory(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return model_dir(tmp_path_factory.mktemp("gate-routes") / "tiny", tiny(num_classes=3).eval())


def test_the_model_directory_check(directory):
    with gate_modules() as seen:
        check_model_directory(directory)
    assert CONFIG | {"safetensors_data"} <= seen


def test_local_dir(directory):
    with gate_modules() as seen:
        timm.create_model(f"local-dir:{directory}", pretrained=True)
    assert CONFIG <= seen


def test_summary_and_attention_of_a_directory(directory, tmp_path, capsys):
    with gate_modules() as seen:
        assert main(["summary", str(directory)]) == 0
    assert CONFIG <= seen
    Image.new("RGB", (40, 40), (10, 200, 30)).save(tmp_path / "cat.png")
    with gate_modules() as seen:
        assert (
            main(["attention", str(tmp_path / "cat.png"), "--model", str(directory), "--out", str(tmp_path / "a.png")])
            == 0
        )
    assert CONFIG | {"images"} <= seen


@pytest.mark.parametrize("container", ["safetensors", "torch-zip", "npz"])
def test_convert(container, tmp_path, capsys):
    source = timm_vit(**TINY, num_classes=3).eval()
    if container == "safetensors":
        path, expected = tmp_path / "vit.safetensors", WEIGHTS
        save_file(source.state_dict(), path)
    elif container == "torch-zip":
        path, expected = tmp_path / "vit.pth", TORCH_FILE
        torch.save(source.state_dict(), path)
    else:
        path, expected = google_npz(source, tmp_path / "vit.npz"), NPZ
    argv = ["convert", str(path), str(tmp_path / "out"), "--num-heads", str(TINY["num_heads"])]
    with gate_modules() as seen:
        assert main(argv) == 0, capsys.readouterr().err
    assert expected <= seen


def test_timm_load_checkpoint_of_a_jax_npz(tmp_path):
    source = timm_vit(**TINY, num_classes=3).eval()
    path = google_npz(source, tmp_path / "vit.npz")
    model = tiny(num_classes=3)
    with gate_modules() as seen:
        timm.models.load_checkpoint(model, str(path))
    assert NPZ <= seen


def test_the_forward_of_a_naflex_batch():
    model = tiny(num_classes=3, dynamic_img_size=True).eval()
    patches = torch.randn(1, 4, 8 * 8 * 3)
    coord = torch.tensor([[[0, 0], [0, 1], [1, 0], [1, 1]]])
    batch = {"patches": patches, "patch_coord": coord, "patch_valid": torch.ones(1, 4, dtype=torch.bool)}
    with gate_modules() as seen, torch.no_grad():
        model(batch)
    assert "naflex_batch" in seen


def test_push_pull_and_the_hub_routes(directory, hub_env, request, tmp_path):
    repo = repo_for(request)
    with gate_modules() as seen:
        hub.push(directory, repo)
    assert CONFIG | {"safetensors_data", "files"} <= seen
    with gate_modules() as seen:
        hub.pull(repo, tmp_path / "pulled")
    assert HUB | CONFIG | {"safetensors_data"} <= seen
    with gate_modules() as seen:
        timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert CONFIG <= seen
    try:
        with gate_modules() as seen:
            hub.register_tag_from_hub("scratch_vit_ti16.gate_routes", repo)
    finally:
        unregister_hub_weights("scratch_vit_ti16.gate_routes")
    assert {"hub_config", "config_fields"} <= seen
