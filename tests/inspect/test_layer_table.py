"""The per-layer table: the same rows real torchsummary prints, from meta or real tensors."""

import contextlib
import io
import re

import pytest
import torch
from torchsummary import summary as torchsummary_summary

from tests.support import tiny
from timm_vitscratch.inspect.counts import hidden_parameters, leaf_module_param_count, true_param_count
from timm_vitscratch.inspect.layer_table import layer_rows, render_layer_table
from timm_vitscratch.models.build import build_on_meta
from timm_vitscratch.models.variants import DINOV2_TIMM_NAMES, EVA02_VARIANTS, PE_VARIANTS

# torchsummary right-aligns the layer in 20 columns: a longer name (SeparateQkvAttention-15) starts the line
ROW = re.compile(r"^\s*(\w+-\d+)\s+(\[.*\])\s+([\d,]+)$")


def torchsummary_rows(model, input_size):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), torch.no_grad():
        torchsummary_summary(model, input_size, device="cpu")
    rows = []
    for line in out.getvalue().splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), match.group(2), int(match.group(3).replace(",", ""))))
    return rows


@pytest.mark.parametrize(
    "name",
    [
        "scratch_vit_ti16",
        "scratch_deit_ti16_distilled",
        "scratch_vit_b16_in21k",
        "scratch_eva02_s14",  # Eva's split bias: no row for qkv, which never runs; the packed SwiGLU
        "scratch_eva02_b16_clip",  # separate q/k/v projections, norms inside the MLP and the attention
        "scratch_pe_core_s16",  # norm_pre, the attention pool reading every token
        "scratch_dinov2_g14",  # timm's ViT with the packed SwiGLU
    ],
)
def test_rows_equal_real_torchsummary(name):
    model = tiny(name, num_classes=7).eval()
    ours = [(r.layer, str(r.output_shape), r.params) for r in layer_rows(model, (3, 32, 32))]
    assert ours == torchsummary_rows(model, (3, 32, 32))


def test_meta_rows_equal_real_rows():
    real = tiny("scratch_deit_ti16_distilled", num_classes=7)
    with torch.device("meta"):
        meta = tiny("scratch_deit_ti16_distilled", num_classes=7)
    assert layer_rows(meta, (3, 32, 32), batch=3) == layer_rows(real, (3, 32, 32), batch=3)


@pytest.mark.slow  # torchsummary over full-size models
@pytest.mark.parametrize("name, leaf_count", [("scratch_vit_b16", 85_650_437), ("scratch_vit_h14", 630_440_965)])
def test_rows_sum_to_torchsummary_total_and_hidden_fill_the_gap(name, leaf_count):
    model = build_on_meta(name, num_classes=5)
    rows = layer_rows(model, (3, 224, 224))
    assert sum(r.params for r in rows) == leaf_count
    assert leaf_count + sum(hidden_parameters(model).values()) == true_param_count(model)
    shapes = {n: list(p.shape) for n, p in model.named_parameters() if n in hidden_parameters(model)}
    text = render_layer_table(rows, shapes)
    assert f'Params in layers (torchsummary\'s "Total params"): {leaf_count:,}' in text
    assert f"Total params (true count): {true_param_count(model):,}" in text
    assert "pos_embed" in text and "Conv2d-1" in text


@pytest.mark.parametrize(
    "name", sorted(EVA02_VARIANTS) + sorted(PE_VARIANTS) + [n for n in DINOV2_TIMM_NAMES if "_g14" in n]
)
def test_meta_rows_of_the_eva02_pe_and_giant_rows_sum_to_the_leaf_count(name):
    model = build_on_meta(name)
    rows = layer_rows(model, (3, *model.patch_embed.img_size), batch=1)
    assert sum(r.params for r in rows) == leaf_module_param_count(model)
    assert sum(r.params for r in rows) + sum(hidden_parameters(model).values()) == true_param_count(model)
