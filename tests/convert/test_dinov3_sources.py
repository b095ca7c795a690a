"""DINOv3 conversion, both ways, against each source library's own model.

Meta's original files are made here from a timm ``Eva`` by the inverse of the names (Meta's code is not a
package); transformers' ``DINOv3ViTModel`` and timm's ``Eva`` are the libraries' own classes, small, with random
weights. Each conversion runs ``--verify`` and is compared here too, at a square and a non-square size.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import nn

from timm_vitscratch.convert import ConversionError, convert, export
from timm_vitscratch.convert.formats import detect_format
from timm_vitscratch.layouts import StateDictCheckpoint
from timm_vitscratch.licenses import TRAVELLING

pytestmark = pytest.mark.slow  # each source converted and verified by its own library

TOL = 1e-5
SIZES = ((224, 224), (160, 256))  # square, and non-square (the rotary's coordinates are normalised per axis)
DEPTH = 2


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter drawn at random (norm scales and layer scales near 1, so that no block is an identity)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            near_one = param.dim() == 1 and (
                name.endswith(("norm1.weight", "norm2.weight", "norm.weight", "lambda1")) or "gamma" in name
            )
            param.copy_(1 + 0.1 * noise if near_one else 0.05 * noise)
            if name.endswith("k_proj.bias"):
                param.zero_()  # DINOv3's key bias is zero (masked in Meta's, absent in timm's)
    return model.eval()


def timm_dinov3(name: str, zero_biases: bool = False, **kwargs: object) -> nn.Module:
    model = randomize(timm.create_model(name, depth=DEPTH, **kwargs))
    if zero_biases:
        with torch.no_grad():
            for block in model.blocks:
                block.attn.q_bias.zero_()
                block.attn.v_bias.zero_()
    return model


def meta_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Meta's DINOv3 names for a timm Eva DINOv3 (the inverse of the map under test): storage tokens, ls1/ls2,
    w1/w2/w3, a fused qkv bias with its k mask (the k third random: the mask must zero it), rope periods."""
    width, heads = model.embed_dim, model.blocks[0].attn.num_heads
    swiglu = hasattr(model.blocks[0].mlp, "fc1_g")
    renames = [("reg_token", "storage_tokens"), ("gamma_1", "ls1.gamma"), ("gamma_2", "ls2.gamma")]
    if swiglu:
        renames += [("mlp.fc1_g", "mlp.w1"), ("mlp.fc1_x", "mlp.w2"), ("mlp.fc2", "mlp.w3")]
    out = {}
    for key, value in model.state_dict().items():
        if key.endswith(("attn.q_bias", "attn.v_bias")):
            continue
        for ours, theirs in renames:
            key = key.replace(ours, theirs)
        out[key] = value.clone()
    generator = torch.Generator().manual_seed(7)
    for i, block in enumerate(model.blocks):
        zero = torch.zeros(width)
        q = block.attn.q_bias.detach() if block.attn.q_bias is not None else zero
        v = block.attn.v_bias.detach() if block.attn.v_bias is not None else zero
        out[f"blocks.{i}.attn.qkv.bias"] = torch.cat([q, torch.randn(width, generator=generator), v])
        out[f"blocks.{i}.attn.qkv.bias_mask"] = torch.cat([torch.ones(width), torch.zeros(width), torch.ones(width)])
    head_dim = width // heads
    out["rope_embed.periods"] = 100.0 ** (4 * torch.arange(head_dim // 4, dtype=torch.float32) / head_dim)
    out["mask_token"] = torch.zeros(1, width)
    return out


def hf_dinov3(gated: bool, biases: bool = True, **kwargs: object) -> nn.Module:
    config = transformers.DINOv3ViTConfig(
        hidden_size=64,
        num_hidden_layers=DEPTH,
        num_attention_heads=4,
        intermediate_size=128,
        use_gated_mlp=gated,
        hidden_act="silu" if gated else "gelu",
        image_size=224,
        patch_size=16,
        query_bias=biases,
        value_bias=biases,
        **{"num_register_tokens": 4, **kwargs},
    )
    return randomize(transformers.DINOv3ViTModel(config))


def images(size: tuple[int, int], seed: int = 3) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(seed))


def ours_from(directory: Path) -> nn.Module:
    return timm.create_model(f"local-dir:{directory}", pretrained=True).eval()


@torch.no_grad()
def features_diff(a: nn.Module, b: nn.Module, size: tuple[int, int]) -> float:
    """max-abs-diff of forward_features (every token after the final norm) of two timm-style models."""
    x = images(size)
    return (a.forward_features(x) - b.forward_features(x)).abs().max().item()


@torch.no_grad()
def hf_diff(hf: nn.Module, ours: nn.Module, size: tuple[int, int]) -> float:
    """transformers' last_hidden_state (cls, registers, patches after the final norm) against our forward_features."""
    x = images(size)
    return (hf(pixel_values=x).last_hidden_state - ours.forward_features(x)).abs().max().item()


# --- Meta's original files ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("timm_name", "zero_biases", "expected"),
    [
        ("vit_small_patch16_dinov3", False, "scratch_dinov3_s16"),
        ("vit_small_plus_patch16_dinov3_qkvb", False, "scratch_dinov3_s16_plus_qkvb"),
        ("vit_small_plus_patch16_dinov3_qkvb", True, "scratch_dinov3_s16_plus"),  # zero q/v biases are dropped
    ],
)
def test_meta_checkpoint_converts_to_the_variant_and_equals_timm_eva(tmp_path, timm_name, zero_biases, expected):
    source = timm_dinov3(timm_name, zero_biases)
    torch.save(meta_state_dict(source), tmp_path / "dinov3.pth")
    result = convert(tmp_path / "dinov3.pth", tmp_path / "out", verify=True, strict=True)
    assert (result.source_format, result.detected, result.model_name) == ("meta_dinov3", True, expected)
    assert result.model_args == {"num_classes": 0, "depth": DEPTH}  # everything else is the variant's own
    assert result.verification.passed and result.verification.max_abs_diff <= TOL
    assert result.assumed == {}  # heads come from the rotary periods, the eps (1e-5) is every Meta DINOv3 ViT's
    ours = ours_from(tmp_path / "out")
    for size in SIZES:
        diff = features_diff(ours, source, size)
        print(f"meta -> ours ({expected}) {size[0]}x{size[1]}: forward_features max-abs-diff {diff:.2e}")
        assert diff <= TOL


