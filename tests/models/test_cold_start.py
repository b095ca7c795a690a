"""Fast cold start: pretrained models are built on ``meta`` and take the checkpoint's tensors.

Every test compares against a model built and loaded the ordinary way (or against timm's own
ViT loading the same file), checks that nothing is left on ``meta``, and that what the
checkpoint did not provide is initialised like a fresh model.
"""

import hashlib
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed

from tests.support import TINY, tiny
from timm_vitscratch import VisionTransformer, weight_sources
from timm_vitscratch.model_dir import model_config, write_config
from timm_vitscratch.models import pretrained
from timm_vitscratch.models.layers import sincos_2d_pos_embed


def _no_meta(model: torch.nn.Module) -> None:
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    assert not left, f"still on meta: {left}"


def _save(model: torch.nn.Module, path: Path) -> Path:
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _from_file(path: Path, name: str = "scratch_vit_ti16", **kwargs) -> torch.nn.Module:
    return timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **{**TINY, **kwargs})


@pytest.fixture
def source(tmp_path):
    """A tiny trained-looking model (non-default weights everywhere) and its safetensors file."""
    model = tiny()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model.eval(), _save(model, tmp_path / "tiny.safetensors")


def test_pretrained_from_file_equals_normal_load_and_timm(source):
    reference, path = source
    fast = _from_file(path).eval()
    _no_meta(fast)
    normal = tiny().eval()
    normal.load_state_dict(reference.state_dict())
    # timm's own ViT through timm's own loading path, same file
    timm_vit = timm.create_model(
        "vit_tiny_patch16_224", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **TINY
    ).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(fast(x), normal(x))
        assert (fast(x) - timm_vit(x)).abs().max() <= 1e-5
    for name, tensor in fast.state_dict().items():
        assert torch.equal(tensor, reference.state_dict()[name]), name


def test_pretrained_takes_the_fast_path(source, monkeypatch):
    """The weights are never initialised before being replaced: no init call touches real storage."""
    _, path = source
    calls = []
    original = VisionTransformer.materialize

    def spy(self, device=None):
        done = original(self, device)
        calls.append(done)
        return done

    monkeypatch.setattr(VisionTransformer, "materialize", spy)
    _from_file(path)
    assert calls == [[]]  # materialised after the load, and there was nothing left to initialise


def test_new_head_is_initialised_not_left_on_meta(source):
    reference, path = source
    model = _from_file(path, num_classes=10)
    _no_meta(model)
    assert model.head.weight.shape == (10, 64)
    assert model.head.weight.requires_grad and isinstance(model.head.weight, torch.nn.Parameter)
    assert 0.01 < model.head.weight.std().item() < 0.03 and torch.all(model.head.bias == 0)
    for name, tensor in model.state_dict().items():
        if not name.startswith("head."):
            assert torch.equal(tensor, reference.state_dict()[name]), name
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_distilled_new_heads_both_initialised(tmp_path):
    source = tiny("scratch_deit_ti16_distilled")
    path = _save(source, tmp_path / "deit.safetensors")
    model = _from_file(path, "scratch_deit_ti16_distilled", num_classes=4)
    _no_meta(model)
    assert model.head.weight.shape == model.head_dist.weight.shape == (4, 64)
    assert torch.equal(model.dist_token, source.dist_token)


def test_img_size_change_resamples_pos_embed_like_timm(source):
    reference, path = source
    model = _from_file(path, img_size=48)
    _no_meta(model)
    expected = resample_abs_pos_embed(reference.pos_embed.detach(), new_size=[6, 6], num_prefix_tokens=1)
    assert torch.allclose(model.pos_embed, expected)
    timm_vit = timm.create_model(
        "vit_tiny_patch16_224", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **{**TINY, "img_size": 48}
    ).eval()
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        assert (model.eval()(x) - timm_vit(x)).abs().max() <= 1e-5


