"""Same seed, same model, same run: ``timm.create_model`` of ours draws what building its timm reference draws.

After ``torch.manual_seed(s)``, building one of ours and building the timm model it mirrors (with the same
overrides) consume torch's generator alike, draw for draw: the state dicts are equal tensor for tensor (timm's
read through our checkpoint filter, which leaves them as they are where the names are the same: SigLIP 2 NaFlex holds
timm NaFlexVit's ``embeds.*`` too) and the next ``torch.rand()`` is the same.
One small configuration per family, a few of timm's other init schemes, and two rows at full size. Then the
run: seeded by timm's ``random_seed``, built, trained two steps with timm's optimizer on a batch drawn after
building, the losses are timm's. The in21k "has_logits" rows have no timm reference (timm's ``VisionTransformer``
has no representation layer any more); the DeiT distilled rows have one, timm's ``VisionTransformerDistilled``.
"""

from __future__ import annotations

from typing import Any

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.utils import random_seed

import timm_vitscratch  # noqa: F401  (registers the models)
from timm_vitscratch.models.checkpoint_filter import checkpoint_filter_fn

#: per family: ours, timm's reference, the overrides both are built with (small: two blocks, narrow where wide)
NARROW = dict(embed_dim=192, num_heads=3)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "classic_vit": ("scratch_vit_ti16", "vit_tiny_patch16_224", dict(depth=2)),
    "deit_distilled": ("scratch_deit_ti16_distilled", "deit_tiny_distilled_patch16_224", dict(depth=2)),
    "dinov3": ("scratch_dinov3_s16", "vit_small_patch16_dinov3", dict(depth=2)),
    "dinov2_reg4": ("scratch_dinov2_s14_reg4", "vit_small_patch14_reg4_dinov2", dict(depth=2, img_size=224)),
    "siglip": ("scratch_siglip_b16", "vit_base_patch16_siglip_224", dict(depth=2, **NARROW)),
    "siglip2_naflex": ("scratch_siglip2_b16_naflex", "naflexvit_base_patch16_siglip", dict(depth=2, **NARROW)),
    "eva02": ("scratch_eva02_t14", "eva02_tiny_patch14_224", dict(depth=2)),
    "eva02_base": ("scratch_eva02_b14", "eva02_base_patch14_224", dict(depth=2, **NARROW)),
    "pe_core": ("scratch_pe_core_t16", "vit_pe_core_tiny_patch16_384", dict(depth=2, img_size=224)),
    "aimv2": ("scratch_aimv2_l14", "aimv2_large_patch14_224", dict(depth=2, **NARROW)),
}
#: other init schemes, where the reference takes them (timm's Eva has one init only)
SCHEMES: list[tuple[str, str]] = [
    *[("classic_vit", mode) for mode in ("jax", "jax_nlhb", "moco", "reset")],
    ("deit_distilled", "jax_nlhb"),
    ("dinov2_reg4", "moco"),
    *[("siglip2_naflex", mode) for mode in ("jax", "moco")],
    *[("aimv2", mode) for mode in ("jax", "moco")],
]
#: full-size rows, as registered (a few seconds each)
FULL_SIZE = [("scratch_vit_ti16", "vit_tiny_patch16_224"), ("scratch_dinov3_s16", "vit_small_patch16_dinov3")]


def _build(name: str, seed: int, **kwargs: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """The model built right after ``manual_seed(seed)``, and the generator's next draw."""
    torch.manual_seed(seed)
    model = timm.create_model(name, **kwargs)
    return model, torch.rand(4)


def assert_same_draws(ours_name: str, timm_name: str, seed: int = 42, **kwargs: Any) -> None:
    ours, after_ours = _build(ours_name, seed, **kwargs)
    reference, after_reference = _build(timm_name, seed, **kwargs)
    assert torch.equal(after_ours, after_reference), "the generator is left elsewhere than timm's build leaves it"
    mine = ours.state_dict()
    theirs = checkpoint_filter_fn(reference.state_dict(), ours)  # timm's tensors in our names and layout
    assert set(mine) == set(theirs)
    unequal = [key for key, value in theirs.items() if not torch.equal(mine[key], value)]
    assert not unequal, f"{len(unequal)} of {len(mine)} tensors differ from timm's: {unequal[:5]}"


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_builds_timms_weights_and_leaves_the_generator_as_timm(family: str) -> None:
    ours_name, timm_name, overrides = FAMILIES[family]
    assert_same_draws(ours_name, timm_name, **overrides)


@pytest.mark.parametrize("family, mode", SCHEMES, ids=[f"{f}-{m}" for f, m in SCHEMES])
def test_same_seed_same_weights_under_timms_other_schemes(family: str, mode: str) -> None:
    ours_name, timm_name, overrides = FAMILIES[family]
    assert_same_draws(ours_name, timm_name, seed=7, weight_init=mode, **overrides)


@pytest.mark.parametrize("ours_name, timm_name", FULL_SIZE)
def test_same_seed_at_full_size(ours_name: str, timm_name: str) -> None:
    assert_same_draws(ours_name, timm_name, seed=0)


def test_pretrained_loads_draw_nothing(tmp_path) -> None:
    """The weights a checkpoint brings are never drawn: a load leaves the generator where it was."""
    from safetensors.torch import save_file

    small = dict(depth=2)
    save_file(timm.create_model("scratch_vit_ti16", **small).state_dict(), str(tmp_path / "m.safetensors"))
    torch.manual_seed(3)
    timm.create_model(
        "scratch_vit_ti16", pretrained=True, pretrained_cfg_overlay=dict(file=str(tmp_path / "m.safetensors")), **small
    )
    after = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(after, torch.rand(4))


def _run(name: str, overrides: dict[str, Any], steps: int = 2) -> tuple[list[float], torch.Tensor]:
    """timm's recipe: seeded by ``random_seed``, built, then ``steps`` AdamW steps (timm's optimizer factory, its
    weight-decay groups) on one synthetic batch drawn after building; the losses and the generator's next draw."""
    random_seed(42)
    model = timm.create_model(name, num_classes=10, drop_path_rate=0.1, **overrides)
    model.train()
    optimizer = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05)
    size = model.pretrained_cfg["input_size"][1:] if "img_size" not in overrides else (overrides["img_size"],) * 2
    images, labels = torch.randn(2, 3, *size), torch.randint(0, 10, (2,))
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, torch.rand(4)


#: the training run's rows: each family at the small size, fed a smaller image where that keeps it fast
RUNS = {
    family: (ours, theirs, {**overrides, **({"img_size": 224} if family == "dinov3" else {})})
    for family, (ours, theirs, overrides) in FAMILIES.items()
    if family != "eva02_base"
}


@pytest.mark.parametrize("family", RUNS)
def test_same_seed_same_training_run(family: str) -> None:
    ours_name, timm_name, overrides = RUNS[family]
    our_losses, our_next = _run(ours_name, overrides)
    timm_losses, timm_next = _run(timm_name, overrides)
    assert our_losses == timm_losses
    assert torch.equal(our_next, timm_next)