def test_meta_conversion_and_its_exports_carry_the_dinov3_license_text(tmp_path):
    torch.save(meta_state_dict(timm_dinov3("vit_small_patch16_dinov3")), tmp_path / "dinov3.pth")
    convert(tmp_path / "dinov3.pth", tmp_path / "out")
    text = TRAVELLING["dinov3-license"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["pretrained_cfg"]["license"] == "dinov3-license"
    assert (tmp_path / "out" / text.file_name).read_bytes() == text.read()
    to_hf = export(tmp_path / "out", "transformers", tmp_path / "hf")
    assert to_hf.license_file == tmp_path / "hf" / text.file_name and to_hf.license_file.read_bytes() == text.read()
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == sorted(
        ["config.json", "model.safetensors", "preprocessor_config.json", text.file_name]
    )
    to_timm = export(tmp_path / "out", "timm", tmp_path / "eva.safetensors")
    assert to_timm.license_file == tmp_path / f"eva.safetensors.{text.file_name}"


def test_meta_checkpoint_with_training_only_parts_converts_and_loads_through_timm(tmp_path):
    """The 7B's local_cls_norm and EUPE's projectors are training-only: dropped. timm's loader reads the file too."""
    source = timm_dinov3("vit_small_patch16_dinov3")
    state = meta_state_dict(source)
    state.update({"local_cls_norm.weight": torch.ones(384), "projectors.0.weight": torch.randn(8, 384)})
    torch.save(state, tmp_path / "dinov3.pth")
    convert(tmp_path / "dinov3.pth", tmp_path / "out")
    loaded = timm.create_model(
        "scratch_dinov3_s16",
        depth=DEPTH,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(tmp_path / "dinov3.pth")),
    ).eval()
    assert features_diff(loaded, source, SIZES[1]) <= TOL


