"""DINOv3 out of PyTorch: torch.export, ONNX and TorchScript with equal outputs, no op mobile exporters refuse, and coremltools.

The rotary position is built from ops every exporter takes (sin, cos, cat, index, multiply): no
``tensor_split`` (coremltools #2226, timm #2594), no ``split``/``chunk`` and no complex numbers. A walk
over the exported graph proves it for ours, and finds the ``split`` in timm's ``Eva`` (whose rotary
application chunks the sines and cosines apart), so the walk is shown to catch what it looks for.

coremltools converts the exported program of ours with a dynamic batch and dynamic height and width;
timm's ``Eva`` converts at a fixed shape but not with a dynamic batch, where coremltools refuses its
``split`` (measured with coremltools 9.0; its Core ML runtime exists only on macOS, so here the
converted model is checked by its specification, not run).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import coremltools as ct
import onnxruntime
import pytest
import timm
import torch
from torch import nn
from torch.export import Dim, ExportedProgram

from timm_vitscratch import VisionTransformer  # importing registers the zoo

pytestmark = pytest.mark.slow  # torch.export, ONNX and coremltools conversions

# the registered variants' structure at test size: 2 blocks of width 64, head width 32, 4x4 patches of 16
SMALL: dict[str, Any] = dict(img_size=64, embed_dim=64, depth=2, num_heads=2)
#: the GELU MLP without biases on qkv, and SwiGLU with Eva's q/v biases
FAMILY = ["scratch_dinov3_s16", "scratch_dinov3_s16_plus_qkvb"]
PATCH = 16
#: what mobile exporters refuse, by aten op name: coremltools has no ``tensor_split`` in its TorchScript
#: frontend and no ``split`` whose sizes depend on a dynamic dimension; none takes complex tensors
REFUSED_OPS = ("tensor_split", "split", "chunk", "complex", "view_as_real", "polar")
logging.getLogger("coremltools").setLevel(logging.ERROR)  # it warns that it never tested this torch release


def _close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, expected, rtol=0, atol=atol)


def _model(name: str) -> nn.Module:
    return timm.create_model(name, **SMALL).eval()


def _dynamic_shapes(size: bool = True) -> tuple[dict[int, Dim], ...]:
    """A dynamic batch and, with ``size``, heights and widths of 2 to 16 patches."""
    shapes = {0: Dim("batch", min=1, max=32)}
    if size:
        shapes |= {2: PATCH * Dim("rows", min=2, max=16), 3: PATCH * Dim("cols", min=2, max=16)}
    return (shapes,)


def _export(model: nn.Module, size: bool = True) -> ExportedProgram:
    return torch.export.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes=_dynamic_shapes(size))


def refused_ops(program: ExportedProgram) -> list[str]:
    """The nodes of ``program`` (as exported, and decomposed to the core aten set) that mobile exporters refuse."""
    found = []
    for graph in (program.graph, program.run_decompositions({}).graph):
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            value = node.meta.get("val")
            complex_value = isinstance(value, torch.Tensor) and value.dtype.is_complex
            if complex_value or any(word in str(node.target) for word in REFUSED_OPS):
                found.append(str(node.target))
    return found


@pytest.fixture(scope="module", params=FAMILY)
def exported(request: pytest.FixtureRequest) -> Iterator[tuple[nn.Module, ExportedProgram]]:
    model = _model(request.param)
    yield model, _export(model)


def test_torch_export_with_dynamic_batch_height_and_width_equals_eager(
    exported: tuple[nn.Module, ExportedProgram],
) -> None:
    model, program = exported
    for shape in ((1, 3, 64, 64), (5, 3, 64, 64), (2, 3, 48, 80), (3, 3, 96, 32)):
        x = torch.randn(shape)
        with torch.no_grad():
            _close(program.module()(x), model(x))


def test_torch_export_of_a_fixed_size_model_with_a_dynamic_batch() -> None:
    """``dynamic_img_size=False``: the grid is fixed, only the batch varies."""
    model = timm.create_model(FAMILY[0], dynamic_img_size=False, **SMALL).eval()
    program = _export(model, size=False)
    for batch in (1, 7):
        x = torch.randn(batch, 3, 64, 64)
        with torch.no_grad():
            _close(program.module()(x), model(x))


def test_the_exported_graph_holds_no_op_mobile_exporters_refuse(exported: tuple[nn.Module, ExportedProgram]) -> None:
    assert refused_ops(exported[1]) == []


def test_the_op_walk_finds_the_split_in_timms_eva() -> None:
    """timm's ``Eva`` chunks its rotary terms into sines and cosines, and each query and key into halves:
    four ``chunk`` a block as exported, four ``split`` once decomposed."""
    found = Counter(refused_ops(_export(_model("vit_small_patch16_dinov3"))))
    assert found == {"aten.chunk.default": 4 * SMALL["depth"], "aten.split.Tensor": 4 * SMALL["depth"]}


@pytest.mark.parametrize("name", FAMILY)
def test_jit_script_equals_eager_at_two_sizes(name: str) -> None:
    model = _model(name)
    scripted = torch.jit.script(model)
    for shape in ((2, 3, 64, 64), (1, 3, 48, 80)):
        x = torch.randn(shape)
        with torch.no_grad():
            _close(scripted(x), model(x))


def test_jit_script_refuses_patch_dropout_with_rotary_position_in_one_line() -> None:
    """Keeping each kept patch's rotary terms takes an eager-only path: scripted, training says so."""
    scripted = torch.jit.script(timm.create_model(FAMILY[0], patch_drop_rate=0.5, **SMALL).train())
    with pytest.raises(torch.jit.Error, match="patch dropout with rotary position trains only unscripted"):
        scripted(torch.randn(2, 3, 64, 64))


