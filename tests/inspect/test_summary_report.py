"""`vitscratch summary`'s numbers: torchvision's counts, torchsummary's "Total params", timm's own models, the tally."""

import json
import re

import pytest
import timm
import torch
import torchvision

from timm_vitscratch.cli import main
from timm_vitscratch.inspect.counts import block_part_formulas, timm_reference, torchvision_reference
from timm_vitscratch.inspect.render import count_summary
from timm_vitscratch.inspect.report import build_report
from timm_vitscratch.models.variants import ARCHITECTURES, TIMM_NAMES

# torchvision's vit_* models at 1000 classes (true count), and what torchsummary prints as "Total params"
# for our models at 5 classes (tests/inspect/test_counts.py checks both against the real libraries).
TORCHVISION_TRUE_COUNTS_1000 = {
    "scratch_vit_b16": 86_567_656,
    "scratch_vit_b32": 88_224_232,
    "scratch_vit_l16": 304_326_632,
    "scratch_vit_l32": 306_535_400,
    "scratch_vit_h14": 632_045_800,
}
TORCHSUMMARY_TOTALS_5 = {
    "scratch_vit_b16": 85_650_437,
    "scratch_vit_b32": 87_419_909,
    "scratch_vit_l32": 305_463_301,
    "scratch_vit_h14": 630_440_965,
}
# timm's own models of the architectures torchvision has no named builder for
TIMM_EQUIVALENTS = {
    "scratch_vit_ti16": "vit_tiny_patch16_224",
    "scratch_vit_s16": "vit_small_patch16_224",
    "scratch_deit_ti16_distilled": "deit_tiny_distilled_patch16_224",
    "scratch_deit_s16_distilled": "deit_small_distilled_patch16_224",
    "scratch_deit_b16_distilled": "deit_base_distilled_patch16_224",
}


def _count(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(TORCHVISION_TRUE_COUNTS_1000))
def test_true_counts_equal_torchvision_counts(name):
    assert (
        build_report(name, num_classes=1000, activations=False)["counts"]["true"] == TORCHVISION_TRUE_COUNTS_1000[name]
    )


@pytest.mark.parametrize("name", sorted(TORCHSUMMARY_TOTALS_5))
def test_leaf_counts_equal_torchsummary_totals(name):
    assert build_report(name, num_classes=5, activations=False)["counts"]["leaf_module"] == TORCHSUMMARY_TOTALS_5[name]


def test_b16_at_5_classes_true_leaf_and_hidden_tokens():
    counts = build_report("scratch_vit_b16", num_classes=5, activations=False)["counts"]
    assert (counts["true"], counts["leaf_module"], counts["difference"]) == (85_802_501, 85_650_437, 152_064)
    assert counts["hidden"] == {
        "cls_token": {"shape": [1, 1, 768], "params": 768},
        "pos_embed": {"shape": [1, 197, 768], "params": 197 * 768},
    }


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_every_variant_equals_the_third_party_model(name):
    """True count equals torchvision's model (on meta) or, where it has none, timm's own."""
    report = build_report(name, activations=False)
    reference = torchvision_reference(name) or timm_reference(name, report["model"]["num_classes"])
    if reference is None:
        with torch.device("meta"):
            reference = timm.create_model(TIMM_EQUIVALENTS[name], num_classes=report["model"]["num_classes"])
    assert report["counts"]["true"] == _count(reference)


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_tally_sums_to_true_count_and_matches_formulas(name):
    report = build_report(name, num_classes=5, activations=False)
    tally, h = report["tally"], report["model"]["embed_dim"]
    parts = [
        tally[k]
        for k in ("patch_embedding", "tokens", "position_embedding", "pre_norm", "final_norm", "representation", "head")
    ]
    assert sum(parts) + sum(b["total"] for b in tally["blocks"]) == tally["total"] == report["counts"]["true"]
    assert len(tally["blocks"]) == report["model"]["depth"]
    shape = report["analytic"]["block_shape"]
    for block in tally["blocks"]:
        parts = {k: block[k] for k in ("attention", "mlp", "norms", "layer_scale")}
        assert sum(parts.values()) == block["total"] == report["analytic"]["block"]
        assert parts == block_part_formulas(h, **shape)
    if name not in TIMM_NAMES:  # the classic ViT's block; the other families' blocks are checked above
        assert report["analytic"]["block"] == 12 * h * h + 13 * h and report["analytic"]["block_formula"] == "12h²+13h"
        assert shape == dict(
            mlp_hidden=4 * h,
            mlp_matrices=2,
            qkv_biases=3,
            layer_scale=False,
            mlp_norm=False,
            attn_norm=False,
            norm_size=2,  # LayerNorm: a weight and a bias per channel
            proj_bias=True,
        )
    assert report["analytic"]["model"] == report["counts"]["true"]