def test_meta_key_bias_that_the_mask_lets_through_is_refused(tmp_path):
    state = meta_state_dict(timm_dinov3("vit_small_patch16_dinov3"))
    state["blocks.1.attn.qkv.bias_mask"] = torch.ones(3 * 384)
    torch.save(state, tmp_path / "dinov3.pth")
    with pytest.raises(ConversionError, match=r"blocks\.1\.attn\.qkv\.bias.*non-zero key bias"):
        convert(tmp_path / "dinov3.pth", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_meta_bias_mask_is_applied_to_the_q_and_v_biases_and_verify_reads_it_too(tmp_path, monkeypatch):
    """Meta's attention computes with ``qkv.bias * bias_mask``: a mask that zeroes the q third (and part of the v
    third) gives a zero q bias and a masked v bias, and --verify's reference (timm's importer, which ignores the
    mask) is handed the masked biases, so a conversion that ignored the mask would be caught."""
    from timm_vitscratch.layouts import meta_dinov3

    source = timm_dinov3("vit_small_patch16_dinov3_qkvb")
    state = meta_state_dict(source)
    width = source.embed_dim
    for i in range(DEPTH):
        mask = state[f"blocks.{i}.attn.qkv.bias_mask"]
        mask[:width] = 0.0  # no q bias in Meta's forward
        mask[2 * width : 2 * width + width // 2] = 0.0  # half of the v bias masked out
    torch.save(state, tmp_path / "dinov3.pth")
    result = convert(tmp_path / "dinov3.pth", tmp_path / "out", verify=True)
    assert result.verification.confirmed and result.verification.features_diff <= TOL
    converted = load_file(str(tmp_path / "out" / "model.safetensors"))
    for i in range(DEPTH):
        assert not converted[f"blocks.{i}.attn.q_bias"].any()
        v_bias = state[f"blocks.{i}.attn.qkv.bias"][2 * width :]
        assert not converted[f"blocks.{i}.attn.v_bias"][: width // 2].any()
        assert torch.equal(converted[f"blocks.{i}.attn.v_bias"][width // 2 :], v_bias[width // 2 :])
    with torch.no_grad():  # the model Meta's file computes: timm's Eva with the masked biases
        for block in source.blocks:
            block.attn.q_bias.zero_()
            block.attn.v_bias[: width // 2] = 0.0
    assert features_diff(ours_from(tmp_path / "out"), source, SIZES[1]) <= TOL

    # a conversion that ignored the mask: --verify refuses it (the reference computes what Meta's file computes)
    def unmasked(index: int):
        return lambda bias, mask: bias.chunk(3, dim=0)[index]

    monkeypatch.setattr(meta_dinov3, "masked_third", unmasked)
    with pytest.raises(ConversionError, match="verif"):
        convert(tmp_path / "dinov3.pth", tmp_path / "out2", verify=True)
    assert not (tmp_path / "out2").exists()


def test_meta_bias_mask_that_is_not_a_0_1_mask_of_the_bias_is_refused_in_every_block(tmp_path):
    state = meta_state_dict(timm_dinov3("vit_small_patch16_dinov3_qkvb"))
    state["blocks.1.attn.qkv.bias_mask"] = torch.ones(1)  # would broadcast: checked although block 0 is non-zero
    torch.save(state, tmp_path / "dinov3.pth")
    with pytest.raises(ConversionError, match=r"blocks\.1\.attn\.qkv\.bias_mask.* is not a 0/1 mask"):
        convert(tmp_path / "dinov3.pth", tmp_path / "out")


def test_meta_rotary_of_another_base_is_refused(tmp_path):
    state = meta_state_dict(timm_dinov3("vit_small_patch16_dinov3"))
    state["rope_embed.periods"] = 10000.0 ** (4 * torch.arange(16, dtype=torch.float32) / 64)
    torch.save(state, tmp_path / "dinov3.pth")
    with pytest.raises(ConversionError, match="not DINOv3's rotary with base 100"):
        convert(tmp_path / "dinov3.pth", tmp_path / "out")


@pytest.mark.parametrize(
    ("periods", "message"),
    [
        (torch.zeros(0), r"has shape \(0,\); expected DINOv3's rotary periods"),
        (
            100.0 ** (4 * torch.arange(5, dtype=torch.float32) / 20),
            r"head_dim 20\), which does not divide the width 384",
        ),
        ((100.0 ** (4 * torch.arange(16, dtype=torch.float32) / 64)).reshape(4, 4), r"has shape \(4, 4\)"),
        (torch.full((16,), float("nan")), r"\[nan, nan, nan, nan\]\.\.\. is not DINOv3's rotary"),
        (torch.ones(1, dtype=torch.int64), r"is int64; expected .* floating-point"),
    ],
    ids=["empty", "count-not-dividing-width", "2-D", "nan", "int"],
)
def test_meta_degenerate_rotary_periods_are_refused_in_one_line(tmp_path, periods, message):
    """The periods give the head count: degenerate ones are refused naming what was expected (not read as absent,
    with a head count assumed)."""
    state = meta_state_dict(timm_dinov3("vit_small_patch16_dinov3"))
    state["rope_embed.periods"] = periods
    torch.save(state, tmp_path / "dinov3.pth")
    with pytest.raises(ConversionError, match=f"rope_embed.periods.*{message}") as raised:
        convert(tmp_path / "dinov3.pth", tmp_path / "out")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists()


# --- timm's Eva -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("timm_name", "expected"),
    [
        ("vit_small_patch16_dinov3_qkvb", "scratch_dinov3_s16_qkvb"),
        ("vit_small_plus_patch16_dinov3", "scratch_dinov3_s16_plus"),
    ],
)
def test_timm_eva_directory_converts_verified_and_exports_back_to_timm(tmp_path, timm_name, expected):
    source = timm_dinov3(timm_name, num_classes=5)
    (tmp_path / "src").mkdir()
    save_file(source.state_dict(), str(tmp_path / "src" / "model.safetensors"))
    config = {"architecture": timm_name, "num_classes": 5, "model_args": {"depth": DEPTH}}
    (tmp_path / "src" / "config.json").write_text(json.dumps(config))
    result = convert(tmp_path / "src", tmp_path / "out", verify=True, strict=True)  # nothing assumed
    assert (result.source_format, result.model_name) == ("timm", expected)
    assert result.verification.confirmed and result.verification.logits_diff <= TOL
    ours = ours_from(tmp_path / "out")
    x = images(SIZES[1])
    with torch.no_grad():
        assert (ours(x) - source(x)).abs().max().item() <= TOL
    exported = export(tmp_path / "out", "timm", tmp_path / "timm.safetensors")
    assert exported.notes == []  # timm's Eva DINOv3 has the same LayerNorm eps, 1e-5
    back = timm.create_model(timm_name, depth=DEPTH, num_classes=5).eval()
    back.load_state_dict(load_file(str(tmp_path / "timm.safetensors")), strict=True)
    with torch.no_grad():
        assert (back(x) - source(x)).abs().max().item() == 0


# --- transformers' DINOv3ViTModel ---------------------------------------------------------------------------
@pytest.mark.parametrize(("gated", "biases"), [(False, True), (True, False)])
def test_transformers_dinov3_converts_verified_both_namings(tmp_path, gated, biases):
    source = hf_dinov3(gated, biases)
    source.save_pretrained(tmp_path / "hub")  # the Hub's names: layer.N
    result = convert(tmp_path / "hub", tmp_path / "out", verify=True, strict=True)
    expected = "scratch_dinov3_s16_plus" if gated else "scratch_dinov3_t16_qkvb"
    assert (result.source_format, result.model_name) == ("transformers", expected)
    assert result.verification.confirmed and result.verification.features_diff <= TOL
    ours = ours_from(tmp_path / "out")
    for size in SIZES:
        diff = hf_diff(source, ours, size)
        print(
            f"transformers -> ours ({'gated' if gated else 'gelu'}) {size[0]}x{size[1]}: last_hidden_state {diff:.2e}"
        )
        assert diff <= TOL
    # transformers 5's module names (model.layer.N), as a state dict in memory has them
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "current.safetensors"))
    assert any(k.startswith("model.layer.0.") for k in source.state_dict())
    convert(tmp_path / "current.safetensors", tmp_path / "out2", num_heads=4)
    assert hf_diff(source, ours_from(tmp_path / "out2"), SIZES[1]) <= TOL


def test_transformers_dinov3_without_register_tokens_converts_and_exports_back(tmp_path):
    """num_register_tokens=0: transformers holds an empty (1, 0, D) table; ours builds no register token, and the
    export writes the empty table back."""
    source = hf_dinov3(False, num_register_tokens=0)
    source.save_pretrained(tmp_path / "hub")
    result = convert(tmp_path / "hub", tmp_path / "out", verify=True, strict=True)
    assert result.model_args["reg_tokens"] == 0 and result.verification.confirmed
    assert "embeddings.register_tokens" in result.dropped
    assert max(hf_diff(source, ours_from(tmp_path / "out"), size) for size in SIZES) <= TOL
    export(tmp_path / "out", "transformers", tmp_path / "back")
    back = transformers.DINOv3ViTModel.from_pretrained(tmp_path / "back").eval()
    assert back.embeddings.register_tokens.shape == (1, 0, 64)
    x = images(SIZES[1])
    with torch.no_grad():
        assert torch.equal(back(pixel_values=x).last_hidden_state, source(pixel_values=x).last_hidden_state)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (
            {"query_bias": False, "value_bias": False},
            ("query_bias false", "value_bias false", "q_proj.bias", "v_proj.bias"),
        ),
        ({"query_bias": False}, ("query_bias false", "layer.0.attention.q_proj.bias")),
        ({"mlp_bias": False}, ("mlp_bias false", "mlp.up_proj.bias")),
        ({"proj_bias": False}, ("proj_bias false", "attention.o_proj.bias")),
    ],
)
def test_transformers_bias_flags_that_the_weights_contradict_are_refused(tmp_path, flags, named):
    """s10: a DINOv3ViTConfig whose bias flag is false builds no such bias (transformers drops the tensor); weights
    holding it are refused, naming the flag and the tensors."""
    hf_dinov3(gated=False).save_pretrained(tmp_path / "hub")
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    (tmp_path / "hub" / "config.json").write_text(json.dumps({**config, **flags}))
    with pytest.raises(ConversionError, match=r"config\.json beside the weights says") as raised:
        convert(tmp_path / "hub", tmp_path / "out", verify=True)
    assert all(name in str(raised.value) for name in named), str(raised.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        ({"use_swiglu_ffn": True}, None),  # DINOv2's spelling of the flag
        ({"use_gated_mlp": True, "use_swiglu_ffn": False}, "disagree"),
        ({"use_gated_mlp": False}, "does not describe these weights"),
    ],
)
def test_transformers_gated_flag_spellings(tmp_path, flags, problem):
    source = hf_dinov3(True)
    source.save_pretrained(tmp_path / "hub")
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    config.pop("use_gated_mlp")
    (tmp_path / "hub" / "config.json").write_text(json.dumps({**config, **flags}))
    if problem is None:
        assert convert(tmp_path / "hub", tmp_path / "out", verify=True).verification.passed
    else:
        with pytest.raises(ConversionError, match=problem):
            convert(tmp_path / "hub", tmp_path / "out")


