"""A transformers config.json is data: each architecture field inside the bounds our own option has, and equal to
what the weights beside it hold, checked before anything is built, including ``--verify``'s reference model.

The hostile inputs of probe r11, made here at a smaller size: a config that says 3 layers over weights that hold
2 (refused with and without ``--strict`` / ``--verify``), ``num_hidden_layers: 1e9`` under ``--verify`` (refused at
once, in a child capped at 200 MB over what it uses), ``patch_size: 0`` and ``num_channels: 1000``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support.bounded_child import bounded
from tests.support.sources import TINY_HF_VIT, randomized
from timm_vitscratch.cli import main
from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError

pytestmark = pytest.mark.slow  # transformers configs checked and verified

CONFIG = TINY_HF_VIT


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A small transformers ViTForImageClassification directory, as save_pretrained writes it."""
    import transformers

    directory = tmp_path_factory.mktemp("hf") / "vit"
    model = randomized(lambda: transformers.ViTForImageClassification(transformers.ViTConfig(**CONFIG)))
    model.config.save_pretrained(directory)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(directory / "model.safetensors"))
    return directory


def variant(source: Path, where: Path, **changes) -> Path:
    """A copy of ``source`` whose config.json says ``changes`` (None removes a field)."""
    shutil.copytree(source, where)
    config = json.loads((where / "config.json").read_text())
    config.update(changes)
    (where / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return where


def cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vitscratch: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("flags", [[], ["--strict"], ["--verify"]])
def test_a_config_saying_more_layers_than_the_weights_hold(source, tmp_path, capsys, flags):
    d = variant(source, tmp_path / "three", num_hidden_layers=3)
    out = tmp_path / "out"
    line = cli_error(capsys, ["convert", str(d), str(out), *flags])
    assert "config.json beside the weights does not describe these weights" in line
    assert "num_hidden_layers 3, but the weights have 2 layers" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("num_hidden_layers", 10**9, "num_hidden_layers is 1000000000; expected an integer in [1, 64]"),
        ("patch_size", 0, "patch_size is 0; expected an integer or [height, width] of integers in [1, 64]"),
        ("num_channels", 1000, "num_channels is 1000; expected an integer in [1, 64]"),
        ("hidden_size", -1, "hidden_size is -1; expected an integer in [1, 8,192]"),
        ("num_attention_heads", 1e9, "num_attention_heads is 1000000000.0; expected an integer in [1, 128]"),
        ("image_size", 10**6, "image_size is 1000000; expected an integer or [height, width] of integers"),
        ("intermediate_size", "64", "intermediate_size is '64'; expected an integer in [1, 131,072]"),
        ("layer_norm_eps", 0, "layer_norm_eps is 0; expected a finite number in (0.0, 0.1]"),
        ("num_labels", 10**7, "num_labels is 10000000; expected an integer in [0, 100,000]"),
        ("id2label", ["a", "b", "c"], "id2label is a list; expected an object of class index -> label"),
        ("qkv_bias", "yes", "qkv_bias is 'yes'; expected true or false"),
    ],
)
def test_fields_outside_the_bounds_are_refused_under_verify(source, tmp_path, capsys, field, value, expected):
    d = variant(source, tmp_path / "bad", **{field: value})
    out = tmp_path / "out"
    line = cli_error(capsys, ["convert", str(d), str(out), "--verify"])
    assert f"config.json beside the weights: {expected}" in line
    assert not out.exists()


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("hidden_size", 64, "hidden_size 64, but the weights have width 32"),
        ("num_channels", 4, "num_channels 4, but the weights have 3 input channels"),
        ("patch_size", 4, "patch_size 4, but the weights have 8x8 patches"),
        ("intermediate_size", 128, "intermediate_size 128, but the weights have an MLP of width 64"),
        ("num_labels", 5, "num_labels / id2label 5, but the weights have a classifier of 3 classes"),
        ("id2label", {"0": "a"}, "num_labels / id2label 1, but the weights have a classifier of 3 classes"),
        ("num_attention_heads", 5, "num_attention_heads 5, but the weights have width 32, which 5 heads do not"),
        ("qkv_bias", False, "qkv_bias False, but the weights have query, key and value biases"),
    ],
)
def test_fields_that_disagree_with_the_weights_are_refused(source, tmp_path, field, value, expected):
    d = variant(source, tmp_path / "other", **{field: value, **({"num_labels": None} if field == "id2label" else {})})
    with pytest.raises(ConversionError, match="does not describe these weights") as caught:
        convert(d, tmp_path / "out", verify=True)
    assert expected in str(caught.value) and "nothing was built" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_huge_layer_count_under_verify_is_refused_at_once_in_bounded_memory(source, tmp_path):
    d = variant(source, tmp_path / "layers1e9", num_hidden_layers=10**9)
    setup = "from timm_vitscratch.convert import convert"
    result = bounded(setup, f"convert({str(d)!r}, {str(tmp_path / 'out')!r}, verify=True)")
    assert result["type"] == "ConversionError", result
    assert "num_hidden_layers is 1000000000; expected an integer in [1, 64]" in result["message"]
    assert result["peak_growth_mb"] < 200, result
    assert not (tmp_path / "out").exists()
    print(f"r11 1e9 layers: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB")


