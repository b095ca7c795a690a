"""Scripting and export: torch.jit.script, torch.export (dynamic batch, dynamic H and W), ONNX in onnxruntime.

Also the ``--torchscript`` paths of timm's scripts, call for call: validate.py and benchmark.py create
the model with ``scriptable=True``, move it, then ``torch.jit.script`` it; train.py scripts the model
in training mode and builds its optimizer on the scripted module.
"""

from __future__ import annotations

import onnxruntime
import pytest
import timm
import torch
from timm.data import resolve_input_data_config
from timm.models import resolve_model_input_args
from timm.optim import create_optimizer_v2

import tests.support.option_models  # noqa: F401  (registers the scratch_test_* models)
from tests.support import tiny

pytestmark = pytest.mark.slow  # ONNX, torch.export and TorchScript, with timm's scripts

# width 64, 2 blocks, 64x64 images: the registered variant's own structure, at test size
SMALL = dict(img_size=64, embed_dim=64, depth=2, num_heads=2)
SCRIPTED = {
    "plain": ("scratch_vit_ti16", {}),
    "distilled": ("scratch_deit_ti16_distilled", {}),
    "dinov2_reg": ("scratch_test_dinov2_reg", {}),
    "map_pool": ("scratch_test_map_pool", {}),
}


def _close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("case", list(SCRIPTED))
def test_jit_script_matches_eager(case):
    name, kwargs = SCRIPTED[case]
    model = timm.create_model(name, scriptable=True, **{**SMALL, **kwargs}).eval()
    scripted = torch.jit.script(model)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        _close(scripted(x), model(x))
        features = model.forward_features(x)
        _close(scripted.forward_head(scripted.forward_features(x)), model.forward_head(features))


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_dinov3_s16_qkvb"])
def test_jit_trace_with_autograd_on_passes_its_own_check(name):
    # torch.jit.trace re-runs the model and compares graphs: a branch on torch.is_grad_enabled() would
    # differ between the two (attention splits q/k/v one way for autograd, another without); tracing takes one
    model = timm.create_model(name, img_size=32, patch_size=8, depth=2).eval()
    x = torch.randn(2, 3, 32, 32)
    traced = torch.jit.trace(model, x, check_trace=True)
    with torch.no_grad():
        assert torch.allclose(traced(x), model(x), atol=1e-6)


def test_jit_script_dynamic_img_size_at_another_size():
    model = tiny(dynamic_img_size=True).eval()
    scripted = torch.jit.script(model)
    x = torch.randn(1, 3, 40, 56)  # 5x7 patches of 8, the table is resampled from 4x4
    with torch.no_grad():
        _close(scripted(x), model(x))


def test_jit_script_of_a_distilled_model_in_training_returns_one_tensor():
    """train.py --torchscript without a teacher: the scripted model trains on plain logits."""
    model = tiny("scratch_deit_ti16_distilled", scriptable=True).train()
    scripted = torch.jit.script(model)
    out = scripted(torch.randn(2, 3, 32, 32))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 1000)


# --- the --torchscript paths of timm's scripts -------------------------------------------------
SCRIPT_VARIANTS = [
    "scratch_vit_ti16",
    "scratch_vit_b32",
    "scratch_vit_b16_in21k",
    "scratch_deit_ti16_distilled",
    "scratch_test_dinov2_reg",
]


@pytest.mark.parametrize("name", SCRIPT_VARIANTS)
def test_validate_py_torchscript_sequence(name):
    """validate.py --model NAME --img-size 64 --model-kwargs depth=2 ... --torchscript."""
    model_kwargs = {k: v for k, v in SMALL.items() if k != "img_size"}  # the size comes from --img-size
    args = dict(img_size=64, input_size=None, in_chans=None, crop_pct=None, mean=None, std=None, interpolation="")
    model = timm.create_model(
        **resolve_model_input_args(
            name, args, pretrained=False, num_classes=None, global_pool=None, scriptable=True, **model_kwargs
        )
    )
    model = model.to(device="cpu", dtype=None)
    data_config = resolve_input_data_config(model, args, use_test_size=True)
    scripted = torch.jit.script(model)
    scripted.eval()
    model.eval()
    x = torch.randn(2, *data_config["input_size"])
    assert data_config["input_size"] == (3, 64, 64)
    with torch.no_grad():
        _close(scripted(x), model(x))