def test_transformers_nonzero_key_bias_is_refused(tmp_path):
    source = hf_dinov3(False, key_bias=True)
    with torch.no_grad():
        source.model.layer[1].attention.k_proj.bias.fill_(0.1)
    source.save_pretrained(tmp_path / "hub")
    with pytest.raises(ConversionError, match=r"layer\.1\.attention\.k_proj\.bias.* is not zero"):
        convert(tmp_path / "hub", tmp_path / "out")


def test_export_to_transformers_refuses_what_dinov3vitmodel_cannot_hold(tmp_path):
    source = timm_dinov3("vit_small_patch16_dinov3", num_classes=5)
    save_file(source.state_dict(), str(tmp_path / "eva.safetensors"))
    convert(tmp_path / "eva.safetensors", tmp_path / "out")
    with pytest.raises(ConversionError, match="DINOv3ViTModel has no classifier"):
        export(tmp_path / "out", "transformers", tmp_path / "hf")
    vit = timm.create_model("vit_tiny_patch16_224", num_classes=3)
    torch.save(vit.state_dict(), tmp_path / "vit.pth")
    convert(tmp_path / "vit.pth", tmp_path / "vit")
    with pytest.raises(ConversionError, match="this model is not DINOv3"):
        export(tmp_path / "vit", "transformers", tmp_path / "hf")
    with pytest.raises(ConversionError, match="no rotary position"):
        export(tmp_path / "out", "torchvision", tmp_path / "tv.pth")
    assert not (tmp_path / "hf").exists()


