"""The end-to-end digits example, in its fast mode (the full run is measured in the README)."""
import json

import timm
import torch
from sklearn.datasets import load_digits

from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.examples import digits


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


def test_fast_run_trains_saves_reloads_and_prints_the_table(tmp_path, capsys):
    assert digits.main(["--fast", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("task"):].splitlines()
    assert table[0].split() == ["task", "init", "steps", "val", "top-1", "time"]
    assert [line.split()[:3] for line in table[2:6]] == [
        ["digits", "0-9", "random"], ["digits", "0-4", "random"], ["digits", "5-9", "pretrained"],
        ["digits", "5-9", "random"]]
    assert f"timm.create_model('local-dir:{tmp_path / 'digits04'}', pretrained=True)" in out
    config = json.loads((tmp_path / "digits04" / "config.json").read_text())
    assert config["architecture"] == "scratch_vit_ti16"
    assert config["model_args"]["in_chans"] == 1 and config["num_classes"] == 5
    assert config["pretrained_cfg"]["mean"] == [0.5]
    model = timm.create_model(f"local-dir:{tmp_path / 'digits04'}", pretrained=True).eval()
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 5)


def test_vitscratch_demo_subcommand(tmp_path, capsys):
    assert cli_main(["demo", "--fast", "--no-progress", "--out", str(tmp_path)]) == 0
    assert "pretrained on 0-4, new head" in capsys.readouterr().out
    assert (tmp_path / "digits04" / "model.safetensors").is_file()
