"""What architecture a checkpoint holds: read from tensor shapes, matched to the closest registered variant.

Any architecture the model can express converts: the closest registered variant is the base, and
whatever differs from it (depth, width, heads, MLP ratio, patch, image size, the timm options) is
recorded as ``model_args``. The facts are an :class:`~timm_vitscratch.models.architecture.Arch`, the
same record :func:`~timm_vitscratch.models.architecture.describe_model` gives for a built model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from ..errors import ConversionError
from ..models.architecture import DEFAULT_NORM_EPS, Arch, Shape
from ..models.layers import to_2tuple
from ..models.model_args import DEFAULTS
from ..models.variants import ARCHITECTURES

#: the DINOv3 family's shared arguments (every scratch_dinov3_* variant has them)
DINOV3_ARGS = ARCHITECTURES["scratch_dinov3_s16"]

#: timm's usual attention head width: the head count assumed when nothing says otherwise
HEAD_DIM = 64


def _need(shapes: Mapping[str, Shape], key: str, what: str, sources: Mapping[str, tuple[str, ...]]) -> Shape:
    if key not in shapes:
        names = ", ".join(repr(s) for s in sources.get(key, (key,)))
        raise ConversionError(f"missing key: no {what} ({names})")
    return shapes[key]


def _no_variant(problem: str) -> ConversionError:
    return ConversionError(f"the tensor shapes match no ViT the scratch model can express: {problem}")


def infer_arch(
    shapes: Mapping[str, Shape],
    depth: int,
    hints: Mapping[str, Any],
    sources: Mapping[str, tuple[str, ...]],
    options: Mapping[str, Any] | None = None,
    recorded: AbstractSet[str] | None = None,
) -> Arch:
    """Architecture from our-layout shapes (``sources`` names the source keys for error messages).

    ``recorded``: which of the activation and eps the source fixes (default: those ``hints`` give); the
    others are built at timm's defaults and listed in ``Arch.assumed``.
    """
    if depth < 1:
        raise ConversionError("no transformer blocks found")
    options = dict(options or {})
    if hints.get("act_layer"):  # shapes cannot tell the activation: only a config or train.py args say it
        options["act_layer"] = hints["act_layer"]
    if "rope_temperature" in hints and options.get("rope_type"):  # nor a rotary's base, unless stored (Meta's periods)
        options["rope_temperature"] = hints["rope_temperature"]
    patch = _need(shapes, "patch_embed.proj.weight", "patch embedding", sources)
    if len(patch) != 4 or patch[2] != patch[3]:
        raise _no_variant(f"patch embedding has shape {patch}, expected (embed_dim, channels, patch, patch)")
    embed_dim, in_chans, patch_size = patch[0], patch[1], patch[2]
    for fact, found in (("depth", depth), ("embed_dim", embed_dim)):
        stated = hints.get(fact)
        if stated is not None and stated != found:
            what = f"{found} blocks" if fact == "depth" else f"a width of {found}"
            raise ConversionError(
                f"the checkpoint's own {hints.get('stated_by', 'config')} say {fact} {stated}, but "
                f"its weights hold {what}: tensors are missing or the config is not this model's"
            )
    fused = options.get("qkv_fused", True)  # Eva's separate q/k/v projections (EVA02 base and large)
    qkv_key, rows = ("blocks.0.attn.qkv.weight", 3) if fused else ("blocks.0.attn.q_proj.weight", 1)
    qkv = _need(shapes, qkv_key, "attention projection in block 0", sources)
    if tuple(qkv) != (rows * embed_dim, embed_dim):
        raise _no_variant(
            f"attention projection {qkv_key} is {qkv}, expected {(rows * embed_dim, embed_dim)} for embed_dim "
            f"{embed_dim}"
        )
    swiglu = bool(options.get("swiglu_mlp"))
    packed = swiglu and "blocks.0.mlp.fc1_g.weight" not in shapes  # timm's packed SwiGLU: gate and value in one fc1
    fc1_key = "blocks.0.mlp.fc1_g.weight" if swiglu and not packed else "blocks.0.mlp.fc1.weight"
    fc1 = _need(shapes, fc1_key, "MLP in block 0", sources)
    if len(fc1) != 2 or fc1[1] != embed_dim or (packed and fc1[0] % 2):
        raise _no_variant(f"MLP input projection is {fc1}, expected ({'2 x ' if packed else ''}hidden, {embed_dim})")
    distilled = "dist_token" in shapes
    arch = Arch(
        patch_size=patch_size,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=hints.get("num_heads"),
        in_chans=in_chans,
        grid=(0, 0),
        num_classes=0,
        representation_size=None,
        distilled=distilled,
        mlp_hidden=fc1[0] // 2 if packed else fc1[0],
        norm_eps=hints.get("norm_eps", family_norm_eps(options)),
        options=options,
    )
    if options.get("pos_embed") == "none":  # rotary position: any size runs; the size is the config's or the family's
        size = to_2tuple(hints.get("img_size") or family_img_size(options), "img_size")
        arch.grid = (size[0] // patch_size, size[1] // patch_size)
    else:
        pos = _need(shapes, "pos_embed", "position embedding", sources)
        if len(pos) != 3 or pos[0] != 1 or pos[2] != embed_dim:
            raise _no_variant(f"position embedding is {pos}, expected (1, tokens, {embed_dim})")
        arch.grid = _grid(
            pos[1] - arch.pos_prefix_tokens, hints.get("img_size"), patch_size, arch.pos_prefix_tokens, pos[1]
        )
    if "pre_logits.fc.weight" in shapes:
        rep_shape = shapes["pre_logits.fc.weight"]
        if len(rep_shape) != 2 or rep_shape[1] != embed_dim:
            raise _no_variant(f"representation layer is {rep_shape}, expected (size, {embed_dim})")
        arch.representation_size = rep_shape[0]
    if "head.weight" in shapes:
        head = shapes["head.weight"]
        expected_in = arch.representation_size or embed_dim
        if len(head) != 2 or head[1] != expected_in:
            raise _no_variant(f"classifier is {head}, expected (classes, {expected_in})")
        arch.num_classes = head[0]
    for fact in ("num_classes", "representation_size"):
        if fact in hints and hints[fact] != getattr(arch, fact):
            raise ConversionError(
                f"the checkpoint's own {hints.get('stated_by', 'config')} say {fact} {hints[fact]}, "
                f"but its weights have {getattr(arch, fact)}: the config is not this model's"
            )
    if int(embed_dim * arch.mlp_ratio) != arch.mlp_hidden:
        raise _no_variant(f"MLP width {arch.mlp_hidden} is not a ratio of embed_dim {embed_dim} the model rebuilds")
    recorded = set(hints) if recorded is None else recorded
    if swiglu:  # the gate's SiLU is part of SwiGLU (its names say it), not an activation to choose
        recorded = recorded | {"act_layer"}
    for fact, value in (("act_layer", options.get("act_layer") or "gelu"), ("norm_eps", arch.norm_eps)):
        if fact not in recorded:
            arch.assumed[fact] = value
    return arch


def family_norm_eps(options: Mapping[str, Any]) -> float:
    """The LayerNorm eps a family's models use when nothing records it: DINOv3's 1e-5, else timm's ViT's 1e-6."""
    return float(DINOV3_ARGS["norm_eps"]) if options.get("rope_type") == "dinov3" else DEFAULT_NORM_EPS


def family_img_size(options: Mapping[str, Any]) -> int:
    """The input size of a model without a position table (its variants' size; any size runs)."""
    return int(DINOV3_ARGS["img_size"]) if options.get("rope_type") == "dinov3" else int(DEFAULTS["img_size"])


def _grid(num_patches: int, img_size: Any, patch_size: int, prefix: int, tokens: int) -> tuple[int, int]:
    if img_size is not None:
        height, width = to_2tuple(img_size, "img_size")
        grid = (height // patch_size, width // patch_size)
        if grid[0] * grid[1] == num_patches:
            return grid
        raise _no_variant(
            f"position embedding has {num_patches} patch positions, but the side config's image size "
            f"{height}x{width} at patch {patch_size} needs {grid[0] * grid[1]}"
        )
    side = math.isqrt(max(num_patches, 0))
    if num_patches < 1 or side * side != num_patches:
        raise _no_variant(
            f"position embedding has {tokens} positions, which is not {prefix} prefix token(s) plus a square "
            f"patch grid; give the image size of a non-square model in its config"
        )
    return side, side


def variant_args(name: str) -> dict[str, Any]:
    """The constructor arguments registered variant ``name`` is built with (its table entry over the defaults)."""
    return {**DEFAULTS, **ARCHITECTURES[name]}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        try:
            return to_2tuple(a, "size") == to_2tuple(b, "size")
        except (TypeError, ValueError):
            return False
    return a == b


#: options that set a model family apart (a DINOv3 checkpoint becomes a DINOv3 variant, a classic one a classic)
FAMILY_OPTIONS = ("rope_type", "eva_names", "pos_embed", "class_token", "pre_norm")
#: options that tell variants of one family apart at one width (S vs S+, with or without q/v biases, registers;
#: EVA02's base from its tiny and its CLIP tower; PE core from spatial)
VARIANT_OPTIONS = ("swiglu_mlp", "qkv_bias", "reg_tokens", "qkv_fused", "scale_mlp", "scale_attn_inner", "global_pool")
#: options a variant has that an argument cannot take away (timm's create_model drops arguments that are None)
NOT_REMOVABLE = ("init_values",)


def _differs(spec: Mapping[str, Any], arch: Arch, options: tuple[str, ...]) -> int:
    return sum(arch.options.get(k, DEFAULTS[k]) != spec.get(k, DEFAULTS[k]) for k in options)


def _distance(name: str, arch: Arch) -> tuple[int, ...]:
    spec = variant_args(name)
    return (
        _differs(spec, arch, FAMILY_OPTIONS),
        sum(bool(spec.get(k)) and not arch.options.get(k) for k in NOT_REMOVABLE),
        spec["embed_dim"] != arch.embed_dim,
        spec["patch_size"] != arch.patch_size,
        abs(spec["depth"] - arch.depth),
        (spec.get("representation_size") or 0) != (arch.representation_size or 0),
        _differs(spec, arch, VARIANT_OPTIONS),
        abs(spec["embed_dim"] - arch.embed_dim),
    )


def _spec_text(name: str) -> str:
    spec = variant_args(name)
    rep = spec.get("representation_size")
    return (
        f"patch {spec['patch_size']}, embed_dim {spec['embed_dim']}, depth {spec['depth']}, heads "
        f"{spec['num_heads']}, {f'representation {rep}' if rep else 'no representation layer'}, "
        f"{'distilled' if spec.get('distilled') else 'not distilled'}"
    )


def choose_variant(arch: Arch, requested: str | None = None) -> str:
    """The registered variant to build ``arch`` from: the closest one (same distillation, then same width,
    patch, depth), or ``requested`` after checking that it is the same family (width, patch, distillation)."""
    family = [n for n in ARCHITECTURES if bool(variant_args(n).get("distilled")) == arch.distilled]
    closest = min(family, key=lambda n: _distance(n, arch))
    if requested is not None:
        if requested not in ARCHITECTURES:
            raise ConversionError(f"unknown model {requested!r}; registered: {', '.join(ARCHITECTURES)}")
        spec = variant_args(requested)
        if (spec["embed_dim"], spec["patch_size"], bool(spec.get("distilled"))) != (
            arch.embed_dim,
            arch.patch_size,
            arch.distilled,
        ):
            raise ConversionError(
                f"--model {requested} does not match the checkpoint: {requested} is {_spec_text(requested)}; the "
                f"checkpoint has {arch.describe()} (closest: {closest})"
            )
        return requested
    return closest


def settle_mlp(arch: Arch, name: str) -> None:
    """A SwiGLU's width is ``embed_dim x mlp_ratio`` rounded up to ``swiglu_align_to``: the variant's, unless that
    rounding would not give the checkpoint's width (then none, and the width is exact). Recorded in ``options``
    either way, for the reference model (timm's Eva packs its SwiGLU differently without an alignment)."""
    if not arch.options.get("swiglu_mlp"):
        return
    align = int(variant_args(name).get("swiglu_align_to") or 0)
    width = int(arch.embed_dim * arch.mlp_ratio)
    arch.options["swiglu_align_to"] = align if align and width + (-width % align) == arch.mlp_hidden else 0


def settle_heads(arch: Arch, name: str, requested: int | None = None) -> None:
    """Fill ``arch.num_heads``: ``requested`` (``--num-heads``) wins, then what the source said, then an
    assumption that is recorded in ``arch.heads_note``."""
    if requested is not None:
        if requested < 1 or arch.embed_dim % requested:
            raise ConversionError(f"--num-heads {requested} does not divide embed_dim {arch.embed_dim}")
        arch.num_heads, arch.heads_note = requested, None
        arch.assumed.pop("num_heads", None)
        return
    if arch.num_heads:
        return
    spec = variant_args(name)
    if spec["embed_dim"] == arch.embed_dim:
        arch.num_heads = spec["num_heads"]
        arch.heads_note = (
            f"heads: {arch.num_heads}, assumed from {name} (the checkpoint does not say); "
            f"pass --num-heads N if it used another count"
        )
    else:
        arch.num_heads = max(1, arch.embed_dim // HEAD_DIM) if arch.embed_dim % HEAD_DIM == 0 else 1
        arch.heads_note = (
            f"heads: {arch.num_heads}, assumed ({HEAD_DIM}-wide heads; the checkpoint does not say); "
            f"pass --num-heads N if it used another count"
        )
    arch.assumed = {"num_heads": arch.num_heads, **arch.assumed}


def assumed_text(assumed: Mapping[str, Any]) -> str:
    """``heads=6, act_layer=gelu, norm_eps=1e-06``: assumed facts as the messages show them."""
    shown = {"num_heads": "heads"}
    return ", ".join(
        f"{shown.get(fact, fact)}={value:g}" if isinstance(value, float) else f"{shown.get(fact, fact)}={value}"
        for fact, value in assumed.items()
    )


def how_to_state(assumed: Mapping[str, Any]) -> str:
    """How a user gives the facts in ``assumed`` instead."""
    ways = ["pass --num-heads"] if "num_heads" in assumed else []
    ways.append(
        "convert a directory holding the weights and the source's config.json (or a train.py checkpoint with its args)"
    )
    return " or ".join(ways)


def assumption_notes(heads_note: str | None, assumed: Mapping[str, Any]) -> list[str]:
    """One line per kind of assumption ``convert`` made (empty when the source recorded every fact)."""
    notes = [heads_note] if heads_note else []
    rest = {fact: value for fact, value in assumed.items() if fact != "num_heads"}
    if rest:
        notes.append(
            f"{assumed_text(rest)}: assumed, timm's defaults (no config says); if the model used others, "
            f"convert the directory holding the weights and the source's config.json"
        )
    return notes


def model_args(arch: Arch, name: str, img_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """The ``timm.create_model`` arguments that rebuild exactly this architecture from variant ``name``:
    ``num_classes`` and every architecture argument that differs from the variant's."""
    base = variant_args(name)
    args: dict[str, Any] = {"num_classes": arch.num_classes}
    for key, value in arch.constructor_args(img_size).items():
        if not _same(value, base.get(key)):
            args[key] = value
    return args