# --- detection ------------------------------------------------------------------------------------------
def test_each_layout_is_told_apart():
    eva = timm_dinov3("vit_small_patch16_dinov3")
    cases = {
        "meta_dinov3": meta_state_dict(eva),
        "timm": eva.state_dict(),
        "transformers": hf_dinov3(True).state_dict(),
    }
    cases["timm (classic ViT with LayerScale)"] = timm.create_model(
        "vit_tiny_patch16_224", init_values=1e-5, reg_tokens=4, class_token=True
    ).state_dict()
    for expected, state_dict in cases.items():
        fmt, detected = detect_format(StateDictCheckpoint(state_dict))
        assert (fmt.name, detected) == (expected.split(" ")[0], True)


# --- the round trip --------------------------------------------------------------------------------------------
def test_round_trip_meta_ours_transformers_ours_timm(tmp_path):
    """Meta -> ours -> transformers -> ours -> timm, each step's max-abs-diff against the original (timm's Eva
    reading Meta's file), at 224 and at 160x256."""
    source = timm_dinov3("vit_small_plus_patch16_dinov3_qkvb")
    torch.save(meta_state_dict(source), tmp_path / "meta.pth")
    first = convert(tmp_path / "meta.pth", tmp_path / "ours1", verify=True)
    ours1 = ours_from(tmp_path / "ours1")
    export(tmp_path / "ours1", "transformers", tmp_path / "hf")
    hf = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "DINOv3ViTModel"
    second = convert(tmp_path / "hf", tmp_path / "ours2", verify=True, strict=True)
    ours2 = ours_from(tmp_path / "ours2")
    export(tmp_path / "ours2", "timm", tmp_path / "timm.safetensors")
    back = timm.create_model("vit_small_plus_patch16_dinov3_qkvb", depth=DEPTH).eval()
    back.load_state_dict(load_file(str(tmp_path / "timm.safetensors")), strict=True)
    assert first.model_name == second.model_name == "scratch_dinov3_s16_plus_qkvb"
    for size in SIZES:
        steps = {
            "Meta -> ours": features_diff(ours1, source, size),
            "ours -> transformers": hf_diff(hf, source, size),
            "transformers -> ours": features_diff(ours2, source, size),
            "ours -> timm": features_diff(back, source, size),
        }
        x = images(size)
        with torch.no_grad():
            pooled = (
                (
                    back.forward_head(back.forward_features(x), pre_logits=True)
                    - ours1.forward_head(ours1.forward_features(x), pre_logits=True)
                )
                .abs()
                .max()
                .item()
            )
        print(f"{size[0]}x{size[1]}: " + ", ".join(f"{k} {v:.2e}" for k, v in steps.items()) + f"; pooled {pooled:.2e}")
        assert max(steps.values()) <= TOL and pooled <= TOL
