"""docs/make_attention_example.py is deterministic: two renders are the same bytes, with no software version."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # renders the example picture twice

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("make_attention_example", ROOT / "docs" / "make_attention_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_renders_are_byte_identical_and_carry_no_version(tmp_path):
    script = _script()
    scene = tmp_path / "example_scene.png"
    script.draw_scene(scene)
    first, second = script.render_example(scene), script.render_example(scene)
    assert first == second and first.startswith(b"\x89PNG")
    assert b"Matplotlib" not in first and b"Software" not in first


def test_the_model_weights_do_not_depend_on_the_models_own_init():
    """Weights drawn by the script: the same tensors whatever the global RNG state or the init code does."""
    import torch

    script = _script()
    torch.manual_seed(1)
    a = script.random_model().state_dict()
    torch.manual_seed(2)
    b = script.random_model().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
