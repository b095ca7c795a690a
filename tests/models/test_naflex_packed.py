"""The packed NaFlex path: compute grows with real tokens, and it trains, checkpoints, compiles and exports."""

import random

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tests.support import TINY, tiny
from tests.support.naflex_batches import MIXED_SIZES, images, naflex_batch, timm_naflexvit

LONGEST = 30  # patches of the largest image in MIXED_SIZES (40x48 pixels at patch 8)


def _flops(model, batch) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(batch)
    return counter.get_total_flops()


@pytest.mark.slow  # FLOP counts of padded batches
@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_flops_do_not_grow_with_padding_and_timms_do(attn_impl):
    """FlopCounterMode counts the linear layers (and, for the eager attention, its matrix products; the CPU's
    SDPA kernel is not counted by it): ours at 4x the collated length are within 2% of 1x, timm's NaFlexVit grows."""
    model = tiny(num_classes=5, attn_impl=attn_impl).eval()
    reference = timm_naflexvit(model, num_classes=5, **TINY)
    if attn_impl == "eager":
        for block in reference.blocks:
            block.attn.fused_attn = False
    pictures = images(MIXED_SIZES)
    short, long = (naflex_batch(pictures, patch_size=8, max_seq_len=n) for n in (LONGEST, 4 * LONGEST))
    ours = _flops(model, long) / _flops(model, short)
    theirs = _flops(reference, long) / _flops(reference, short)
    print(f"FLOPs at 4x / 1x collated length ({attn_impl}): ours {ours:.4f}, timm NaFlexVit {theirs:.4f}")
    assert abs(ours - 1.0) <= 0.02
    assert theirs > 2.0


def _per_image_gradients(model, pictures, labels):
    """Every parameter's gradient of the summed per-image loss, each image through the model alone."""
    single = tiny(num_classes=5, dynamic_img_size=True).train()
    single.load_state_dict(model.state_dict())
    loss = sum(
        F.cross_entropy(single(picture[None]), label[None], reduction="sum")
        for picture, label in zip(pictures, labels, strict=False)
    )
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in single.named_parameters()}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_backward_equals_each_image_alone(checkpointing):
    model = tiny(num_classes=5).train()
    model.set_grad_checkpointing(checkpointing)
    pictures = images(MIXED_SIZES)
    labels = torch.arange(len(pictures)) % 5
    loss = F.cross_entropy(model(naflex_batch(pictures, patch_size=8, max_seq_len=64)), labels, reduction="sum")
    loss.backward()
    expected_loss, expected = _per_image_gradients(model, pictures, labels)
    assert abs(loss.item() - expected_loss.item()) <= 1e-4
    for name, param in model.named_parameters():
        assert torch.allclose(param.grad, expected[name], atol=1e-5, rtol=1e-4), name


def test_patch_dropout_keeps_each_images_share_and_trains():
    model = tiny(num_classes=5, patch_drop_rate=0.5, reg_tokens=1).train()
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=64)
    lengths = []
    model.blocks[0].register_forward_pre_hook(
        lambda m, args, kwargs: lengths.append(kwargs["segments"].lengths), with_kwargs=True
    )
    loss = model(batch).logsumexp(dim=1).sum()
    loss.backward()
    counts = batch["patch_valid"].sum(dim=1).tolist()
    # (the packed sequence holds the images longest first)
    assert sorted(lengths[0]) == sorted(2 + max(1, int(n * 0.5)) for n in counts)  # class + register token stay
    assert model.patch_embed.proj.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():  # no dropout in eval: every patch
        model(batch)
    assert lengths[-1] == sorted((2 + n for n in counts), reverse=True)


def _random_batches(count: int, seed: int = 0):
    rng = random.Random(seed)
    for index in range(count):
        sizes = [(8 * rng.randint(1, 7), 8 * rng.randint(1, 7)) for _ in range(rng.choice([3, 5, 6]))]
        yield naflex_batch(images(sizes, seed=index), patch_size=8, max_seq_len=rng.choice([48, 64, 96]))


