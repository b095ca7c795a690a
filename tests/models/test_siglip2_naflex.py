"""SigLIP 2 NaFlex, which timm builds with its ``NaFlexVit``: ours, the one ``VisionTransformer``, against timm's.

The rows are built with ``naflex_embeds``: their module tree is timm's (``embeds``: a Linear patch projection, a
(1, 16, 16, D) position table), so timm's model (tiny width and depth, every parameter perturbed) and ours load each
other's state dicts strict with no filter. Ours gives timm's outputs on plain images at the default 384 px and a
non-square size, and on a NaFlex batch made by timm's ``Patchify`` / ``NaFlexCollator``, packed and padded; every
module fires with timm's tensors, and a peft LoRA adapter trained on timm's model gives ours timm's outputs. The
classic ViT's layout (``patch_embed.proj`` a Conv2d, what the rows held before) still loads. An image's output does
not depend on the images it is batched with. The tags load timm's published files from the offline cache. Run with
``-s`` for the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import peft
import pytest
import timm
import torch
from timm.data import resolve_data_config
from timm.models import get_pretrained_cfg
from timm.models.naflexvit import NaFlexVit

from tests.models.test_module_tree_timm import NOTHING_UNEQUAL, hooked_pass, unequal
from tests.support import pretrained_caches
from tests.support.dinov3_pairs import max_diff, perturbed
from tests.support.naflex_batches import MIXED_SIZES, images, naflex_batch
from tests.support.pretrained_caches import lay_in_hf_cache, save_safetensors
from timm_vitscratch import VisionTransformer
from timm_vitscratch.errors import ConversionError
from timm_vitscratch.inspect.counts import true_param_count
from timm_vitscratch.model_dir import read_config, save_model_directory
from timm_vitscratch.models.checkpoint_filter import checkpoint_filter_fn
from timm_vitscratch.models.pretrained import TIMM_TAGS
from timm_vitscratch.models.variants import SIGLIP2_NAFLEX_TIMM_NAMES

TOL = 1e-5
NAMES = sorted(SIGLIP2_NAFLEX_TIMM_NAMES)
#: tiny models of each row (so400m keeps its MLP ratio 3.7362); the grid of the position table stays timm's 16x16
TINY = dict(embed_dim=64, depth=2, num_heads=2, num_classes=5)
#: the default input (timm's cfg: 384 px, a 24x24 grid from the 16x16 table) and a non-square one (10x20: the
#: table shrunk along one axis, stretched along the other)
SIZES = ((384, 384), (160, 320))
#: NaFlex images at patch 16: MIXED_SIZES twice over (grids of 1 to 7 patches a side: the table shrunk), and one of
#: 20x17 patches (stretched)
NAFLEX_SIZES = tuple((2 * h, 2 * w) for h, w in MIXED_SIZES) + ((320, 272),)
MAX_SEQ_LEN = 400


def pair(name: str, **overrides: Any) -> tuple[NaFlexVit, VisionTransformer]:
    """timm's NaFlexVit of ``name``'s architecture (perturbed) and ours loaded strict from its state dict, in eval."""
    reference = cast(NaFlexVit, perturbed(timm.create_model(SIGLIP2_NAFLEX_TIMM_NAMES[name], **TINY, **overrides)))
    ours = cast(VisionTransformer, timm.create_model(name, **TINY, **overrides)).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)  # timm's names are ours
    return reference, ours


def _tree(model: torch.nn.Module) -> list[tuple[str, str]]:
    return [(n, type(m).__name__) for n, m in model.named_modules()]


#: the one class each tree names otherwise: the model itself and the attention pool (timm's ``AttentionPoolLatent``)
OUR_CLASSES = {"": ("VisionTransformer", "NaFlexVit"), "attn_pool": ("AttentionPool", "AttentionPoolLatent")}


@pytest.mark.parametrize("name", NAMES)
def test_the_module_tree_and_state_dict_are_timms_and_load_strict_both_ways_with_no_filter(name: str) -> None:
    reference, ours = pair(name)
    mine, theirs = _tree(ours), _tree(reference)
    assert [n for n, _ in mine] == [n for n, _ in theirs]
    differ = {n: (a, b) for (n, a), (_, b) in zip(mine, theirs, strict=True) if a != b}
    assert differ == OUR_CLASSES
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [
        (k, v.shape) for k, v in reference.state_dict().items()
    ]
    assert checkpoint_filter_fn(reference.state_dict(), ours).keys() == ours.state_dict().keys()
    # strict both ways, no filter: timm's NaFlexVit loads ours as it is
    fresh = cast(NaFlexVit, timm.create_model(SIGLIP2_NAFLEX_TIMM_NAMES[name], **TINY))
    fresh.load_state_dict(ours.state_dict(), strict=True)
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in fresh.state_dict().items())
    classes = ", ".join(f"{n or 'the model'} {a}" for n, (a, _) in differ.items())
    print(
        f"{name}: {len(mine)} modules named as timm's NaFlexVit ({len(differ)} of our classes: {classes}), "
        f"{len(ours.state_dict())} tensors, strict both ways"
    )


@pytest.mark.parametrize("name", NAMES)
def test_the_classic_layout_the_rows_held_before_still_loads(name: str) -> None:
    """The classic ViT's layout of the same model (``naflex_embeds=False``: ``patch_embed.proj`` a Conv2d, a
    (1, 256, D) table, ``pos_drop`` and the rest at the top) loads strict, through the load pre-hook, and back."""
    classic = cast(VisionTransformer, timm.create_model(name, naflex_embeds=False, **TINY)).eval()
    _, ours = pair(name)
    classic.load_state_dict(ours.state_dict(), strict=True)
    again = cast(VisionTransformer, timm.create_model(name, **TINY)).eval()
    again.load_state_dict(classic.state_dict(), strict=True)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in ours.state_dict().items())
    x = torch.randn(2, 3, 160, 320, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_diff(classic(x), ours(x)) <= TOL


@pytest.mark.parametrize("name", NAMES)
def test_plain_images_give_timms_outputs_at_the_default_and_a_non_square_size(name: str) -> None:
    reference, ours = pair(name)
    for size in SIZES:
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            final_t, inter_t = reference.forward_intermediates(x)
            final_o, inter_o = ours.forward_intermediates(x)
            diffs = {
                "forward": max_diff(reference(x), ours(x)),
                "forward_features": max_diff(reference.forward_features(x), ours.forward_features(x)),
                "forward_intermediates": max(
                    max_diff(a, b) for a, b in zip([final_t, *inter_t], [final_o, *inter_o], strict=True)
                ),
            }
        print(
            f"{name} vs {SIGLIP2_NAFLEX_TIMM_NAMES[name]} (tiny) at {size[0]}x{size[1]}: "
            + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
        )
        assert all(d <= TOL for d in diffs.values()), diffs


def test_set_input_size_resamples_the_table_as_the_forward_does() -> None:
    """After ``set_input_size(384)`` the table is timm's resampled once to 24x24, bilinearly: the outputs stay timm's."""
    reference, ours = pair("scratch_siglip2_b16_naflex")
    ours.set_input_size(img_size=384)
    assert ours.embeds is not None and tuple(ours.embeds.pos_embed.shape) == (1, 24, 24, 64)
    x = torch.randn(2, 3, 384, 384, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_diff(reference(x), ours(x)) <= TOL


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
@pytest.mark.parametrize("name", NAMES)
def test_a_naflex_batch_gives_timms_naflexvit_outputs_and_each_image_alone(name: str, packed: bool) -> None:
    reference, ours = pair(name)
    ours.set_naflex_packed(packed)
    pictures = images(NAFLEX_SIZES)
    batch = naflex_batch(pictures, patch_size=16, max_seq_len=MAX_SEQ_LEN)
    valid = batch["patch_valid"]
    with torch.no_grad():
        logits = ours(batch)
        features = ours.forward_features(batch)["patches"]
        timm_features = reference.forward_features(batch["patches"], batch["patch_coord"], batch["patch_valid"])
        kept = ours.forward_intermediates(batch, indices=[0, 1], output_fmt="NLC", intermediates_only=True)
        timm_kept = reference.forward_intermediates(batch, indices=[0, 1], output_fmt="NLC", intermediates_only=True)
        diffs = {
            "timm NaFlexVit": max_diff(logits, reference(batch)),
            "features": max_diff(features[valid], timm_features["patches"][valid]),
            "intermediates": max(max_diff(a[valid], b[valid]) for a, b in zip(kept, timm_kept, strict=True)),
            "each image alone": max_diff(logits, torch.cat([ours(picture[None]) for picture in pictures])),
        }
    print(
        f"{name} NaFlex batch of {len(pictures)} images, {'packed' if packed else 'padded'}: "
        + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
    )
    assert all(v <= TOL for v in diffs.values()), diffs
    assert not features[~valid].any()  # zeros at padding


@pytest.mark.parametrize("name", NAMES)
def test_an_images_output_does_not_depend_on_its_companions(name: str) -> None:
    """The same image batched alone, with 2, 3 or 6 others of other sizes, first or last, padded to 3 lengths."""
    _, ours = pair(name)
    first, *others = images(NAFLEX_SIZES)
    batches = [
        ([first], 64),
        ([first, *others[:2]], 128),
        ([*others[2:5], first], MAX_SEQ_LEN),
        ([first, *others[::-1]], MAX_SEQ_LEN),
    ]
    outputs = []
    with torch.no_grad():
        for packed in (True, False):
            ours.set_naflex_packed(packed)
            for group, length in batches:
                logits = ours(naflex_batch(group, patch_size=16, max_seq_len=length))
                outputs.append(logits[next(i for i, picture in enumerate(group) if picture is first)])
    spread = max(max_diff(a, outputs[0]) for a in outputs)
    print(
        f"{name}: one image in {len(batches)} batches of other companions and lengths, packed and padded: "
        f"largest difference {spread:.1e}"
    )
    assert spread <= TOL


def test_every_module_fires_with_timms_tensors() -> None:
    """Plain images: every module of timm's tree fires in ours with timm's outputs and output gradients (``embeds``:
    its tokens; ``embeds.proj`` and ``embeds.norm``: their outputs only), and every parameter gets timm's gradient."""
    reference, ours = pair("scratch_siglip2_so400m16_naflex")
    x = torch.randn(2, 3, 160, 320, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, TINY["num_classes"], generator=torch.Generator().manual_seed(2))
    names = [n for n, _ in reference.named_modules()]
    # timm adds the positions in place to what ``embeds.proj`` / ``embeds.norm`` return (the norm an Identity): a
    # backward hook on either would forbid it; their parameters' gradients are compared
    once = ["embeds.proj", "embeds.norm"]
    theirs, mine = (hooked_pass(model, names, x, weights, forward_only=once) for model in (reference, ours))
    # timm's NaFlexVit runs its blocks one by one, never ``blocks`` itself; ours calls it, as timm's classic ViT does
    assert sorted(set(mine[0]) - set(theirs[0])) == ["blocks"]
    mine[0].pop("blocks"), mine[1].pop("blocks")
    silent = sorted(n for n in set(names) - set(theirs[0]) if not n.endswith("attn_drop") and n != "blocks")
    assert silent == [], silent
    bad = unequal(theirs, mine, TOL)
    assert bad == NOTHING_UNEQUAL, bad
    assert sorted(theirs[2]) == sorted(mine[2])
    print(
        f"module tree: {len(names)} modules, {len(theirs[0])} fire with timm's outputs and output gradients, "
        f"{len(mine[2]) - 1} equal parameter gradients"
    )


