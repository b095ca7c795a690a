"""The tables docs/encoders.md shows, from the registry and the models themselves (its checked blocks run these).

python -m tests.docs.family_tables rows FAMILY   # each row: ours, timm's model, input, the layout options
python -m tests.docs.family_tables tags FAMILY   # every tag: timm's weights, license, input, classes

FAMILY: dinov2, siglip, eva02, pe or aimv2.
"""

from __future__ import annotations

import sys

import timm

from tests.docs.dinov3_tables import _table
from timm_vitscratch.models.pretrained import TIMM_TAGS
from timm_vitscratch.models.variants import (
    AIMV2,
    ARCHITECTURES,
    DINOV2_TIMM_NAMES,
    EVA02_VARIANTS,
    PE_VARIANTS,
    SIGLIP2_NAFLEX_TIMM_NAMES,
    SIGLIP_TIMM_NAMES,
    TIMM_NAMES,
)

FAMILIES = {
    "dinov2": list(DINOV2_TIMM_NAMES),
    "siglip": [*SIGLIP_TIMM_NAMES, *SIGLIP2_NAFLEX_TIMM_NAMES],
    "eva02": list(EVA02_VARIANTS),
    "pe": list(PE_VARIANTS),
    "aimv2": list(AIMV2.names),
}
#: the options that tell the rows of a family apart, as the variant table sets them
SHOWN = (
    "embed_dim",
    "depth",
    "num_heads",
    "qkv_fused",
    "scale_mlp",
    "scale_attn_inner",
    "global_pool",
    "class_token",
    "ref_feat_shape",
    "init_values",
    "swiglu_mlp",
    "reg_tokens",
    "act_layer",
    "pos_embed_interp_mode",
)


def rows(family: str) -> str:
    """The family's rows; the options column holds what sets a row apart (those all rows share are left out)."""
    names = FAMILIES[family]
    shared = {k for k in SHOWN if len({repr(ARCHITECTURES[n].get(k)) for n in names}) == 1}
    table = []
    for name in names:
        arch = ARCHITECTURES[name]
        size = arch.get("img_size", 224)
        options = ", ".join(f"{k}={arch[k]}" for k in SHOWN[3:] if k in arch and k not in shared)
        width = f"{arch['embed_dim']}/{arch['depth']}/{arch['num_heads']}"
        table.append([name, TIMM_NAMES[name], f"{size}", f"{arch['patch_size']}", width, options])
    return _table(["ours", "timm", "input", "patch", "width/depth/heads", "options"], table, right=6)


def tags(family: str) -> str:
    table = []
    for ours in TIMM_TAGS:
        if ours.split(".")[0] not in FAMILIES[family]:
            continue
        cfg = timm.models.get_pretrained_cfg(ours)
        assert cfg is not None and cfg.hf_hub_id and cfg.license, ours
        size = "x".join(str(s) for s in cfg.input_size[1:])
        table.append([ours, cfg.hf_hub_id, cfg.license, size, str(cfg.num_classes)])
    return _table(["tag", "weights (timm's repo)", "license", "input", "classes"], table, right=4)


TABLES = {"rows": rows, "tags": tags}


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TABLES:
        sys.exit(f"usage: python -m tests.docs.family_tables {{{','.join(TABLES)}}} [FAMILY]")
    print(TABLES[sys.argv[1]](*sys.argv[2:]))
