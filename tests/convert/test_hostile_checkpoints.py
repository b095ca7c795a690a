"""Hostile pickles: a checkpoint whose unpickling would run code is refused wherever the plugin's models load
weights, and its code never runs.

The payload writes a marker file from inside the loading process (``exec``) and spawns a process that
writes a second one (``subprocess.Popen``). Every place is tried with the hostile file and, as a control,
with the same weights without the payload (which must load, so the refusal is the payload's doing):

* ``vitscratch convert`` (our reader: ``torch.load(weights_only=True)``), on a file and on a model directory;
* pretrained loading, which for our models is timm's own loader (they use no ``custom_load``):
  ``create_model(..., pretrained=True, pretrained_cfg_overlay=dict(file=...))`` exactly as ``train.py
  --pretrained-path`` calls it, ``checkpoint_path=`` as ``train.py --initial-checkpoint`` does,
  ``local-dir:`` and ``hf-hub:`` repos whose weights are a pickle;
* ``vitscratch pull``, which only ever fetches ``model.safetensors`` and so never downloads the pickle.
"""

import pickle
import subprocess
import sys
import time

import pytest
import timm
import torch

from tests.support import TINY, tiny
from tests.support.hub_fixtures import repo_for, upload_raw
from tests.support.sources import timm_vit
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.hub.failures import HubAnswerError
from timm_vitscratch.model_dir import model_config, write_config
from timm_vitscratch.models.variants import ARCHITECTURES


