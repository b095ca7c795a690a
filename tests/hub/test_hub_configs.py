"""hub_configs/: one timm config.json per registered variant, in sync with the registry."""

import json
import shutil
from pathlib import Path

import pytest
import timm
import torch
from timm.models._hub import load_model_config_from_path

from tests.support import sweep
from timm_vitscratch.hub.variant_configs import main as configs_main
from timm_vitscratch.hub.variant_configs import out_of_sync
from timm_vitscratch.models.variants import ARCHITECTURES

pytestmark = pytest.mark.slow  # every variant's config generated and built

HUB_CONFIGS = Path(__file__).resolve().parents[2] / "hub_configs"
PRETRAINED_KEYS = {"input_size", "interpolation", "crop_pct", "mean", "std", "first_conv", "classifier"}


def test_committed_configs_equal_a_fresh_generation(tmp_path):
    assert configs_main([str(tmp_path)]) == 0
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in HUB_CONFIGS.glob("*.json")}
    assert sorted(fresh) == sorted(f"{name}.json" for name in ARCHITECTURES)
    assert committed == fresh, "hub_configs/ is stale: run `python -m timm_vitscratch.hub.variant_configs hub_configs`"
    assert out_of_sync(HUB_CONFIGS) == []


def test_every_config_is_read_by_timm_and_builds_its_variant(tmp_path):
    for name in ARCHITECTURES:
        config = json.loads((HUB_CONFIGS / f"{name}.json").read_text())
        assert {"architecture", "num_classes", "num_features", "global_pool", "pretrained_cfg"} <= set(config)
        assert PRETRAINED_KEYS <= set(config["pretrained_cfg"])
        # a license only where weights are named (a tag records its source's); none for a cfg without weights
        assert ("license" in config["pretrained_cfg"]) == ("tag" in config["pretrained_cfg"]), name
        shutil.copy(HUB_CONFIGS / f"{name}.json", tmp_path / "config.json")
        pretrained_cfg, model_name, model_args = load_model_config_from_path(tmp_path)  # timm's own reader
        assert model_name == name and pretrained_cfg["num_classes"] == config["num_classes"]
        if name not in sweep.rows([name]):  # built: the representative rows (all with the full sweep)
            continue
        with torch.device("meta"):
            from_config = timm.create_model(model_name, **model_args)
            registered = timm.create_model(name)
        assert from_config.num_features == config["num_features"]
        assert [(k, v.shape) for k, v in from_config.state_dict().items()] == [
            (k, v.shape) for k, v in registered.state_dict().items()
        ]


def test_check_reports_missing_stale_and_foreign_files(tmp_path, capsys):
    configs_main([str(tmp_path)])
    (tmp_path / "scratch_vit_b16.json").unlink()
    (tmp_path / "scratch_vit_s16.json").write_text("{}\n")
    (tmp_path / "scratch_vit_zz.json").write_text("{}\n")
    capsys.readouterr()
    assert configs_main([str(tmp_path), "--check"]) == 1
    report = capsys.readouterr().out
    assert "missing" in report and "scratch_vit_b16.json" in report
    assert "stale" in report and "scratch_vit_s16.json" in report
    assert "foreign" in report and "scratch_vit_zz.json" in report
