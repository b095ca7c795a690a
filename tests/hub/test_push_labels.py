"""`vitscratch push --labels`: label names in the pushed config.json, as timm writes and reads them."""

import json
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import HfApi, hf_hub_download
from timm.models._hub import save_config_for_hf

from tests.support import tiny
from tests.support.hub_fixtures import logits, model_dir, repo_for
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import check_model_directory, save_model_directory

pytestmark = pytest.mark.slow  # push and pull through the local Hub server

NAMES = ["cat", "dog", "owl", "yak"]


def _snapshot(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_push_labels_file_writes_timm_label_names_and_loads_with_hf_hub(hub_env, tmp_path, request):
    repo = repo_for(request)
    model = tiny(num_classes=len(NAMES)).eval()
    directory = model_dir(tmp_path / "model", model)
    before = _snapshot(directory)
    labels = tmp_path / "classes.txt"
    labels.write_text("\n".join(NAMES) + "\n\n", encoding="utf-8")  # a trailing blank line is no class

    assert cli_main(["push", str(directory), repo, "--labels", str(labels)]) == 0

    assert _snapshot(directory) == before  # push stages a copy; the user's directory is untouched
    pushed = json.loads(Path(hf_hub_download(repo, "config.json")).read_text())
    assert pushed["label_names"] == NAMES
    # exactly what timm's own save_config_for_hf writes for this model with these names (key order too),
    # but for num_classes in model_args, which the top level gives (transformers passes it itself)
    save_config_for_hf(
        model, tmp_path / "timm.json", model_config={"label_names": NAMES, "vitscratch": pushed["vitscratch"]}
    )
    expected = json.loads((tmp_path / "timm.json").read_text())
    assert expected["model_args"].pop("num_classes") == pushed["num_classes"]
    assert json.dumps(pushed) == json.dumps(expected)
    assert pushed["vitscratch"]["sha256"] == sha256_file(directory / "model.safetensors")

    out = hub.pull(repo, tmp_path / "pulled")  # the pull's model-directory check passes
    config, _ = check_model_directory(out)
    assert config["label_names"] == NAMES
    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert loaded.pretrained_cfg["label_names"] == NAMES
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(logits(loaded, x), logits(model, x))


def test_push_labels_from_image_folder_replaces_the_directory_names(hub_env, tmp_path, request):
    repo = repo_for(request)
    model = tiny(num_classes=3).eval()
    directory = save_model_directory(model, tmp_path / "model", label_names=["x", "y", "z"])
    folder = tmp_path / "train"
    for name in ("owl", "cat", "dog", ".cache"):  # class directories, sorted as ImageFolder sorts them
        (folder / name).mkdir(parents=True)
    (folder / "notes.txt").write_text("not a class")

    hub.push(directory, repo, labels=folder)

    assert json.loads((directory / "config.json").read_text())["label_names"] == ["x", "y", "z"]
    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert loaded.pretrained_cfg["label_names"] == ["cat", "dog", "owl"]


def test_push_registered_name_with_labels(hub_env, tmp_path, request):
    repo = repo_for(request)
    names = [f"class_{i:04d}" for i in range(1000)]
    hub.push("scratch_vit_ti16", repo, labels=names)
    pushed = json.loads(Path(hf_hub_download(repo, "config.json")).read_text())
    assert pushed["label_names"] == names
    assert timm.create_model(f"hf-hub:{repo}", pretrained=True).pretrained_cfg["label_names"] == names


def test_push_refuses_a_label_count_that_is_not_num_classes(hub_env, tmp_path, request, capsys):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "model", tiny(num_classes=len(NAMES)))
    labels = tmp_path / "classes.txt"
    labels.write_text("cat\ndog\nowl\n", encoding="utf-8")
    before = _snapshot(directory)

    assert cli_main(["push", str(directory), repo, "--labels", str(labels)]) == 2
    err = capsys.readouterr().err
    assert f"{directory}: --labels: 3 label names for a classifier of 4 classes" in err
    assert "one name per class" in err
    assert cli_main(["push", "scratch_vit_ti16", repo, "--labels", str(labels)]) == 2  # checked before building
    assert "scratch_vit_ti16: --labels: 3 label names for a classifier of 1000 classes" in capsys.readouterr().err
    assert cli_main(["push", str(directory), repo, "--labels", str(tmp_path / "missing.txt")]) == 2
    assert "--labels: " in (err := capsys.readouterr().err) and "missing.txt does not exist" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="has no class sub-directories"):
        hub.push(directory, repo, labels=empty)

    assert not HfApi().repo_exists(repo)  # refused before any request
    assert _snapshot(directory) == before