@pytest.mark.parametrize(
    "name,formulas",
    [
        ("scratch_dinov3_s16", dict(attention="4h²+h", mlp="8h²+5h", norms="4h", layer_scale="2h", block="12h²+12h")),
        ("scratch_dinov3_b16_qkvb", dict(attention="4h²+3h", mlp="8h²+5h", norms="4h", layer_scale="2h")),
        ("scratch_dinov3_s16_plus", dict(attention="4h²+h", mlp="12h²+9h", block="16h²+16h")),
        ("scratch_dinov3_7b16", dict(mlp="3hM+2M+h", block="4h²+3hM+2M+8h")),
        # packed SwiGLU (fc1 2hM+2M), Eva's q and v biases
        ("scratch_eva02_s14", dict(attention="4h²+3h", mlp="3hM+2M+h", block="4h²+3hM+2M+8h")),
        # separate q/k/v (q and v biased), a LayerNorm 2M inside the MLP; the CLIP tower's 2h on the merged heads
        ("scratch_eva02_b14", dict(attention="4h²+3h", mlp="3hM+4M+h", block="4h²+3hM+4M+8h")),
        ("scratch_eva02_l14_clip", dict(attention="4h²+5h", mlp="3hM+4M+h", block="4h²+3hM+4M+10h")),
        # AttentionRope's fused qkv bias: the classic block
        ("scratch_pe_core_s16", dict(attention="4h²+4h", mlp="8h²+5h", block="12h²+13h")),
        ("scratch_pe_spatial_g14", dict(mlp="2hM+M+h", layer_scale="2h", block="4h²+2hM+M+11h")),
        ("scratch_dinov2_g14", dict(attention="4h²+4h", mlp="3hM+2M+h", layer_scale="2h", block="4h²+3hM+2M+11h")),
    ],
)
def test_family_block_formulas(name, formulas):
    """Each formula, evaluated at the model's h (and M), gives the tally's figure for that part."""
    analytic = build_report(name, activations=False)["analytic"]
    shown = {**analytic["part_formulas"], "block": analytic["block_formula"]}
    assert {k: shown[k] for k in formulas} == formulas
    h, m = analytic["h"], analytic["block_shape"]["mlp_hidden"]
    units = {"h²": h * h, "hM": h * m, "M": m, "h": h}
    for part, formula in shown.items():
        terms = re.fullmatch(r"(\d*(h²|hM|M|h))(\+\d*(h²|hM|M|h))*", formula) and formula.split("+")
        assert terms, formula
        value = sum(int(re.match(r"\d*", t)[0] or 1) * units[t.lstrip("0123456789")] for t in terms)
        assert value == (analytic["block"] if part == "block" else analytic["parts"][part]), part


def test_dinov3_summary_text_lists_hidden_parameters_per_block(capsys):
    assert main(["summary", "scratch_dinov3_s16_qkvb"]) == 0
    text = capsys.readouterr().out
    report = build_report("scratch_dinov3_s16_qkvb", activations=False)
    assert f"{report['counts']['leaf_module']:,}" in text
    assert "blocks.*.attn.qkv.weight (1152, 384)" in text and "(12 blocks)" in text
    assert "class/dist/register tokens" in text and "layer scale" in text


