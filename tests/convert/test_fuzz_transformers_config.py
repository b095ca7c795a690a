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
