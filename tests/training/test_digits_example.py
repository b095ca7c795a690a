"""The end-to-end digits example, in its fast mode (the full run is measured in the README)."""

import json
import os

import pytest
import timm
import torch
from sklearn.datasets import load_digits

from examples import digits
from examples.digits import main as digits_main

pytestmark = pytest.mark.slow  # timm's train.py and validate.py, torchrun DDP, the digits example


def test_split_keeps_only_the_asked_digits_renumbered_from_zero():
    data = load_digits()
    target = torch.tensor(data.target)
    split = digits.load_split(digits.FINETUNE_DIGITS)
    assert set(split.train_labels.tolist()) == set(split.val_labels.tolist()) == {0, 1, 2, 3, 4}
    assert len(split.train_labels) + len(split.val_labels) == int((target >= 5).sum())
    assert split.train_images.shape[1:] == (1, 8, 8)
    assert split.train_images.min() == -1.0 and split.train_images.max() == 1.0
    # digit 7 is label 2 here, and its images are digit 7's
    sevens = torch.tensor(data.images[data.target == 7], dtype=torch.float32) / 8.0 - 1.0
    first_seven = split.train_images[split.train_labels == 2][0, 0]
    assert any(torch.equal(first_seven, image) for image in sevens)


def test_fast_run_trains_saves_round_trips_through_the_hub_and_prints_the_table(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    # a user's Hub settings: the example must neither use nor change them
    user_home = tmp_path / "user-hf-home"
    for key, value in {
        "HF_HOME": str(user_home),
        "HF_HUB_CACHE": str(user_home / "hub"),
        "HF_HUB_OFFLINE": "1",
        "HF_TOKEN": "hf_user_token_not_for_local_servers",
        "HF_ENDPOINT": "https://hub.invalid",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_HUB_DISABLE_XET", raising=False)
    environment = dict(os.environ)
    settings = {k: v for k, v in vars(constants).items() if k.isupper()}

    assert digits.main(["--fast", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("task  ") :].splitlines()
    assert table[0].split() == ["task", "init", "steps", "val", "top-1", "time"]
    assert [line.split()[:3] for line in table[2:7]] == [
        ["digits", "0-9", "random"],
        ["digits", "0-4", "random"],
        ["digits", "0-4", "reloaded"],
        ["digits", "5-9", "pretrained"],
        ["digits", "5-9", "random"],
    ]
    # the reloaded model scores exactly what the trained one did, and its logits are identical
    assert table[3].split()[-4:-2] == table[4].split()[-4:-2]
    repo = digits.REPO_ID
    assert f"pushed {tmp_path / 'digits04'} to {repo}@main" in out
    assert f"timm.create_model('hf-hub:{repo}', pretrained=True): logits max-abs-diff 0 against" in out
    assert "Hub round trip: " in out and "logits max-abs-diff 0 against the trained model" in out
    assert "PUT /upload/* (storage) x1" in out and "GET /lfs/* (storage) x1" in out  # the LFS path, not Xet

    # pushed and pulled: the same files as saved; the pulled copy loads and gives the saved model's logits
    saved, pulled = tmp_path / "digits04", tmp_path / "digits04-pulled"
    assert (pulled / "model.safetensors").read_bytes() == (saved / "model.safetensors").read_bytes()
    assert json.loads((pulled / "config.json").read_text()) == json.loads((saved / "config.json").read_text())
    config = json.loads((saved / "config.json").read_text())
    assert config["architecture"] == "scratch_vit_ti16"
    assert config["model_args"]["in_chans"] == 1 and config["num_classes"] == 5
    assert config["pretrained_cfg"]["mean"] == [0.5]
    x = torch.zeros(2, 1, 8, 8)
    models = [timm.create_model(f"local-dir:{d}", pretrained=True).eval() for d in (saved, pulled)]
    with torch.no_grad():
        assert models[0](x).shape == (2, 5) and torch.equal(models[0](x), models[1](x))

    # the user's environment, client settings and cache are as they were
    assert dict(os.environ) == environment
    assert {k: v for k, v in vars(constants).items() if k.isupper()} == settings
    assert not user_home.exists()


def test_example_main(tmp_path, capsys):
    assert digits_main(["--fast", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "pretrained on 0-4 (hf-hub:), new head" in capsys.readouterr().out
    assert (tmp_path / "digits04" / "model.safetensors").is_file()


def test_without_out_it_names_the_temporary_folder_as_such_and_draws_no_bars_off_a_terminal(capsys):
    """Run as ``make demo > log`` runs it: stderr is not a terminal, so no progress bars; and a model directory
    in the temporary folder (removed at the end) is not reported as saved at a path that is gone."""
    assert digits.main(["--fast"]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "it/s" not in captured.err
    assert "saved digits04/ in a temporary folder (removed at the end; --out DIR keeps it)" in captured.out
    assert "vitscratch-digits-" not in captured.out  # the temporary path itself is never shown