def test_in_chans_change_adapts_the_stem(source):
    reference, path = source
    model = _from_file(path, in_chans=1)
    _no_meta(model)
    assert torch.allclose(model.patch_embed.proj.weight, reference.patch_embed.proj.weight.sum(1, keepdim=True))


def test_sincos_table_is_recomputed(tmp_path):
    source = tiny(pos_embed="sincos")
    path = _save(source, tmp_path / "sincos.safetensors")
    model = _from_file(path, pos_embed="sincos").eval()
    _no_meta(model)
    assert torch.equal(model.pos_embed, sincos_2d_pos_embed((4, 4), 64, 1))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), source.eval()(x))


def test_half_precision_checkpoint_loads_as_float32(source, tmp_path):
    reference, _ = source
    path = tmp_path / "half.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in reference.state_dict().items()}, str(path))
    model = _from_file(path)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert torch.equal(model.pos_embed, reference.pos_embed.to(torch.bfloat16).float())


def test_training_a_fast_loaded_model_leaves_the_file_alone(source):
    _, path = source
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    model = _from_file(path).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_in_memory_state_dict_is_copied_not_aliased(source):
    reference, _ = source
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    model = timm.create_model(
        "scratch_vit_ti16", pretrained=True, pretrained_cfg_overlay=dict(state_dict=state), **TINY
    )
    with torch.no_grad():
        model.cls_token.add_(1.0)
    assert torch.equal(state["cls_token"], reference.cls_token.detach())


def test_local_dir_and_hf_hub_names_load_fast(source, tmp_path, monkeypatch):
    reference, path = source
    directory = tmp_path / "model_dir"
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(path.read_bytes())
    write_config(directory, model_config(reference))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(x)
    local = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    _no_meta(local)
    # hf-hub: timm's real Hub code path, with the download answered from the local directory
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    import timm.models._hub as timm_hub

    def download(repo_id, filename, **_):
        assert repo_id == "someone/tiny"
        return str(directory / filename)

    def fetch(repo_id, revision, cache_dir):  # the package's checked fetch, answered as if it had downloaded
        assert (repo_id, revision) == ("someone/tiny", None)
        return "0" * 40

    monkeypatch.setattr(timm_hub, "hf_hub_download", download)
    monkeypatch.setattr(pretrained, "_hub_weights_fetcher", [fetch])
    monkeypatch.setattr(weight_sources, "unreachable", lambda source: None)  # the Hub answers the first, short request
    hub = timm.create_model("hf-hub:someone/tiny", pretrained=True).eval()
    _no_meta(hub)
    assert hub.pretrained_cfg["hf_hub_id"] == "someone/tiny"
    with torch.no_grad():
        assert torch.equal(local(x), expected) and torch.equal(hub(x), expected)


def test_meta_model_load_state_dict_assigns_and_initialises_the_rest():
    source = tiny(num_classes=5)
    with torch.device("meta"):
        model = timm.create_model("scratch_vit_ti16", num_classes=5, **TINY)
    assert model.has_meta_tensors()
    state = {k: v for k, v in source.state_dict().items() if not k.startswith("head.")}
    result = model.load_state_dict(state, strict=False)
    assert sorted(result.missing_keys) == ["head.bias", "head.weight"]
    _no_meta(model)
    assert torch.all(model.head.bias == 0)


def test_meta_default_device_keeps_models_on_meta():
    with torch.device("meta"):
        model = timm.create_model("scratch_vit_h14")
    assert all(p.is_meta for p in model.parameters())


def test_pretrained_honours_timms_device_and_dtype_arguments(source):
    """timm's factory arguments on the fast path: tensors cast on load, new head made in that dtype."""
    reference, path = source
    model = _from_file(path, num_classes=3, device="cpu", dtype=torch.bfloat16)
    _no_meta(model)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert torch.equal(model.blocks[0].attn.qkv.weight, reference.blocks[0].attn.qkv.weight.to(torch.bfloat16))
    assert torch.all(model.head.bias == 0) and model.head.weight.std() > 0