def test_the_reference_is_built_from_the_checked_values_not_the_file(source, tmp_path):
    """Fields the checks do not cover never reach transformers' loader: a quantization_config is not applied."""
    d = variant(
        source,
        tmp_path / "extra",
        quantization_config={"quant_method": "bitsandbytes", "load_in_8bit": True},
        dtype="float16",
        auto_map={"AutoModel": "evil.Model"},
    )
    result = convert(d, tmp_path / "out", verify=True)
    assert result.verification is not None and result.verification.passed
    assert result.verification.reference == "transformers' ViTForImageClassification"


def test_the_sources_own_heads_and_eps_are_what_verify_checks(source, tmp_path):
    """--num-heads overrides our model, not the reference: the source's config still says what it was."""
    from timm_vitscratch.errors import VerificationError

    with pytest.raises(VerificationError, match="exceeds the tolerance"):
        convert(source, tmp_path / "wrong", num_heads=2, verify=True)
    eps = variant(source, tmp_path / "eps", layer_norm_eps=1e-3)
    result = convert(eps, tmp_path / "out", verify=True)
    assert result.verification.passed and result.model_args["norm_eps"] == 1e-3


def test_a_consistent_config_still_converts_and_verifies(source, tmp_path):
    result = convert(source, tmp_path / "out", verify=True, strict=True)
    assert result.verification.confirmed
    x = torch.randn(1, 3, 16, 16)
    assert x.shape[-1] == CONFIG["image_size"]


# --- every transformers family: a config value of the wrong type is one escaped, short line ------------------
#: a tiny model of each family transformers' source reads (its config class's fields, as save_pretrained writes)
FAMILIES = {
    "vit": ("ViTForImageClassification", "ViTConfig", dict(CONFIG)),
    "dinov3": (
        "DINOv3ViTModel",
        "DINOv3ViTConfig",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32)
        | dict(num_register_tokens=2),
    ),
    "dinov2": (
        "Dinov2Model",
        "Dinov2Config",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=28, patch_size=14),
    ),
    "siglip": (
        "SiglipVisionModel",
        "SiglipVisionConfig",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32),
    ),
    "siglip2": (
        "Siglip2VisionModel",
        "Siglip2VisionConfig",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_patches=16),
    ),
}
#: each family's yes/no field (the weights' biases, the gated MLP, the head)
FLAG_OF = {
    "vit": "qkv_bias",
    "dinov3": "query_bias",
    "dinov2": "qkv_bias",
    "siglip": "vision_use_head",
    "siglip2": "vision_use_head",
}
ANSI = "\x1b]0;pwned\x07\x1b[2J" + "g" * 100_000


