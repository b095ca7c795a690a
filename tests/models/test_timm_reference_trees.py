"""Every registered row against its timm reference, built on ``meta``: the same module tree and state dict.

Each of our rows that timm has a model of (``TIMM_NAMES``; the classic ViT rows against timm's ``vit_*`` of the
same size and patch, their in21k "has_logits" forms too; DeiT distilled against ``deit_*_distilled``) is built on
``meta`` beside that model, with the same overrides (only ``num_classes``, where timm's default differs). Then
``named_modules()`` names, in order, each module's class name and its ``torch.nn`` base type, and ``state_dict()``
keys, in order, with their shapes, are equal, apart from the known differences listed below, each with its reason.
A list entry no row uses fails too, so the lists stay exact and a new row cannot drift. Run with ``-s`` for the
counts.
"""

from __future__ import annotations

import pytest
import timm
import torch
from torch import nn

import timm_vitscratch  # noqa: F401  (registers the models)
from tests.support import sweep
from timm_vitscratch.models.variants import ARCHITECTURES, TIMM_NAMES

#: the classic ViT rows -> timm's ``VisionTransformer`` of the same size and patch (the in21k rows: the same)
CLASSIC: dict[str, str] = {
    "scratch_vit_ti16": "vit_tiny_patch16_224",
    "scratch_vit_s16": "vit_small_patch16_224",
    "scratch_vit_b16": "vit_base_patch16_224",
    "scratch_vit_b32": "vit_base_patch32_224",
    "scratch_vit_l16": "vit_large_patch16_224",
    "scratch_vit_l32": "vit_large_patch32_224",
    "scratch_vit_h14": "vit_huge_patch14_224",
}
REFERENCES: dict[str, str] = {
    **CLASSIC,
    **{f"{ours}_in21k": theirs for ours, theirs in CLASSIC.items() if f"{ours}_in21k" in ARCHITECTURES},
    **{
        f"scratch_deit_{s}16_distilled": f"deit_{t}_distilled_patch16_224"
        for s, t in (("ti", "tiny"), ("s", "small"), ("b", "base"))
    },
    **TIMM_NAMES,
}
#: timm's classes of the classic ViT, beside which ours may hold the in21k representation layer (``pre_logits``)
CLASSIC_TIMM_CLASSES = ("VisionTransformer", "VisionTransformerDistilled")

#: modules ours holds that timm's does not: (name, our class) -> why
EXTRA_MODULES: dict[tuple[str, str], str] = {
    ("pre_logits", "Sequential"): "the in21k 'has_logits' rows' representation layer (Linear + Tanh): timm's "
    "current VisionTransformer has none",
    ("pre_logits.fc", "Linear"): "the in21k representation layer's Linear",
    ("pre_logits.act", "Tanh"): "the in21k representation layer's Tanh",
}
#: state-dict keys ours holds that timm's does not -> why
EXTRA_KEYS: dict[str, str] = {
    "pre_logits.fc.weight": "the in21k representation layer (timm's VisionTransformer has none)",
    "pre_logits.fc.bias": "the in21k representation layer (timm's VisionTransformer has none)",
}
#: (our class, timm's class) of a module of the same name -> why (ours: one family of layers, chosen by options)
CLASS_PAIRS: dict[tuple[str, str], str] = {
    ("VisionTransformer", "Eva"): "the one model class; timm builds DINOv3, PE and EVA02 with its Eva",
    ("VisionTransformer", "NaFlexVit"): "the one model class; timm builds SigLIP 2 NaFlex with its NaFlexVit",
    ("VisionTransformer", "VisionTransformerDistilled"): "the one model class; DeiT's token is an option",
    ("ScaledEvaBlock", "EvaBlock"): "timm's EvaBlock with init_values: ours a class of its own (gamma_1 / gamma_2)",
    ("Attention", "EvaAttention"): "Eva's fused layout without qkv bias is the plain one-qkv attention",
    (
        "SeparateQkvAttention",
        "EvaAttention",
    ): "Eva's unfused layout (q_proj / k_proj / v_proj): ours a class of its own",
    ("Attention", "AttentionRope"): "the one attention class (the qkv bias inside qkv: attn_type='rope')",
    ("AttentionPool", "AttentionPoolLatent"): "our attention pool, with timm's names and tensors",
    ("PackedSwiGLU", "GluMlp"): "our packed SwiGLU (fc1 of twice the width), timm's GluMlp's names and tensors",
    ("AxialRotary", "RotaryEmbeddingCat"): "our axial rotary position (no tensors in the state dict)",
    ("Sequential", "ModuleList"): "blocks: ours an nn.Sequential, timm's Eva a ModuleList (see BASE_PAIRS)",
    ("DinoV3Rotary", "RotaryEmbeddingDinoV3"): "our DINOv3 rotary position (its periods buffer, timm's name)",
}
#: (module name, our torch.nn base, timm's) -> why
BASE_PAIRS: dict[tuple[str, str, str], str] = {
    ("blocks", "Sequential", "ModuleList"): "ours calls its blocks as one module where it can, as timm's classic "
    "ViT does (so hooks on blocks fire); timm's Eva holds a ModuleList. The same names and tensors",
}
#: rows whose state-dict keys come in another order (the same keys and shapes) -> why
KEY_ORDER: dict[str, str] = {
    "VisionTransformerDistilled": "timm registers dist_token after the classic ViT's tensors; ours in timm's "
    "forward order (cls_token, dist_token, then pos_embed)",
}
#: the overrides both are built with, where timm's default differs from ours
OVERRIDES: dict[str, dict[str, int]] = {
    "scratch_vit_l32": dict(num_classes=1000),  # timm's vit_large_patch32_224 and vit_huge_patch14_224 default to 0
    "scratch_vit_h14": dict(num_classes=1000),
    **{name: dict(num_classes=21843) for name in ARCHITECTURES if name.endswith("_in21k")},  # ImageNet-21k's classes
}