@pytest.mark.slow  # torch.compile
def test_compile_recompiles_a_bounded_number_of_times_then_never():
    """Packing (data-dependent) and per-image attention run eagerly; the linear parts compile shape-generic.
    After the first batches made the token count and batch size symbolic, new image sizes, counts and
    collated lengths run the compiled code without compiling again."""
    torch._dynamo.reset()
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    model = tiny(num_classes=5).eval()
    compiled = torch.compile(model, backend=counting_backend)
    batches = list(_random_batches(10))
    with torch.no_grad():
        for batch in batches[:4]:
            assert torch.allclose(compiled(batch), model(batch), atol=1e-6)
        warm = len(graphs)
        for batch in batches[4:]:
            assert torch.allclose(compiled(batch), model(batch), atol=1e-6)
    print(f"graphs compiled: {warm} over the first 4 batches, {len(graphs) - warm} over the next 6")
    assert len(graphs) == warm


@pytest.mark.slow  # torch.compile
def test_compiled_training_step_with_inductor_matches_eager():
    torch._dynamo.reset()
    model = tiny(num_classes=5).train()
    twin = tiny(num_classes=5).train()
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(twin)
    for batch in _random_batches(2, seed=1):
        labels = torch.arange(batch["patches"].shape[0]) % 5
        for net in (model, compiled):
            F.cross_entropy(net(batch), labels).backward()
    for (name, param), twin_param in zip(model.named_parameters(), twin.parameters(), strict=False):
        assert torch.allclose(twin_param.grad, param.grad, atol=1e-5, rtol=1e-4), name


@pytest.mark.slow  # torch.export
def test_padded_path_exports_and_equals_the_packed_path():
    """torch.export (and so ONNX's exporter) takes timm's padded, masked layout with data-independent shapes."""
    model = tiny(num_classes=5, reg_tokens=2, global_pool="avg", fc_norm=True).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn_like(param))
    example = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=64)
    other = naflex_batch(images(MIXED_SIZES[::-1], seed=3), patch_size=8, max_seq_len=64)
    exported = torch.export.export(model, (example["patches"], example["patch_coord"], example["patch_valid"]))
    with torch.no_grad():
        packed = model(other)
        got = exported.module()(other["patches"], other["patch_coord"], other["patch_valid"])
        model.set_naflex_packed(False)  # the same padded path without exporting
        padded = model(other)
    assert (got - packed).abs().max() <= 1e-5
    assert (padded - packed).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(global_pool="map", class_token=False),
        dict(global_pool="max"),
        dict(pos_embed="sincos", global_pool="avgmax"),
        dict(name="scratch_deit_ti16_distilled"),
    ],
)
def test_padded_path_equals_packed_path(options):
    options = dict(options)
    model = tiny(options.pop("name", "scratch_vit_ti16"), num_classes=5, **options).eval()
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=80)
    with torch.no_grad():
        packed, packed_features = model(batch), model.forward_features(batch)["patches"]
        model.set_naflex_packed(False)
        padded, padded_features = model(batch), model.forward_features(batch)["patches"]
    assert (padded - packed).abs().max() <= 1e-5
    assert (padded_features - packed_features).abs().max() <= 1e-5  # zeros at padding in both


def test_resize_weights_are_torchs_antialiased_bicubic():
    """The padded path's per-position resampling weights equal F.interpolate(bicubic, antialias=True)."""
    from timm_vitscratch.models.position import resize_weights

    for in_size in (2, 4, 7, 14):
        for out_size in range(1, 40):
            basis = torch.eye(in_size).reshape(in_size, 1, 1, in_size)  # one row: (1, in) -> (1, out)
            expected = F.interpolate(basis, size=(1, out_size), mode="bicubic", antialias=True)[:, 0, 0, :].T
            positions = torch.arange(out_size)
            got = resize_weights(positions, torch.full_like(positions, out_size), in_size)
            assert (got - expected).abs().max() <= 2e-6, (in_size, out_size)  # torch computes them in float32


@pytest.mark.slow  # ONNX export, checked in onnxruntime
def test_onnx_export_runs_in_onnxruntime():
    import onnxruntime

    model = tiny(num_classes=5).eval()
    example = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=64)
    other = naflex_batch(images(MIXED_SIZES[::-1], seed=3), patch_size=8, max_seq_len=64)
    program = torch.onnx.export(
        model, (example["patches"], example["patch_coord"], example["patch_valid"]), dynamo=True, verbose=False
    )
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString())
    names = [i.name for i in session.get_inputs()]
    (got,) = session.run(
        None,
        dict(
            zip(
                names,
                (other["patches"].numpy(), other["patch_coord"].numpy(), other["patch_valid"].numpy()),
                strict=False,
            )
        ),
    )
    with torch.no_grad():
        assert abs(torch.from_numpy(got) - model(other)).max() <= 1e-5
