"""Packed attention's kernels (models/packed_kernels.py): each equals the padded path for every family with NaFlex
batches, in inference and training, eager and compiled; the choice by device, dtype and what is installed."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace
from typing import Any, cast

import pytest
import timm
import torch
import torch.nn.functional as F

from tests.support.dinov3_pairs import perturbed
from tests.support.naflex_batches import images, naflex_batch
from timm_vitscratch.models import packed_kernels
from timm_vitscratch.models.packed_kernels import attend_with, choose, offsets
from timm_vitscratch.models.packing import segment_attention, segments_of
from timm_vitscratch.models.vision_transformer import VisionTransformer

#: family -> (a row, tiny options): learned table, rotary by halves (DINOv3), axial rotary with separate q/k/v
#: projections (EVA02), and SigLIP 2's NaFlex embedding with the MAP head
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "vit": ("scratch_vit_ti16", dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)),
    "dinov3": ("scratch_dinov3_s16_plus_qkvb", dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)),
    "eva02": ("scratch_eva02_t14", dict(depth=2, embed_dim=96, num_heads=4)),
    "siglip2": ("scratch_siglip2_b16_naflex", dict(embed_dim=64, depth=2, num_heads=2)),
}
#: images' patch grids: mixed sizes and aspect ratios, two of one length (one batched call in the segments kernel)
GRIDS = ((4, 4), (2, 5), (6, 3), (1, 8), (5, 2), (1, 1), (5, 6))
TOLERANCE = 1e-5  # the packed-versus-padded parity tests' (tests/models/test_naflex_packed.py)


def _model(family: str) -> VisionTransformer:
    name, options = FAMILIES[family]
    return cast(VisionTransformer, perturbed(timm.create_model(name, num_classes=5, **options)))


def _batch(model: VisionTransformer) -> dict[str, torch.Tensor]:
    patch = model.patch_embed.patch_size[0]
    return naflex_batch(images([(h * patch, w * patch) for h, w in GRIDS]), patch_size=patch, max_seq_len=48)


def _outputs(model: VisionTransformer, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        return model(batch), model.forward_features(cast(Any, batch))["patches"]


@pytest.mark.parametrize("kernel", ["segments", "flex"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("training", [False, True])
def test_each_kernel_equals_the_padded_path(family: str, kernel: str, training: bool) -> None:
    """Logits and features (zeros at padding in both); in train mode (no dropout in these models) as well."""
    model = _model(family).train(training)
    batch = _batch(model)
    model.set_naflex_packed(False)
    padded, padded_features = _outputs(model, batch)
    model.set_naflex_packed(True)
    model.set_packed_attention(kernel)
    packed, packed_features = _outputs(model, batch)
    print(
        f"{family} {kernel} {'train' if training else 'eval'}: max |packed - padded| {(packed - padded).abs().max():.2e}"
    )
    assert (packed - padded).abs().max() <= TOLERANCE
    assert (packed_features - padded_features).abs().max() <= TOLERANCE


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradients_equal_the_padded_paths(family: str) -> None:
    """Training with ``'auto'`` (FlexAttention has no backward on CPU: the segments kernel runs)."""
    model = _model(family).train()
    batch = _batch(model)
    labels = torch.arange(len(GRIDS)) % 5
    grads = []
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        model.set_naflex_packed(packed)
        F.cross_entropy(model(batch), labels).backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    worst = max((grads[1][name] - grad).abs().max().item() for name, grad in grads[0].items())
    print(f"{family}: max |gradient packed - padded| {worst:.2e}")
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        assert torch.allclose(grads[1][name], grad, atol=TOLERANCE, rtol=1e-4), name


def test_a_forced_kernel_that_cannot_run_is_refused_in_one_line() -> None:
    model = _model("vit").train()
    model.set_packed_attention("flex")
    with pytest.raises(RuntimeError, match=r"'flex' does not run on cpu torch\.float32 with gradients"):
        model(_batch(model))
    model.set_packed_attention("varlen")
    with torch.no_grad(), pytest.raises(RuntimeError, match="'varlen' does not run on cpu"):
        model(_batch(model))
    with pytest.raises(ValueError, match="packed attention must be one of"):
        model.set_packed_attention("nested")


@pytest.mark.slow  # torch.compile
@pytest.mark.parametrize("family", ["vit", "eva02"])
def test_compiled_model_with_each_kernel_equals_the_padded_path(family: str) -> None:
    torch._dynamo.reset()
    model = _model(family)
    batch = _batch(model)
    model.set_naflex_packed(False)
    padded, _ = _outputs(model, batch)
    model.set_naflex_packed(True)
    compiled = torch.compile(model, backend="aot_eager")
    for kernel in ("segments", "flex"):
        model.set_packed_attention(kernel)
        with torch.no_grad():
            got = compiled(batch)
        print(f"{family} compiled {kernel}: max |packed - padded| {(got - padded).abs().max():.2e}")
        assert (got - padded).abs().max() <= TOLERANCE


@pytest.mark.slow  # torch.compile
def test_compiled_training_gradients_equal_the_padded_paths() -> None:
    """A rotary family trained through the compiled model (``'auto'``: the segments kernel on CPU)."""
    torch._dynamo.reset()
    model = _model("eva02").train()
    batch = _batch(model)
    labels = torch.arange(len(GRIDS)) % 5
    model.set_naflex_packed(False)
    F.cross_entropy(model(batch), labels).backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    model.set_naflex_packed(True)
    F.cross_entropy(torch.compile(model, backend="aot_eager")(batch), labels).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and torch.allclose(param.grad, expected[name], atol=TOLERANCE, rtol=1e-4), name


def test_eager_attention_masks_and_dropout_take_the_segments_kernel_and_hooks_see_the_matrix() -> None:
    """Whatever was asked for: ``attn_drop`` of the eager attention fires with each image's matrix."""
    model = _model("vit")
    model.set_attn_impl("eager")
    model.set_packed_attention("flex")
    seen = []
    block = cast(Any, model.blocks[0])
    block.attn.attn_drop.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    with torch.no_grad():
        model(_batch(model))
    assert sorted(shape[-1] for shape in seen) == sorted({1 + h * w for h, w in GRIDS})  # class token + patches
    q = torch.zeros(1, 2, 4, 8)
    plain = segments_of([3, 1])
    assert choose("flex", q, plain, fused=True, needs_grad=False) == "flex"
    assert choose("flex", q, plain, fused=False, needs_grad=False) == "segments"  # eager, or dropout in training
    masked = segments_of([3, 1], [torch.ones(1, 1, 3, 3, dtype=torch.bool), torch.ones(1, 1, 1, 1, dtype=torch.bool)])
    assert choose("flex", q, masked, fused=True, needs_grad=False) == "segments"