@pytest.mark.parametrize("name", FAMILY)
def test_onnx_with_dynamic_batch_height_and_width_runs_in_onnxruntime(name: str, tmp_path: Path) -> None:
    model = _model(name)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(
        model,
        (torch.randn(2, 3, 64, 64),),
        str(path),
        dynamo=True,
        input_names=["x"],
        output_names=["features"],
        dynamic_shapes=_dynamic_shapes(),
        verbose=False,
    )
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 64, 64), (3, 3, 48, 80)):
        x = torch.randn(shape)
        (features,) = session.run(["features"], {"x": x.numpy()})
        with torch.no_grad():
            _close(torch.from_numpy(features), model(x), atol=1e-4)


def _core_ml(program: ExportedProgram) -> ct.models.MLModel:
    # skip_model_load: the Core ML runtime that would load the model for prediction is macOS-only
    return ct.convert(program.run_decompositions({}), convert_to="mlprogram", skip_model_load=True)


def test_coremltools_converts_ours_with_dynamic_batch_height_and_width(
    exported: tuple[nn.Module, ExportedProgram],
) -> None:
    spec = _core_ml(exported[1]).get_spec()
    (image,) = spec.description.input
    ranges = [(r.lowerBound, r.upperBound) for r in image.type.multiArrayType.shapeRange.sizeRanges]
    assert ranges[1:] == [(3, 3), (2 * PATCH, 16 * PATCH), (2 * PATCH, 16 * PATCH)] and ranges[0][1] == 32
    operations = {
        op.type for block in spec.mlProgram.functions["main"].block_specializations.values() for op in block.operations
    }
    assert {"conv", "sin", "cos"} <= operations  # the rotary terms are computed in the model, for any grid


def test_coremltools_converts_timms_eva_at_a_fixed_shape() -> None:
    """timm's ``Eva`` converts where its splits have constant sizes: recorded, so the comparison below is fair."""
    model = _model("vit_small_patch16_dinov3")
    program = torch.export.export(model, (torch.randn(1, 3, 64, 64),))
    assert _core_ml(program).get_spec().description.input[0].name == "x"


def test_coremltools_refuses_timms_eva_with_a_dynamic_batch() -> None:
    """The split of timm's rotary terms has no constant sizes once the batch is dynamic: coremltools refuses it.

    This records timm 1.0.31 with coremltools 9.0; if either changes so that this converts, this test
    fails and docs/dinov3.md's export section must say so."""
    program = _export(_model("vit_small_patch16_dinov3"), size=False)
    with pytest.raises(ValueError, match="split_sizes must be const at compile time"):
        _core_ml(program)


def test_evas_separate_biases_start_at_zero() -> None:
    """``init_weights`` zeroes ``q_bias``/``v_bias`` and the key bias, as timm's ``Eva`` starts them: a model
    given storage after ``meta`` would otherwise hold stale memory there (NaN outputs in the tests above)."""
    model = _model("scratch_dinov3_s16_qkvb")
    assert isinstance(model, VisionTransformer)
    attn: Any = model.blocks[0].attn
    with torch.no_grad():
        for bias in (attn.q_bias, attn.k_bias, attn.v_bias):
            bias.fill_(float("nan"))
    model.init_weights()
    assert all(torch.equal(b, torch.zeros_like(b)) for b in (attn.q_bias, attn.k_bias, attn.v_bias))
    assert torch.isfinite(model(torch.randn(1, 3, 64, 64))).all()
