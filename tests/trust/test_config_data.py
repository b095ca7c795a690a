"""A config is data: the allow-list and bounds of every option, side files read with bounds, and the
checks a model directory gets (label names, dtypes, NaN) on every route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import timm
import torch
from safetensors.torch import save_file

from tests.support import tiny
from timm_vitscratch.choices import GLOBAL_POOLS, MAX_PARAMETERS, WEIGHT_INITS
from timm_vitscratch.cli import main
from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError, ModelArgsError, ModelDirectoryError
from timm_vitscratch.files import sha256_file
from timm_vitscratch.gate.json_data import DEFAULT_LIMITS
from timm_vitscratch.inspect.counts import analytic_param_count
from timm_vitscratch.model_dir import NonFiniteWeightsWarning, check_model_directory, save_model_directory
from timm_vitscratch.models.model_args import (
    DEFAULTS,
    NOT_FROM_FILES,
    OPTIONS,
    bounds_table,
    check_architecture,
    check_model_args,
    parameter_count,
    true_param_count,
)

MAX_JSON_DEPTH = DEFAULT_LIMITS.max_depth

#: create_model-level and builder arguments: a config may never set them
NOT_OPTIONS = (
    "pretrained",
    "pretrained_cfg",
    "pretrained_cfg_overlay",
    "checkpoint_path",
    "cache_dir",
    "features_only",
    "device",
    "dtype",
    "scriptable",
    "pretrained_strict",
    "__class__",
    "",
)


@pytest.mark.parametrize("name", NOT_OPTIONS)
def test_anything_but_a_model_option_is_refused_by_name(name):
    with pytest.raises(ModelArgsError, match=f"{name!r} is not a model option a file may set"):
        check_model_args({name: True}, "c.json")


BAD_VALUES = {
    "int": [-1, 1.5, True, "3", None, 10**12, float("nan")],
    "size": [0, "abc", [1], [1, 2, 3], 10**6],
    "float": [float("nan"), float("inf"), -1.0, "0.1", None, True],
    "bool": [1, "true", None],
    "choice": [1, "nope", None, ["token"]],
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_every_option_is_type_and_range_checked(name):
    option = OPTIONS[name]
    for value in BAD_VALUES[option.kind]:
        if value is None and option.nullable:
            continue
        if option.kind == "float" and value == -1.0 and option.low is not None and option.low < -1:
            continue
        with pytest.raises(ModelArgsError) as err:
            check_model_args({name: value}, "c.json")
        assert f"{name} is " in str(err.value) and "expected" in str(err.value), str(err.value)


def test_the_bounds_keep_every_registered_variant_and_count_its_size():
    from timm_vitscratch.models.build import build_on_meta
    from timm_vitscratch.models.variants import ARCHITECTURES

    for name, args in ARCHITECTURES.items():
        check_architecture(args, name)
        model = build_on_meta(name)
        assert parameter_count({**args, "num_classes": model.num_classes}, name) == true_param_count(model), name
    huge = {"embed_dim": 8192, "depth": 64, "num_heads": 64}
    count = analytic_param_count(patch_size=16, **huge)  # 51,562,554,344: the formula docs/inspection.md derives
    with pytest.raises(ModelArgsError, match=f"of {count:,} parameters; expected at most {MAX_PARAMETERS:,}"):
        check_architecture(huge, "c.json")
    with pytest.raises(ModelArgsError, match="does not divide"):
        check_architecture({"embed_dim": 64, "num_heads": 5}, "c.json")


def test_sizes_are_bounded_before_the_model_is_built_on_meta(monkeypatch):
    # a hostile config never gets a model built, even on meta, before each size is inside its bound
    import timm_vitscratch.models.model_args as model_args

    def refuse(**kwargs):
        raise AssertionError(f"built before the cheap checks: {kwargs}")

    monkeypatch.setattr(model_args, "VisionTransformer", refuse)
    for args, message in [
        ({"depth": 10**6}, "depth is 1000000; expected an integer in"),
        ({"embed_dim": 10**6, "num_heads": 1}, "embed_dim is 1000000"),
        ({"img_size": 4096, "patch_size": 1}, "makes 16,777,216 patches"),
        ({"embed_dim": 100, "num_heads": 3}, "does not divide"),
        ({"cache_dir": "/tmp"}, "'cache_dir' is not a model option"),
    ]:
        with pytest.raises(ModelArgsError, match=re.escape(message)):
            check_architecture(args, "c.json")


def test_a_combination_the_constructor_refuses_is_refused_naming_the_file():
    with pytest.raises(ModelArgsError, match=r"^c\.json: representation_size \(has_logits\) cannot be combined"):
        check_architecture({"representation_size": 768, "distilled": True}, "c.json")


def test_the_options_are_the_constructors_and_the_defaults_its_own():
    import inspect

    from timm_vitscratch.models import VisionTransformer

    parameters = inspect.signature(VisionTransformer.__init__).parameters
    # every constructor argument is settable from a file, or deliberately not (where the model is made)
    assert list(OPTIONS) + list(NOT_FROM_FILES) == [name for name in parameters if name != "self"]
    assert {name: parameters[name].default for name in OPTIONS}.items() <= DEFAULTS.items()
    assert OPTIONS["global_pool"].choices == GLOBAL_POOLS and OPTIONS["weight_init"].choices == WEIGHT_INITS
    assert OPTIONS["fc_norm"].nullable and not OPTIONS["class_token"].nullable
    assert check_architecture({}, "c.json") is None  # the defaults alone: ViT-B/16


def test_bounds_table_lists_every_option():
    table = bounds_table()
    assert all(f"| `{name}` |" in table for name in OPTIONS)


def directory(tmp_path, name="m"):
    return save_model_directory(tiny(num_classes=3), tmp_path / name, label_names=["a", "b", "c"])


def set_config(d, **fields):
    config = json.loads((d / "config.json").read_text())
    for key, value in fields.items():
        if key.startswith("args."):
            config["model_args"][key[5:]] = value
        else:
            config[key] = value
    (d / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"args.norm_eps": -1.0}, "norm_eps is -1.0"),
        ({"args.norm_eps": float("nan")}, "norm_eps is nan"),
        ({"args.img_size": "abc"}, "img_size is 'abc'"),
        ({"args.img_size": float("inf")}, "img_size is inf"),
        ({"args.depth": 3}, "depth 3, but the weights hold 2 blocks"),
        ({"args.embed_dim": 32, "args.num_heads": 4}, "embed_dim 32, but patch_embed.proj.weight"),
        ({"num_classes": 10**9}, "num_classes is 1000000000"),
        ({"label_names": ["a", "b"]}, "2 label_names for a classifier of 3 classes"),
        ({"label_names": "abc"}, "label_names is str"),
        ({"label_names": ["a", 1, "c"]}, "entries that are not strings"),
        ({"args.representation_size": 64}, "representation_size 64, but there is no representation layer"),
    ],
)
def test_a_model_directory_config_is_checked_on_every_route(fields, message, tmp_path, capsys):
    d = directory(tmp_path)
    set_config(d, **fields)
    with pytest.raises(ModelDirectoryError, match=message.replace("[", r"\[")):
        check_model_directory(d)
    try:  # timm parses some fields (img_size) itself before our checks run: then its own TypeError
        timm.create_model(f"local-dir:{d}", pretrained=True)
    except (ValueError, TypeError) as err:
        assert (isinstance(err, ValueError) and re.search(message.replace("[", r"\["), str(err))) or (
            isinstance(err, TypeError) and "args.img_size" in fields
        )
    else:
        raise AssertionError("loaded")
    assert main(["convert", str(d), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("expected" in err or "but" in err), err
    assert not (tmp_path / "out").exists()


def test_deep_or_huge_json_side_files_are_clear_errors(tmp_path):
    d = directory(tmp_path)
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelDirectoryError, match=f"nests JSON deeper than {MAX_JSON_DEPTH} levels"):
        check_model_directory(d)
    with pytest.raises(ConversionError, match="nests JSON deeper"):
        convert(d, tmp_path / "out")
    nested = {"a": None}
    for _ in range(MAX_JSON_DEPTH + 1):
        nested = {"a": nested}
    (d / "config.json").write_text(json.dumps({"architecture": "scratch_vit_ti16", "x": nested}))
    with pytest.raises(ModelDirectoryError, match="nests JSON deeper"):
        check_model_directory(d)
    with open(d / "config.json", "wb") as handle:
        handle.truncate(17 << 20)
    with pytest.raises(ModelDirectoryError, match="larger than 16,777,216 bytes"):
        check_model_directory(d)


def test_side_files_must_be_regular_files_inside_the_directory(tmp_path):
    d = directory(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text((d / "config.json").read_text())
    os.unlink(d / "config.json")
    os.symlink(outside, d / "config.json")
    with pytest.raises(ModelDirectoryError, match="outside"):
        check_model_directory(d)
    with pytest.raises(ConversionError, match="outside"):
        convert(d, tmp_path / "out")
    os.unlink(d / "config.json")
    os.mkfifo(d / "config.json")  # a read would block forever
    with pytest.raises(ModelDirectoryError, match="not a regular file"):
        check_model_directory(d)
    with pytest.raises(ConversionError, match="not a regular file"):
        convert(d, tmp_path / "out")
    os.mkfifo(tmp_path / "fifo.pth")
    with pytest.raises(ConversionError, match="not a regular file"):
        convert(tmp_path / "fifo.pth", tmp_path / "out")


def test_weights_symlinked_out_of_a_model_directory(tmp_path):
    d = directory(tmp_path)
    os.replace(d / "model.safetensors", tmp_path / "elsewhere.safetensors")
    os.symlink(tmp_path / "elsewhere.safetensors", d / "model.safetensors")
    with pytest.raises(ModelDirectoryError, match="outside"):
        check_model_directory(d)


def test_a_torch_save_file_named_safetensors(tmp_path):
    d = directory(tmp_path)
    torch.save(tiny(num_classes=3).state_dict(), d / "model.safetensors")
    with pytest.raises(ModelDirectoryError, match=re.escape("is a torch.save file, not safetensors; convert it")):
        check_model_directory(d, require_sha256=False)


def test_nan_weights_warn_or_fail_with_strict(tmp_path):
    d = directory(tmp_path)
    state = tiny(num_classes=3).state_dict()
    state["blocks.1.mlp.fc2.weight"][0, 0] = float("nan")
    save_file(state, str(d / "model.safetensors"))
    set_config(d, vitscratch={"sha256": sha256_file(d / "model.safetensors")})
    with pytest.warns(NonFiniteWeightsWarning, match="blocks.1.mlp.fc2.weight"):
        check_model_directory(d)
    with pytest.raises(ModelDirectoryError, match="NaN or Inf in 1 tensor"):
        check_model_directory(d, strict=True)


def test_int_weights_in_a_checkpoint_are_refused_not_cast(tmp_path, capsys):
    state = tiny().state_dict()
    state["blocks.0.attn.qkv.weight"] = state["blocks.0.attn.qkv.weight"].to(torch.int8)
    torch.save(state, tmp_path / "c.pth")
    assert main(["convert", str(tmp_path / "c.pth"), str(tmp_path / "out"), "--num-heads", "4"]) == 2
    assert "'blocks.0.attn.qkv.weight' (int8) would become model weights" in capsys.readouterr().err
    from timm.models import load_checkpoint

    with pytest.raises(ConversionError, match=r"blocks.0.attn.qkv.weight' \(int8\) would become model weights"):
        load_checkpoint(tiny(), str(tmp_path / "c.pth"))


def test_side_config_values_are_bounded_for_conversion(tmp_path, capsys):
    """A transformers config.json with an absurd image size or head count: one clear line, exit 2."""
    from transformers import ViTForImageClassification

    from tests.support.sources import hf_config, randomized

    src = tmp_path / "hf"
    randomized(lambda: ViTForImageClassification(hf_config(num_hidden_layers=2, image_size=64))).save_pretrained(src)
    config = json.loads((src / "config.json").read_text())
    for field, value in (("image_size", 1e308 * 10), ("num_attention_heads", 10**9), ("image_size", 10**7)):
        (src / "config.json").write_text(json.dumps({**config, field: value}))
        assert main(["convert", str(src), str(tmp_path / "out")]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitscratch")]
        assert len(err) == 1 and field in err[0] and "expected" in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["summary", "scratch_vit_b16", "--num-classes", "100000000000"], "num_classes is 100000000000"),
        (["summary", "scratch_vit_b16", "--img-size", "1000006"], "img_size is 1000006"),
        (["summary", "scratch_vit_b16", "--img-size", "4000"], "62,500 patches; expected at most 16,384"),
        (["convert", "x.pth", "out", "--img-size", "1000000"], "img_size is 1000000"),
    ],
)
def test_cli_sizes_have_the_same_bounds(argv, message, tmp_path, capsys):
    if argv[0] == "convert":
        torch.save(tiny().state_dict(), tmp_path / "x.pth")
        argv = ["convert", str(tmp_path / "x.pth"), str(tmp_path / "out"), "--img-size", argv[-1]]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow  # the attention command in processes
def test_attention_refuses_sizes_and_pickles_with_one_line(tmp_path):
    from PIL import Image

    Image.new("RGB", (32, 32)).save(tmp_path / "i.png")
    d = tmp_path / "d"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architecture": "scratch_vit_ti16"}))
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02cos\nsystem\n.")
    for args, message in (
        (["--model", str(d)], "no model.safetensors"),
        (["--model", "scratch_vit_ti16", "--img-size", "4096"], "patches; expected at most"),
        (["--model", "scratch_vit_b16", "--img-size", "1024"], "bytes of attention maps"),
    ):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "timm_vitscratch.cli",
                "attention",
                str(tmp_path / "i.png"),
                *args,
                "--out",
                str(tmp_path / "a.png"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "a.png").exists()