def test_attention_dropout_in_training_takes_the_segments_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    name, options = FAMILIES["vit"]
    model = cast(VisionTransformer, timm.create_model(name, num_classes=5, attn_drop_rate=0.1, **options))
    model.set_packed_attention("flex")
    one_call: list[str] = []
    original = packed_kernels.attend_with

    def counting(kernel: str, *args: Any) -> torch.Tensor:
        one_call.append(kernel)
        return original(kernel, *args)

    monkeypatch.setattr(packed_kernels, "attend_with", counting)
    with torch.no_grad():
        model.train()(_batch(model))
        assert one_call == []
        model.eval()(_batch(model))  # no dropout in eval: FlexAttention
    assert one_call == ["flex", "flex"]


def _fake(device: str, dtype: torch.dtype) -> Any:
    """What ``choose`` reads of the queries, for a device this machine may not have."""
    return SimpleNamespace(is_cuda=device == "cuda", dtype=dtype, device=torch.device(device))


@pytest.mark.parametrize(
    ("device", "dtype", "installed", "needs_grad", "expected"),
    [
        ("cpu", torch.float32, {"varlen", "flash", "flex"}, False, "segments"),
        ("cpu", torch.bfloat16, {"varlen", "flash", "flex"}, True, "segments"),
        ("cuda", torch.bfloat16, {"varlen", "flash", "flex"}, True, "varlen"),
        ("cuda", torch.float16, {"flash", "flex"}, True, "flash"),
        ("cuda", torch.bfloat16, {"flex"}, True, "flex"),
        ("cuda", torch.float32, {"varlen", "flash", "flex"}, True, "flex"),
        ("cuda", torch.float32, set(), False, "segments"),
    ],
)
def test_auto_chooses_by_device_dtype_and_what_is_installed(
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    dtype: torch.dtype,
    installed: set[str],
    needs_grad: bool,
    expected: str,
) -> None:
    monkeypatch.setattr(packed_kernels, "_varlen", lambda: object() if "varlen" in installed else None)
    monkeypatch.setattr(packed_kernels, "_flash", lambda: object() if "flash" in installed else None)
    monkeypatch.setattr(packed_kernels, "_flex", lambda: (object(), object()) if "flex" in installed else None)
    q = _fake(device, dtype)
    assert choose("auto", q, segments_of([4, 2]), fused=True, needs_grad=needs_grad) == expected
    for kernel in ("varlen", "flash"):  # forced: runs where it can, refused elsewhere
        if kernel in installed and device == "cuda" and dtype != torch.float32:
            assert choose(kernel, q, segments_of([4, 2]), fused=True, needs_grad=needs_grad) == kernel
        else:
            with pytest.raises(RuntimeError, match=f"'{kernel}' does not run on {device}"):
                choose(kernel, q, segments_of([4, 2]), fused=True, needs_grad=needs_grad)