def family_dir(family: str, directory: Path) -> Path:
    import transformers

    model_cls, config_cls, fields = FAMILIES[family]
    config = getattr(transformers, config_cls)(patch_size=fields.pop("patch_size", 16), **fields)
    torch.manual_seed(0)
    getattr(transformers, model_cls)(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {family: family_dir(family, root / family) for family in FAMILIES}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_converts_as_saved(families, tmp_path, family):
    """The tiny models below are refused for their one hostile field only."""
    convert(families[family], tmp_path / "out")


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize(
    "field, value",
    [
        ("hidden_act", {"a": 1}),
        ("hidden_act", ANSI),
        ("hidden_act", ["gelu"]),
        ("hidden_act", 7),
        ("model_type", {"a": 1}),
        ("model_type", ANSI),
        ("flag", ANSI),
        ("flag", {"a": [1]}),
        ("hidden_size", ANSI),
        ("num_hidden_layers", {"a": 1}),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else v[:12].encode("unicode_escape").decode(),
)
def test_a_config_value_of_the_wrong_type_is_one_escaped_short_line(families, tmp_path, capsys, family, field, value):
    """s11: a dict hidden_act crashed SigLIP 2's reading (unhashable); DINOv3 / DINOv2 echoed a 100 KB value with
    its raw escape bytes. Every family: exit 2, one line, the value escaped and cut, naming the field."""
    field = FLAG_OF[family] if field == "flag" else field
    d = variant(families[family], tmp_path / "bad", **{field: value})
    line = cli_error(capsys, ["convert", str(d), str(tmp_path / "out")])
    assert not any(c in line for c in "\x1b\x07\x00"), line
    assert len(line) < 600, f"{len(line)} characters: {line[:300]}"
    assert field in line, line
    assert not (tmp_path / "out").exists()


# --- sharded folders: refused unless the whole set can be read -----------------------------------------------
def split_blocks(source: Path) -> tuple[dict, dict]:
    """The tensors of ``source`` with and without its last block (layer 1 of 2): two shards of one model."""
    from safetensors.torch import load_file

    tensors = load_file(str(source / "model.safetensors"))
    second = {k: t for k, t in tensors.items() if ".layer.1." in k or ".layers.1." in k}
    assert second
    return {k: t for k, t in tensors.items() if k not in second}, second


def test_a_partial_shard_set_is_refused_naming_what_is_missing(source, tmp_path, capsys):
    """s12: one shard of two (with its index, whose names point out of the folder): '1 of 2 shards', the missing
    one named; nothing is read from where the index points."""
    first, second = split_blocks(source)
    d = tmp_path / "partial"
    d.mkdir()
    shutil.copy(source / "config.json", d)
    save_file(first, str(d / "model-00001-of-00002.safetensors"))
    save_file(second, str(tmp_path / "secret.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first} | {k: "../secret.safetensors" for k in second}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    line = cli_error(capsys, ["convert", str(d), str(tmp_path / "out")])
    assert "1 of 2 shards" in line and "missing 'model-00002-of-00002.safetensors'" in line, line
    assert not (tmp_path / "out").exists()


def test_one_shard_saved_as_model_safetensors_beside_the_others_is_refused(source, tmp_path, capsys):
    first, second = split_blocks(source)
    d = tmp_path / "beside"
    d.mkdir()
    shutil.copy(source / "config.json", d)
    save_file(first, str(d / "model.safetensors"))
    save_file(second, str(d / "model-00002-of-00002.safetensors"))
    line = cli_error(capsys, ["convert", str(d), str(tmp_path / "out")])
    assert "1 of 2 shards" in line and "'model.safetensors' beside them may be one shard of the set" in line, line


def test_an_index_without_its_shards_is_refused_naming_them_escaped(source, tmp_path, capsys):
    d = tmp_path / "index-only"
    d.mkdir()
    shutil.copy(source / "config.json", d)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "\x1b[2J" + "x" * 5000}}))
    line = cli_error(capsys, ["convert", str(d), str(tmp_path / "out")])
    assert "model.safetensors.index.json (a sharded checkpoint's index)" in line and "\x1b" not in line, line
    assert len(line) < 700


def test_a_file_named_as_one_shard_of_several_is_refused(source, tmp_path, capsys):
    first, _ = split_blocks(source)
    save_file(first, str(tmp_path / "model-00001-of-00003.safetensors"))
    line = cli_error(capsys, ["convert", str(tmp_path / "model-00001-of-00003.safetensors"), str(tmp_path / "out")])
    assert "is shard 1 of 3 of a sharded checkpoint" in line, line


def test_a_transformers_folder_without_its_config_is_refused_but_its_file_converts(source, tmp_path, capsys):
    """s12: a lone model.safetensors holding some of the blocks, no config: nothing says it is the whole model, so
    the folder is refused (save_pretrained always writes config.json); the file itself is a bare state dict."""
    first, _ = split_blocks(source)
    d = tmp_path / "noconfig"
    d.mkdir()
    save_file(first, str(d / "model.safetensors"))
    line = cli_error(capsys, ["convert", str(d), str(tmp_path / "out")])
    assert "is a transformers model directory without its config.json" in line, line
    assert not (tmp_path / "out").exists()
    assert convert(d / "model.safetensors", tmp_path / "out", num_heads=4).model_args["depth"] == 1
