"""Fuzzing the transformers route's config.json: hostile values for the architecture fields and for fields no check
reads, converted with ``--verify`` (which builds transformers' own reference model).

Each case must convert (and the directory then checks out) or be refused with ConversionError naming the file,
never a VerificationError: a config that disagrees with its weights is refused before anything is built, and the
reference is built from the checked values only. Runs in the crash-isolated, memory-capped loader process
(``tests/support/loader_worker.py``); counts come from ``tests/support/fuzz_plan.py``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, check_outcome, fuzz_settings, offline_loader
from tests.support.sources import TINY_HF_VIT, randomized

pytestmark = pytest.mark.slow  # fuzz cases in crash-isolated child processes

HEADROOM = 1 << 30
TIMEOUT = 120.0
NAME = "transformers config.json fields (convert --verify)"
CONFIG = TINY_HF_VIT
FIELDS = [
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "image_size",
    "patch_size",
    "num_channels",
    "layer_norm_eps",
    "pooler_output_size",
    "num_labels",
    "id2label",
    "qkv_bias",
    "hidden_act",
    "quantization_config",
    "dtype",
    "attn_implementation",
    "model_type",
]
NUMBERS = st.sampled_from([0, 1, -1, 2, 3, 4, 8, 16, 32, 64, 65, 128, 1000, 10**9, 2**63, 0.5, 1e-6, 8.0, 1e308])
VALUES = st.none() | st.booleans() | NUMBERS | st.floats() | st.text(max_size=8) | st.lists(NUMBERS, max_size=3)
#: values a real config holds (so that both outcomes are exercised)
PLAUSIBLE = st.sampled_from(
    [
        ("num_hidden_layers", 2),
        ("num_attention_heads", 8),
        ("image_size", 16),
        ("patch_size", 8),
        ("layer_norm_eps", 1e-6),
        ("qkv_bias", True),
        ("hidden_act", "gelu"),
        ("id2label", {"0": "a", "1": "b", "2": "c"}),
        ("dtype", "float32"),
    ]
)


@pytest.fixture(scope="module")
def loader():
    with offline_loader(TIMEOUT, HEADROOM) as process:
        yield process


def test_transformers_config_fields(loader, tmp_path):
    import transformers

    source = tmp_path / "hf"
    model = randomized(lambda: transformers.ViTForImageClassification(transformers.ViTConfig(**CONFIG)))
    model.config.save_pretrained(source)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(source / "model.safetensors"))
    original = json.loads((source / "config.json").read_text())
    out = tmp_path / "out"

    @fuzz_settings(PLAN[NAME])
    @given(st.lists(PLAUSIBLE | st.tuples(st.sampled_from(FIELDS), VALUES), min_size=1, max_size=3))
    def case(edits):
        config = {**original, **dict(edits)}
        try:
            (source / "config.json").write_text(json.dumps(config, allow_nan=True))
        except ValueError:
            CASES[NAME]["unwritable"] += 1
            return
        shutil.rmtree(out, ignore_errors=True)
        result = loader.run("convert", source, out=str(out), verify=True)
        assert not result.get("type", "").endswith("VerificationError"), f"{edits}: {result['message']}"
        CASES[NAME][check_outcome(result, str(source), repr(edits))] += 1
        assert set(os.listdir(tmp_path)) <= {"hf", "out"}, f"{edits}: wrote {os.listdir(tmp_path)}"

    CASES[NAME].clear()
    case()
    assert sum(CASES[NAME].values()) == PLAN[NAME]
    assert CASES[NAME]["ok"] > 0 and CASES[NAME]["error"] > 0


# --- every transformers family's own fields: wrong types, out-of-range values, unicode --------------------------
#: family -> its config class's architecture fields, flags and names (those the checks read, and some they do not)
FAMILY_FIELDS = {
    "dinov3": [
        *("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "image_size"),
        *("patch_size", "num_channels", "layer_norm_eps", "num_register_tokens", "rope_theta", "hidden_act"),
        *("use_gated_mlp", "use_swiglu_ffn", "query_bias", "key_bias", "value_bias", "proj_bias", "mlp_bias"),
        *("layerscale_value", "model_type"),
    ],
    "dinov2": [
        *("num_hidden_layers", "hidden_size", "num_attention_heads", "mlp_ratio", "image_size", "patch_size"),
        *("num_channels", "layer_norm_eps", "hidden_act", "qkv_bias", "use_swiglu_ffn", "use_mask_token"),
        *("layerscale_value", "model_type"),
    ],
    "siglip": [
        *("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "image_size"),
        *("patch_size", "num_channels", "layer_norm_eps", "hidden_act", "vision_use_head", "model_type"),
    ],
    "siglip2": [
        *("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "num_patches"),
        *("patch_size", "num_channels", "layer_norm_eps", "hidden_act", "vision_use_head", "model_type"),
    ],
}
#: wrong types, out-of-range numbers and unicode (control and bidi characters, surrogates escaped by json)
HOSTILE = (
    VALUES
    | st.text(alphabet=st.characters(), max_size=12)
    | st.sampled_from(["\x1b[2J\x07", "\u202egelu", "gelu\x00", "𝔤𝔢𝔩𝔲", "", " gelu", "GELU", "silu"])
    | st.dictionaries(st.text(max_size=3), NUMBERS, max_size=2)
    | st.lists(st.lists(NUMBERS, max_size=2), max_size=2)
)


@pytest.mark.parametrize("family", list(FAMILY_FIELDS))
def test_each_familys_config_fields(loader, tmp_path, family):
    """DINOv3, DINOv2, SigLIP and SigLIP 2 configs with hostile field values: converted (and verified) or refused
    in our one error naming the file, never a traceback."""
    from tests.convert.test_transformers_config import family_dir

    name = f"transformers config.json fields, {family} (convert --verify)"
    source = family_dir(family, tmp_path / "hf")
    original = json.loads((source / "config.json").read_text())
    fields = FAMILY_FIELDS[family]
    plausible = st.sampled_from([(f, original[f]) for f in fields if f in original])
    out = tmp_path / "out"

    @fuzz_settings(PLAN[name])
    @given(st.lists(plausible | st.tuples(st.sampled_from(fields), HOSTILE), min_size=1, max_size=3))
    def case(edits):
        config = {**original, **dict(edits)}
        try:
            (source / "config.json").write_text(json.dumps(config, allow_nan=True))
        except ValueError:
            CASES[name]["unwritable"] += 1
            return
        shutil.rmtree(out, ignore_errors=True)
        result = loader.run("convert", source, out=str(out), verify=True)
        assert not result.get("type", "").endswith("VerificationError"), f"{edits}: {result['message']}"
        CASES[name][check_outcome(result, str(source), repr(edits))] += 1
        if result["outcome"] == "error":
            assert not any(c in result["message"] for c in "\x1b\x07\x00\u202e"), f"{edits}: {result['message']!r}"
            assert len(result["message"]) < 1000, f"{edits}: {len(result['message'])} characters"
        assert set(os.listdir(tmp_path)) <= {"hf", "out"}, f"{edits}: wrote {os.listdir(tmp_path)}"

    CASES[name].clear()
    case()
    assert sum(CASES[name].values()) == PLAN[name]
    assert CASES[name]["ok"] > 0 and CASES[name]["error"] > 0