class WritesMarker:
    """Unpickling this writes a file from inside the loading process."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code from a checkpoint ran')",)


class SpawnsProcess:
    """Unpickling this starts a process (which writes a file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return subprocess.Popen, (["touch", self.marker],)


@pytest.fixture
def markers(tmp_path):
    paths = (tmp_path / "marker-exec", tmp_path / "marker-process")
    yield paths
    assert not any(p.exists() for p in paths), "code from a hostile checkpoint ran"


def weights():
    torch.manual_seed(1)  # the same weights every time
    return tiny(num_classes=3).state_dict()


@pytest.fixture(scope="module")
def vit_weights():
    """A ViT-Ti/16 state dict (timm's layout): what `vitscratch convert` takes."""
    return {k: v.half() for k, v in timm_vit().state_dict().items()}


def save_hostile(path, markers, container="zip", state=None):
    """A train.py-style checkpoint with valid weights and the payload beside them."""
    payload = {
        "state_dict": weights() if state is None else state,
        "epoch": 1,
        "extra": [WritesMarker(markers[0]), SpawnsProcess(markers[1])],
    }
    if container == "raw pickle":
        path.write_bytes(pickle.dumps(payload, protocol=2))
    else:
        torch.save(payload, path, _use_new_zipfile_serialization=container == "zip")
    return path


def save_clean(path, state=None):
    torch.save({"state_dict": weights() if state is None else state, "epoch": 1}, path)
    return path


@pytest.mark.slow  # the payload run in a process
def test_the_payload_is_live(tmp_path, markers):
    """Loaded unsafely (in one throwaway process), each hostile file runs both pieces of code."""
    containers = ("zip", "legacy", "raw pickle")
    paths = [
        save_hostile(tmp_path / f"evil-{c}.pth", [tmp_path / f"{m.name}-{c}" for m in markers], c) for c in containers
    ]
    # (a raw pickle is not a torch.save file: torch runs it while looking for its magic number, then fails)
    code = (
        "import sys, torch\nfor path in sys.argv[1:]:\n    try:\n        torch.load(path, weights_only=False)\n"
        "    except Exception:\n        pass\n"
    )
    subprocess.run([sys.executable, "-c", code, *map(str, paths)], check=True, capture_output=True, timeout=300)
    expected = [tmp_path / f"{m.name}-{c}" for c in containers for m in markers]
    for _ in range(100):  # the spawned processes may finish after the loader
        if all(p.exists() for p in expected):
            break
        time.sleep(0.1)
    assert [p.name for p in expected if not p.exists()] == []


@pytest.mark.slow  # the convert command in processes
@pytest.mark.parametrize("container", ["zip", "legacy", "raw pickle"])
def test_vitscratch_convert_refuses(container, tmp_path, markers, vit_weights, capsys):
    evil = save_hostile(tmp_path / "evil.pth", markers, container, vit_weights)
    assert cli_main(["convert", str(evil), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{evil}: refused to unpickle" in err and "weights_only=True" in err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    assert cli_main(["convert", str(save_clean(tmp_path / "clean.pth", vit_weights)), str(tmp_path / "control")]) == 0


@pytest.mark.slow  # the convert command in processes
def test_vitscratch_convert_refuses_a_model_directory_holding_a_pickle(tmp_path, markers, capsys):
    directory = tmp_path / "hf-style"
    directory.mkdir()
    save_hostile(directory / "pytorch_model.bin", markers)
    assert cli_main(["convert", str(directory), str(tmp_path / "out")]) == 2
    assert f"{directory / 'pytorch_model.bin'}: refused to unpickle" in capsys.readouterr().err


def test_our_models_use_timms_pretrained_loader():
    """No variant asks timm for a custom loader, so pretrained weights go through timm's load_state_dict,
    which uses torch.load(weights_only=True) (and safetensors for .safetensors files)."""
    for name in ARCHITECTURES:
        assert not timm.models.get_pretrained_cfg(name).custom_load, name


def train_py_create_model(name, pretrained_path="", initial_checkpoint=""):
    """The create_model call of timm's train.py for --pretrained-path / --initial-checkpoint (--num-classes 3)."""
    factory_kwargs = {}
    if pretrained_path:
        factory_kwargs["pretrained_cfg_overlay"] = dict(file=str(pretrained_path), num_classes=-1)
    return timm.create_model(
        name,
        pretrained=bool(pretrained_path),
        num_classes=3,
        checkpoint_path=str(initial_checkpoint),
        **factory_kwargs,
        **TINY,
    )


@pytest.mark.parametrize("suffix", [".pth", ".pth.tar", ".bin"])
def test_pretrained_path_and_initial_checkpoint_refuse(suffix, tmp_path, markers):
    evil = save_hostile(tmp_path / f"evil{suffix}", markers)
    clean = save_clean(tmp_path / f"clean{suffix}")
    with pytest.raises(RuntimeError, match="weights_only=True blocked loading"):
        train_py_create_model("scratch_vit_ti16", pretrained_path=evil)
    with pytest.raises(RuntimeError, match="weights_only=True blocked loading"):
        train_py_create_model("scratch_vit_ti16", initial_checkpoint=evil)
    with pytest.raises(RuntimeError, match="weights_only=True blocked loading"):
        timm.create_model(
            "scratch_vit_ti16", pretrained=True, pretrained_cfg_overlay=dict(file=str(evil)), num_classes=3, **TINY
        )
    expected = weights()["blocks.0.attn.qkv.weight"]
    for model in (
        train_py_create_model("scratch_vit_ti16", initial_checkpoint=clean),
        timm.create_model(
            "scratch_vit_ti16", pretrained=True, num_classes=3, pretrained_cfg_overlay=dict(file=str(clean)), **TINY
        ),
    ):
        assert torch.equal(model.blocks[0].attn.qkv.weight, expected)


def pickle_model_dir(directory, markers=None):
    """A timm model directory (our config.json) whose weights are a pickle, as older tools write them."""
    directory.mkdir()
    write_config(directory, model_config(tiny(num_classes=3)))
    if markers is None:
        torch.save(weights(), directory / "pytorch_model.bin")
    else:
        torch.save(
            {**weights(), "extra": WritesMarker(markers[0]), "more": SpawnsProcess(markers[1])},
            directory / "pytorch_model.bin",
        )
    return directory


def test_local_dir_refuses(tmp_path, markers):
    evil = pickle_model_dir(tmp_path / "evil", markers)
    with pytest.raises(RuntimeError, match="weights_only=True blocked loading"):
        timm.create_model(f"local-dir:{evil}", pretrained=True)
    clean = pickle_model_dir(tmp_path / "clean")
    assert timm.create_model(f"local-dir:{clean}", pretrained=True).num_classes == 3


def test_hf_hub_repo_of_pickled_weights_is_refused_and_never_pulled(hub_env, tmp_path, request, markers, capsys):
    repo = repo_for(request)
    upload_raw(pickle_model_dir(tmp_path / "evil", markers), repo)
    assert cli_main(["pull", repo, str(tmp_path / "out")]) == 2
    assert "no model.safetensors" in capsys.readouterr().err
    assert list((tmp_path / "hf-home").rglob("pytorch_model.bin")) == []  # never even downloaded
    assert not (tmp_path / "out").exists()
    # hf-hub: fetches the weights through the pull's checks first: refused from the file list, nothing downloaded
    with pytest.raises(HubAnswerError, match=r"file list has no model\.safetensors"):
        timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert list((tmp_path / "hf-home").rglob("pytorch_model.bin")) == []