def _nn_base(module: nn.Module) -> str:
    """The first class in ``module``'s MRO that torch.nn defines (Linear, Conv2d, LayerNorm, Sequential, Module...)."""
    return next(c.__name__ for c in type(module).__mro__ if c.__module__.startswith("torch.nn"))


def differences(ours: str, theirs: str) -> tuple[list[str], set]:
    """What differs between our row and timm's model: unexplained differences, and the allow-list entries used."""
    with torch.device("meta"):
        mine = timm.create_model(ours, **OVERRIDES.get(ours, {}))
        reference = timm.create_model(theirs, **OVERRIDES.get(ours, {}))
    timm_class = type(reference).__name__
    bad: list[str] = []
    used: set = set()
    my_modules, their_modules = dict(mine.named_modules()), dict(reference.named_modules())
    for name, module in my_modules.items():
        if name in their_modules:
            continue
        entry = (name, type(module).__name__)
        if entry in EXTRA_MODULES and timm_class in CLASSIC_TIMM_CLASSES:
            used.add(entry)
        else:
            bad.append(f"module {name} ({entry[1]}) not in timm's")
    bad += [f"module {name} missing" for name in their_modules if name not in my_modules]
    if [n for n in my_modules if n in their_modules] != list(their_modules):
        bad.append("modules in another order")
    for name in their_modules.keys() & my_modules.keys():
        a, b = my_modules[name], their_modules[name]
        pair = (type(a).__name__, type(b).__name__)
        if pair[0] != pair[1]:
            if pair in CLASS_PAIRS:
                used.add(pair)
            else:
                bad.append(f"module {name}: our {pair[0]}, timm's {pair[1]}")
        bases = (name, _nn_base(a), _nn_base(b))
        if bases[1] != bases[2]:
            if bases in BASE_PAIRS:
                used.add(bases)
            else:
                bad.append(f"module {name}: torch.nn {bases[1]} in ours, {bases[2]} in timm's")
    my_keys = {k: tuple(v.shape) for k, v in mine.state_dict().items()}
    their_keys = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    for key in my_keys.keys() - their_keys.keys():
        if key in EXTRA_KEYS and timm_class in CLASSIC_TIMM_CLASSES:
            used.add(key)
        else:
            bad.append(f"key {key} not in timm's")
    bad += [f"key {k} missing" for k in their_keys.keys() - my_keys.keys()]
    bad += [
        f"key {k}: {my_keys[k]} vs timm's {their_keys[k]}"
        for k in my_keys.keys() & their_keys.keys()
        if my_keys[k] != their_keys[k]
    ]
    if [k for k in my_keys if k in their_keys] != list(their_keys):
        if timm_class in KEY_ORDER:
            used.add(timm_class)
        else:
            bad.append("state-dict keys in another order")
    return bad, used


def test_every_row_with_a_timm_reference_has_its_module_tree_and_state_dict() -> None:
    assert set(REFERENCES) == set(ARCHITECTURES), sorted(set(ARCHITECTURES) ^ set(REFERENCES))
    unexplained: dict[str, list[str]] = {}
    used: dict[object, int] = {}
    exact = 0
    walked = sweep.rows(REFERENCES)  # every row with VITSCRATCH_FULL_SWEEP=1
    for ours, theirs in ((name, REFERENCES[name]) for name in walked):
        bad, entries = differences(ours, theirs)
        if bad:
            unexplained[ours] = bad
        exact += not [entry for entry in entries if entry not in CLASS_PAIRS]
        for entry in entries:
            used[entry] = used.get(entry, 0) + 1
    assert unexplained == {}
    allowed = [*EXTRA_MODULES, *EXTRA_KEYS, *CLASS_PAIRS, *BASE_PAIRS, *KEY_ORDER]
    if sweep.FULL_SWEEP:  # an entry may serve rows outside the representative subset
        assert [entry for entry in allowed if entry not in used] == [], "an allow-list entry no row uses"
    print(
        f"{len(walked)} rows walked against timm's models on meta: {exact} with the same module names, "
        f"torch.nn types, keys and shapes (our class names aside); {len(allowed)} known differences allowed "
        f"({len(EXTRA_MODULES)} extra modules, {len(EXTRA_KEYS)} extra keys, {len(CLASS_PAIRS)} class pairs, "
        f"{len(BASE_PAIRS)} torch.nn type pair, {len(KEY_ORDER)} key order), used by rows: "
        + ", ".join(f"{entry} {count}" for entry, count in used.items())
    )


@pytest.mark.parametrize("name", ["scratch_siglip2_b16_naflex", "scratch_siglip2_so400m16_naflex"])
def test_the_siglip2_naflex_rows_differ_from_timms_in_class_names_only(name: str) -> None:
    """SigLIP 2 NaFlex: the same names, types, keys and shapes as timm's NaFlexVit; only our two classes' names."""
    bad, used = differences(name, REFERENCES[name])
    assert bad == [] and used == {("VisionTransformer", "NaFlexVit"), ("AttentionPool", "AttentionPoolLatent")}