@pytest.mark.parametrize("name", SCRIPT_VARIANTS)
def test_benchmark_py_torchscript_sequence(name):
    """benchmark.py --model NAME --torchscript: its create_model arguments (None ones are dropped by timm)."""
    model = timm.create_model(
        name,
        num_classes=None,
        in_chans=3,
        global_pool=None,
        scriptable=True,
        drop_rate=0.0,
        drop_path_rate=None,
        drop_block_rate=None,
        **SMALL,
    )
    model.to(device="cpu", dtype=torch.float32)
    scripted = torch.jit.script(model)
    scripted.eval()
    model.eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        _close(scripted(x), model(x))


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_deit_ti16_distilled"])
def test_train_py_torchscript_sequence(name):
    """train.py --torchscript: scripted in training mode, optimizer on the scripted module, one step."""
    model = timm.create_model(name, num_classes=5, scriptable=True, drop_rate=0.1, drop_path_rate=0.1, **SMALL)
    model.to("cpu")
    scripted = torch.jit.script(model)
    optimizer = create_optimizer_v2(scripted, opt="sgd", lr=0.1, weight_decay=0.05)
    before = [p.detach().clone() for p in scripted.parameters()]
    out = scripted(torch.randn(2, 3, 64, 64))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 5)
    torch.nn.functional.cross_entropy(out, torch.tensor([0, 3])).backward()
    optimizer.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, scripted.parameters(), strict=False))


# --- torch.export ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_deit_ti16_distilled", "scratch_test_map_pool"])
def test_torch_export_dynamic_batch(name):
    model = timm.create_model(name, **SMALL).eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    exported = torch.export.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes=({0: batch},))
    for size in (1, 5):
        x = torch.randn(size, 3, 64, 64)
        with torch.no_grad():
            _close(exported.module()(x), model(x))


@pytest.mark.parametrize("name", ["scratch_vit_ti16", "scratch_test_dinov2_reg"])
def test_torch_export_dynamic_height_and_width(name):
    """dynamic_img_size=True: export once at 64x64, run at other sizes; the position table follows."""
    model = timm.create_model(name, dynamic_img_size=True, patch_size=8, **SMALL).eval()
    rows, cols = torch.export.Dim("rows", min=2, max=16), torch.export.Dim("cols", min=2, max=16)
    exported = torch.export.export(
        model,
        (torch.randn(2, 3, 64, 64),),
        dynamic_shapes=({0: torch.export.Dim("batch", max=32), 2: 8 * rows, 3: 8 * cols},),
    )
    for shape in ((2, 3, 48, 80), (3, 3, 96, 40)):
        x = torch.randn(shape)
        with torch.no_grad():
            _close(exported.module()(x), model(x))


# --- ONNX --------------------------------------------------------------------------------------
#: EVA02's and PE's layouts (axial rotary position, separate q/k/v, the MLP norm; the attention pool over every
#: token) too: timm's EVA02 ONNX files are reported not to load in other runtimes (burn-onnx #15)
ONNX_MODELS = [
    "scratch_vit_ti16",
    "scratch_deit_ti16_distilled",
    "scratch_test_dinov2_reg",
    "scratch_test_eva02_separate",
    "scratch_test_pe_core",
]


@pytest.mark.parametrize("name", ONNX_MODELS)
def test_onnx_dynamo_export_runs_in_onnxruntime(name, tmp_path):
    model = timm.create_model(name, **SMALL).eval()
    path = tmp_path / f"{name}.onnx"
    batch = torch.export.Dim("batch", min=1, max=32)
    torch.onnx.export(
        model,
        (torch.randn(2, 3, 64, 64),),
        str(path),
        dynamo=True,
        input_names=["x"],
        output_names=["logits"],
        dynamic_shapes=({0: batch},),
        verbose=False,
    )
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in (1, 3):
        x = torch.randn(size, 3, 64, 64)
        (logits,) = session.run(["logits"], {"x": x.numpy()})
        with torch.no_grad():
            _close(torch.from_numpy(logits), model(x), atol=1e-4)