def _outputs(model: torch.nn.Module, names: list[str], batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())

    def keep(name: str, out: Any) -> None:  # returns None: the module's output stays as it is
        seen.setdefault(name, (out[0] if isinstance(out, tuple) else out).detach().clone())

    handles = [modules[n].register_forward_hook(lambda _m, _i, out, n=n: keep(n, out)) for n in names]
    with torch.no_grad():
        model(batch)
    for handle in handles:
        handle.remove()
    return seen


def _real_tokens(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The real tokens of a per-token output, (B, N, D) or per head (B, heads, N, d); other outputs whole."""
    if x.dim() == 3 and x.shape[1] == valid.shape[1]:
        return x[valid]
    if x.dim() == 4 and x.shape[2] == valid.shape[1]:
        return x.transpose(1, 2)[valid]
    return x


def test_on_the_padded_layout_the_shared_modules_see_timms_tensors_at_the_real_tokens() -> None:
    """A NaFlex batch on timm's padded layout (``set_naflex_packed(False)``): each module's output equals
    timm's at every real token (padded slots are masked out in both, computed differently); packed, the blocks see
    one sequence of the real tokens instead."""
    reference, ours = pair("scratch_siglip2_b16_naflex")
    ours.set_naflex_packed(False)
    batch = naflex_batch(images(NAFLEX_SIZES), patch_size=16, max_seq_len=MAX_SEQ_LEN)
    valid = batch["patch_valid"]
    names = [n for n, _ in reference.named_modules()]
    theirs, mine = _outputs(reference, names, batch), _outputs(ours, names, batch)
    assert sorted(mine) == sorted(theirs)  # with a mask ours runs the blocks one by one too
    silent = sorted(n for n in set(names) - set(theirs) if not n.endswith("attn_drop") and n != "blocks")
    assert silent == [], silent
    diffs = {}
    for name, expected in theirs.items():
        assert mine[name].shape == expected.shape, name
        diffs[name] = max_diff(_real_tokens(mine[name], valid), _real_tokens(expected, valid))
    assert {n: d for n, d in diffs.items() if d > TOL} == {}
    print(f"padded NaFlex batch: {len(theirs)} modules fire, largest difference {max(diffs.values()):.1e}")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda sd: {**sd, "embeds.norm.weight": torch.ones(64)},
            "keys with no place in the model: 'embeds.norm.weight'",
        ),
        (
            lambda sd: {**sd, "embeds.proj.weight": sd["embeds.proj.weight"][:, :588]},
            "embeds.proj.weight (64, 588) is not a Linear over the model's 16x16 patches of 3 channels (768 inputs)",
        ),
    ],
    ids=["embedding norm", "patch size"],
)
def test_a_naflexvit_the_model_cannot_hold_is_refused_in_one_line(
    change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]], message: str
) -> None:
    """Through the filter (and the load pre-hook, for keys the model does not have)."""
    reference, ours = pair("scratch_siglip2_b16_naflex")
    with pytest.raises(ConversionError) as caught:
        checkpoint_filter_fn(change(reference.state_dict()), ours)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    if "norm" not in message:
        return
    with pytest.raises(ConversionError) as caught:
        ours.load_state_dict(change(reference.state_dict()))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_true_counts_equal_timms() -> None:
    """b16 built as it is, so400m on ``meta``: the true parameter count beside timm's NaFlexVit's."""
    counts = {}
    for name in NAMES:
        device = "meta" if "so400m" in name else "cpu"
        with torch.device(device):
            ours, theirs = timm.create_model(name), timm.create_model(SIGLIP2_NAFLEX_TIMM_NAMES[name])
        counts[name] = (true_param_count(ours), true_param_count(theirs))
        print(f"{name}: {counts[name][0]:,} parameters, timm {SIGLIP2_NAFLEX_TIMM_NAMES[name]} {counts[name][1]:,}")
    assert counts == {
        "scratch_siglip2_b16_naflex": (92_930_304, 92_930_304),
        "scratch_siglip2_so400m16_naflex": (427_888_064, 427_888_064),
    }


def test_every_weight_timm_lists_for_the_rows_has_a_tag_with_its_license() -> None:
    ours = {tag: timm_tag for tag, timm_tag in TIMM_TAGS.items() if tag.split(".")[0] in SIGLIP2_NAFLEX_TIMM_NAMES}
    listed = [t for t in timm.list_pretrained("naflexvit_*_siglip*")]
    assert sorted(ours.values()) == sorted(listed) and len(ours) == len(SIGLIP2_NAFLEX_TIMM_NAMES)
    for tag, timm_tag in ours.items():
        variant, name = tag.split("."), timm_tag.split(".")
        assert SIGLIP2_NAFLEX_TIMM_NAMES[variant[0]] == name[0] and variant[1] == name[1], tag
        assert timm.models.get_pretrained_cfg(tag).license == get_pretrained_cfg(timm_tag).license == "apache-2.0"
    print(f"{len(ours)} tags, one per weight timm lists for the NaFlex SigLIP 2 models: {', '.join(sorted(ours))}")


@pytest.mark.parametrize("tag", ["scratch_siglip2_b16_naflex.v2_webli", "scratch_siglip2_so400m16_naflex.v2_webli"])
def test_tag_loads_timms_file_offline_and_the_license_travels(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    """timm's NaFlexVit saved as timm publishes it (depth 1), laid in the offline cache: our tag loads it, gives the
    outputs of timm's model built from the same file with timm's preprocessing, and its model directory records the
    license and rebuilds the same model."""
    timm_tag = TIMM_TAGS[tag]
    caches = pretrained_caches.offline_caches(tmp_path, monkeypatch)  # type: ignore[arg-type]
    source = perturbed(timm.create_model(timm_tag.split(".")[0], depth=1))
    repo_id = get_pretrained_cfg(timm_tag).hf_hub_id
    lay_in_hf_cache(caches, repo_id, {"model.safetensors": save_safetensors(source.state_dict())})
    ours = timm.create_model(tag, pretrained=True, depth=1).eval()
    reference = timm.create_model(timm_tag, pretrained=True, depth=1).eval()
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=reference)
    assert ours.num_classes == reference.num_classes == 0 and ours.pretrained_cfg["license"] == "apache-2.0"
    directory = save_model_directory(ours, tmp_path / "model")  # type: ignore[operator]
    assert read_config(directory)["pretrained_cfg"]["license"] == "apache-2.0"
    again = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    x = torch.randn(1, 3, *ours.pretrained_cfg["input_size"][1:], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff, reloaded = max_diff(ours(x), reference(x)), max_diff(again(x), reference(x))
    print(
        f"{tag} from timm's cached file ({repo_id}): vs timm's {timm_tag} {diff:.1e}, from its directory {reloaded:.1e}"
    )
    assert diff <= TOL and reloaded <= TOL


def test_an_unknown_resize_mode_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as caught:
        VisionTransformer(img_size=32, patch_size=16, embed_dim=64, depth=1, num_heads=2, pos_embed_interp_mode="area")
    assert str(caught.value) == "pos_embed_interp_mode must be one of ('bicubic', 'bilinear'), got 'area'"


@pytest.mark.slow  # peft's LoRA adapters
def test_a_peft_lora_adapter_trained_on_timms_model_gives_ours_timms_outputs() -> None:
    """LoRA on ``qkv`` and ``proj`` (the patch projection, a Linear in both, and the attention's): the adapter of timm's
    model, trained one step, loads into ours wrapped the same way, with the same keys, and gives timm's outputs."""
    reference, ours = pair("scratch_siglip2_b16_naflex")
    config = dict(r=4, lora_alpha=8, target_modules=["qkv", "proj"])
    torch.manual_seed(0)
    theirs = peft.get_peft_model(reference, peft.LoraConfig(**config))
    torch.manual_seed(0)
    mine = peft.get_peft_model(ours, peft.LoraConfig(**config))
    x = torch.randn(2, 3, 160, 320, generator=torch.Generator().manual_seed(0))
    assert max_diff(theirs(x), mine(x)) == 0  # the same seed, the same adapters: the same targets in the same order
    optimizer = torch.optim.SGD([p for p in theirs.parameters() if p.requires_grad], lr=0.5)
    theirs.train()
    theirs(x).square().sum().backward()
    optimizer.step()
    adapter = peft.get_peft_model_state_dict(theirs)
    assert set(adapter) == set(peft.get_peft_model_state_dict(mine))
    assert any(k.startswith("base_model.model.embeds.proj.") for k in adapter)
    result = peft.set_peft_model_state_dict(mine, adapter)
    assert not result.unexpected_keys
    theirs.eval(), mine.eval()
    batch = naflex_batch(images(NAFLEX_SIZES), patch_size=16, max_seq_len=MAX_SEQ_LEN)
    with torch.no_grad():
        diffs = {"images": max_diff(theirs(x), mine(x)), "NaFlex batch": max_diff(theirs(batch), mine(batch))}
    print(
        f"peft LoRA on qkv and proj, {len(adapter)} adapter tensors from timm's model: "
        + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())
    )
    assert all(d <= TOL for d in diffs.values()), diffs
