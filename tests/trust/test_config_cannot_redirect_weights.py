"""A config is data: it cannot choose which weights are loaded (probe r10), nor skip the checks by naming an
architecture that is not ours (probe r08).

r10: a Hub repo whose config.json sets ``pretrained_cfg.hf_hub_filename = "backdoor.safetensors"``: ``pull``
installed model.safetensors (A) while ``timm.create_model("hf-hub:...")`` and ``register_tag_from_hub`` loaded the
other file (B). Every route of the probe's docstring now loads A or refuses by name: ``vitscratch pull``, timm's
``hf-hub:``, ``local-dir:`` of such a directory, ``register_tag_from_hub`` + ``create_model(tag)``, transformers;
and ``load_checkpoint``, ``summary`` and ``attention`` besides. The other fields that choose what is loaded or
run are refused the same way.

r08: a config naming timm's own ``vit_tiny_patch16_224`` with depth 20000 was handed to timm by ``summary`` and
``attention``, which built it (minutes, tens of GB) before checking it was ours.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import CommitOperationAdd, HfApi
from PIL import Image
from safetensors.torch import load_file

from tests.support import tiny
from tests.support.bounded_child import bounded
from tests.support.hub_fixtures import logits, model_dir, repo_for, upload_raw
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.errors import ModelArgsError, ModelDirectoryError
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import check_model_directory
from timm_vitscratch.models.registry import HUB_WEIGHTS

pytestmark = pytest.mark.slow  # every loading route, the CLI in processes

REDIRECT = "pretrained_cfg: field 'hf_hub_filename' chooses what is loaded or run"
X = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))


def cli_error(capsys, argv) -> str:
    """Run the CLI: exit 2 and one line on stderr, which is returned."""
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitscratch:")]  # besides progress bars
    assert len(lines) == 1 and lines[0].startswith("vitscratch: error: ") and "Traceback" not in err, err
    return lines[0]


def edit_pretrained_cfg(directory: Path, **fields) -> Path:
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"].update(fields)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def reference(weights: Path) -> torch.Tensor:
    model = tiny(num_classes=5)
    model.load_state_dict(load_file(str(weights)))
    return logits(model, X)


@pytest.fixture
def two_models(tmp_path):
    """A (the vetted weights) and B (the backdoor: same shapes, other values) as model directories."""
    made = []
    for seed in (0, 1):
        torch.manual_seed(7100 + seed)
        made.append(model_dir(tmp_path / "AB"[seed], tiny(num_classes=5)))
    return made


def test_r10_every_route_loads_the_vetted_weights_or_refuses(hub_env, local_hub, two_models, tmp_path, request, capsys):
    a, b = two_models
    repo = repo_for(request)
    hub.push(a, repo)
    redirecting = json.loads((a / "config.json").read_text())
    redirecting["pretrained_cfg"]["hf_hub_filename"] = "backdoor.safetensors"
    HfApi().create_commit(
        repo,
        [
            CommitOperationAdd("backdoor.safetensors", b / "model.safetensors"),
            CommitOperationAdd("config.json", json.dumps(redirecting, indent=2).encode()),
        ],
        commit_message="tweak",
    )
    local = edit_pretrained_cfg(shutil.copytree(a, tmp_path / "local"), hf_hub_filename="backdoor.safetensors")
    expected = reference(a / "model.safetensors")
    assert not torch.allclose(expected, reference(b / "model.safetensors"))
    before = len(local_hub.requests)

    # vitscratch pull: refused by name, nothing installed
    assert REDIRECT in cli_error(capsys, ["pull", repo, str(tmp_path / "pulled")])
    assert not (tmp_path / "pulled").exists()
    # timm's hf-hub: refused once the config is read, before any weights are fetched
    with pytest.raises(ModelArgsError, match=REDIRECT):
        timm.create_model(f"hf-hub:{repo}", pretrained=True)
    # local-dir: of a directory holding that config
    with pytest.raises(ModelArgsError, match=REDIRECT):
        timm.create_model(f"local-dir:{local}", pretrained=True)
    # register_tag_from_hub: refused, and no tag is left registered
    with pytest.raises(ModelDirectoryError, match=REDIRECT):
        hub.register_tag_from_hub("scratch_vit_ti16.probe_r10", repo)
    assert "scratch_vit_ti16.probe_r10" not in HUB_WEIGHTS
    # summary and attention of the directory and of the repo
    assert REDIRECT in cli_error(capsys, ["summary", str(local)])
    assert REDIRECT in cli_error(capsys, ["summary", f"hf-hub:{repo}"])
    Image.new("RGB", (32, 32), (10, 200, 30)).save(tmp_path / "img.png")
    argv = ["attention", str(tmp_path / "img.png"), "--model", str(local), "--out", str(tmp_path / "a.png")]
    assert REDIRECT in cli_error(capsys, argv)
    assert not (tmp_path / "a.png").exists()
    # the backdoor was never asked for, and is in no cache
    assert [p for _, _, p, _ in local_hub.requests[before:] if "backdoor" in p] == []
    assert list((tmp_path / "hf-home").rglob(sha256_file(b / "model.safetensors"))) == []

    # load_checkpoint reads the file it is given, never a config
    model = tiny(num_classes=5)
    timm.models.load_checkpoint(model, str(local / "model.safetensors"))
    assert torch.equal(logits(model, X), expected)
    # transformers builds the model from the config and loads model.safetensors itself
    from transformers import AutoModelForImageClassification

    loaded = AutoModelForImageClassification.from_pretrained(repo).eval()
    with torch.no_grad():
        assert torch.allclose(loaded(pixel_values=X).logits, expected, atol=1e-5)


LOADING_FIELDS = {
    "hf_hub_filename": "backdoor.safetensors",
    "file": "/etc/passwd",
    "url": "http://127.0.0.1:9/evil.pth",
    "hf_hub_id": "attacker/other",
    "state_dict_key": "model",
    "source": "hf-hub",
    "custom_load": True,
    "checkpoint_path": "/tmp/evil.pth",
}


@pytest.mark.parametrize("field", sorted(LOADING_FIELDS))
def test_a_field_that_chooses_what_is_loaded_is_refused_by_name(field, tmp_path):
    model = tiny()
    directory = edit_pretrained_cfg(model_dir(tmp_path / "m", model), **{field: LOADING_FIELDS[field]})
    with pytest.raises(ModelDirectoryError, match=f"pretrained_cfg: field '{field}' chooses what is loaded or run"):
        check_model_directory(directory)
    if field in ("file", "source"):  # timm's local-dir: sets both itself, over the file's: it loads the directory
        loaded = timm.create_model(f"local-dir:{directory}", pretrained=True)
        assert torch.equal(logits(loaded, X), logits(model, X))
    else:
        with pytest.raises(ModelArgsError, match=f"field '{field}' chooses what is loaded or run"):
            timm.create_model(f"local-dir:{directory}", pretrained=True)


def test_timms_single_object_config_layout_is_held_to_the_same_fields(tmp_path):
    """timm still reads a config without a ``pretrained_cfg`` key, taking its top level as the cfg."""
    directory = model_dir(tmp_path / "m", tiny())
    config = json.loads((directory / "config.json").read_text())
    legacy = {k: v for k, v in config.items() if k != "pretrained_cfg"}
    legacy["hf_hub_filename"] = "backdoor.safetensors"
    (directory / "config.json").write_text(json.dumps(legacy))
    with pytest.raises(ModelDirectoryError, match=REDIRECT):
        check_model_directory(directory)


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("license", {"name": "mit"}, "expected a string"),
        ("description", ["two", "lines"], "expected a string"),
        ("notes", [1, 2], "expected a string or a list of strings"),
        ("first_conv", "blocks.0.attn.qkv", "expected 'patch_embed.proj'"),
        ("classifier", "blocks.11.mlp.fc2", "expected 'head' or ['head', 'head_dist']"),
        ("no_such_field", 1, "'no_such_field' is not a pretrained_cfg field a file may set"),
    ],
)
def test_data_fields_hold_data_of_their_kind(field, value, expected, tmp_path):
    directory = edit_pretrained_cfg(model_dir(tmp_path / "m", tiny()), **{field: value})
    with pytest.raises(ModelDirectoryError, match=re.escape(expected)):
        check_model_directory(directory)


def test_our_own_configs_pass(tmp_path):
    """What save_model_directory writes (timm's save_config_for_hf) sets data fields only, a DeiT's two heads too."""
    for name in ("scratch_vit_ti16", "scratch_deit_ti16_distilled", "scratch_vit_b16_in21k"):
        kwargs = {"representation_size": 32} if name.endswith("in21k") else {}
        check_model_directory(model_dir(tmp_path / name, tiny(name, **kwargs)))


STOCK = "names architecture 'vit_tiny_patch16_224', which timm_vitscratch does not register"


def stock_directory(path: Path) -> Path:
    path.mkdir()
    config = {
        "architecture": "vit_tiny_patch16_224",
        "num_classes": 5,
        "model_args": {"depth": 20000},
        "pretrained_cfg": {"input_size": [3, 224, 224]},
    }
    (path / "config.json").write_text(json.dumps(config))
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return path


def test_r08_a_stock_architecture_is_refused_before_anything_is_built(tmp_path, capsys):
    directory = stock_directory(tmp_path / "stock")
    Image.new("RGB", (64, 64), (120, 30, 200)).save(tmp_path / "img.png")
    assert STOCK in cli_error(capsys, ["summary", str(directory)])
    assert STOCK in cli_error(capsys, ["summary", f"local-dir:{directory}"])
    argv = ["attention", str(tmp_path / "img.png"), "--model", str(directory), "--out", str(tmp_path / "a.png")]
    assert STOCK in cli_error(capsys, argv)
    assert not (tmp_path / "a.png").exists()
    setup = (
        "from timm_vitscratch.inspect.report import build_report\n"
        "from timm_vitscratch.inspect.attention_maps import load_model"
    )
    for snippet in (f"build_report({str(directory)!r})", f"load_model({str(directory)!r})"):
        result = bounded(setup, snippet)
        assert result["type"] == "ModelDirectoryError" and STOCK in result["message"], result
        print(f"r08 {snippet[:12]}: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB")


def test_r08_a_hub_repo_naming_a_stock_architecture_is_refused_by_summary(hub_env, tmp_path, request, capsys):
    repo = repo_for(request)
    upload_raw(stock_directory(tmp_path / "stock"), repo)
    assert STOCK in cli_error(capsys, ["summary", f"hf-hub:{repo}"])