@pytest.mark.parametrize("name", ["scratch_vit_b16", "scratch_vit_l32", "scratch_vit_h14_in21k"])
def test_tally_parts_equal_torchvision_modules(name):
    """attention / MLP / norms per block, patch embedding, tokens, final norm and head as torchvision splits them."""
    tally = build_report(name, activations=False)["tally"]
    tv = torchvision_reference(name)
    layer = tv.encoder.layers[0]
    assert tally["blocks"][0]["attention"] == _count(layer.self_attention)
    assert tally["blocks"][0]["mlp"] == _count(layer.mlp)
    assert tally["blocks"][0]["norms"] == _count(layer.ln_1) + _count(layer.ln_2)
    assert tally["patch_embedding"] == _count(tv.conv_proj)
    assert tally["tokens"] == tv.class_token.numel()
    assert tally["position_embedding"] == tv.encoder.pos_embedding.numel()
    assert tally["final_norm"] == _count(tv.encoder.ln)
    assert tally["representation"] + tally["head"] == _count(tv.heads)


def test_mlp_holds_two_thirds_of_block_parameters():
    share = build_report("scratch_vit_b16", activations=False)["share"]["params"]
    h = 768
    assert share["mlp_of_blocks"] == pytest.approx((8 * h * h + 5 * h) / (12 * h * h + 13 * h))
    assert share["mlp_of_blocks"] + share["attention_of_blocks"] < 1  # the norms hold the rest


def test_img_size_changes_position_table_and_tokens():
    report = build_report("scratch_vit_b16", num_classes=5, img_size=384, activations=False)
    assert report["model"]["tokens"] == 24 * 24 + 1
    with torch.device("meta"):
        reference = torchvision.models.VisionTransformer(
            image_size=384, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072, num_classes=5
        )
    assert report["counts"]["true"] == _count(reference)


def test_weight_bytes_equal_real_tensors_in_each_dtype():
    report = build_report("scratch_vit_ti16", img_size=32, activations=False)
    model = timm.create_model("scratch_vit_ti16", img_size=32)
    for dtype, key in ((torch.float32, "fp32"), (torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        real = sum(p.numel() * p.element_size() for p in model.to(dtype).parameters())
        assert report["memory"]["weights_bytes"][key] == real
    assert report["memory"]["inference_fp16_bytes"] == report["memory"]["weights_bytes"]["fp16"]
    training = report["memory"]["training_mixed_precision_adamw"]
    assert training["bytes_per_param"] == 20 == sum(training["bytes_per_param_by_item"].values())
    assert training["states_bytes"] == 20 * report["counts"]["true"]


@pytest.mark.slow  # the summary command in processes
def test_cli_text_and_json_agree(capsys):
    assert main(["summary", "scratch_vit_b16", "--num-classes", "5", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["summary", "scratch_vit_b16", "--num-classes", "5"]) == 0
    text = capsys.readouterr().out
    for value in (
        report["counts"]["true"],
        report["counts"]["leaf_module"],
        report["tally"]["blocks"][0]["mlp"],
        report["flops"]["per_image_macs"]["total"],
    ):
        assert f"{value:,}" in text
    training = report["memory"]["training_mixed_precision_adamw"]
    for value in (training["states_bytes"], training["activations_bytes"], training["total_bytes"]):
        assert f"({value:,} bytes)" in text
    for text_piece in ("12h²+13h", "MLP vs attention", "GFLOPs", "20 bytes/param", "activations for batch 1"):
        assert text_piece in text
    assert "layers" not in report


def test_count_summary_keeps_the_counts_and_tally():
    text = count_summary("scratch_vit_b32", num_classes=5)
    for value in (87_419_909, 87_419_909 + 50 * 768 + 768, 12 * (12 * 768**2 + 13 * 768)):
        assert f"{value:,}" in text


@pytest.mark.slow  # the summary command in processes
def test_cli_layers_and_bad_options(capsys):
    assert main(["summary", "scratch_vit_ti16", "--img-size", "32", "--batch", "2", "--layers", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"]["batch"] == 2 and report["layers"][0]["output_shape"] == [-1, 192, 2, 2]
    assert main(["summary", "scratch_vit_b16", "--img-size", "100"]) == 2
    assert "img_size (100, 100) is not divisible by patch_size (16, 16)" in capsys.readouterr().err
    assert main(["summary", "scratch_vit_b16", "--batch", "0"]) == 2
    assert "--batch must be >= 1" in capsys.readouterr().err