def test_cumulative_lengths_are_built_once_per_segments() -> None:
    segments = segments_of([5, 3, 3, 1])
    cumulative, longest = offsets(segments, torch.device("cpu"))
    assert cumulative.dtype == torch.int32 and cumulative.tolist() == [0, 5, 8, 11, 12] and longest == 5
    assert offsets(segments, torch.device("cpu"))[0] is cumulative


def _varlen_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_q: torch.Tensor,
    cu_k: torch.Tensor,
    max_q: int,
    max_k: int,
    **scale: float,
) -> torch.Tensor:
    """flash-style varlen attention on (tokens, heads, head_dim) tensors, written out per sequence (``scale`` as
    varlen_attn names it, or flash-attn's ``softmax_scale``)."""
    assert q.shape[1:] == k.shape[1:] and cu_q is cu_k and max_q == max_k == int((cu_q[1:] - cu_q[:-1]).max())
    (factor,) = scale.values()
    outs = [
        F.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), scale=factor
        ).transpose(0, 1)
        for a, b in pairwise(cu_q.tolist())
    ]
    return torch.cat(outs)


@pytest.mark.parametrize("kernel", ["varlen", "flash"])
def test_the_varlen_kernels_get_token_major_views_and_the_cumulative_lengths(
    monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """The CUDA kernels' calling convention, with a stand-in that computes what they compute."""
    monkeypatch.setattr(packed_kernels, "_varlen" if kernel == "varlen" else "_flash", lambda: _varlen_reference)
    lengths = [6, 4, 4, 1]
    qkv = torch.randn(1, sum(lengths), 3, 2, 8).permute(2, 0, 3, 1, 4)  # the attention's own (1, heads, L, d) views
    q, k, v = qkv.unbind(0)
    segments = segments_of(lengths)
    expected = segment_attention(q, k, v, segments, lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v))
    got = attend_with(kernel, q, k, v, segments, 8**-0.5)
    assert got.shape == expected.shape and (got - expected).abs().max() <= 1e-6


def test_the_block_mask_is_built_once_per_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("vit")
    model.set_packed_attention("flex")
    flex = packed_kernels._flex()
    assert flex is not None
    calls = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[3])
        return flex[1](*args, **kwargs)

    monkeypatch.setattr(packed_kernels, "_flex", lambda: (flex[0], counting))
    batch = _batch(model)
    with torch.no_grad():
        model(batch)
        model(batch)
    real = int(batch["patch_valid"].sum()) + len(GRIDS)
    assert calls == [real, real]  # one per forward, for both blocks
