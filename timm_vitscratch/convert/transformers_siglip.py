"""transformers' ``SiglipVisionModel`` / ``Siglip2VisionModel``: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.transformers_siglip`), for the ``transformers`` source: the config.json's facts, the
reference model, and the config written on export: a classic (fixed-size) SigLIP row's ``SiglipVisionConfig``, a
NaFlex row's ``Siglip2VisionConfig``.

A full model's config (``model_type`` ``siglip`` / ``siglip2``) holds the tower's in ``vision_config``. Every field
is bounded as our own option is, then compared with the weights, before anything is built. The activation is
``hidden_act``: ``gelu_pytorch_tanh`` (the config classes' default) is timm's ``gelu_tanh``.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..choices import MAX_EMBED_DIM, MAX_MLP_RATIO, MAX_PATCHES
from ..errors import ConversionError, shown
from ..layouts.checkpoint import Checkpoint
from ..layouts.transformers_siglip import (
    MARKER,
    SIGLIP2_CHANNELS,
    SIGLIP2_RESAMPLE,
    has_head,
    is_siglip2,
    siglip_ignorable_keys,
    siglip_prefix,
)
from ..models.architecture import Arch
from .source_format import Reference, ReferenceSpec, round_parameters
from .transformers_dinov3 import (
    VIT_CONFIG_FIELDS,
    WHERE,
    bounded_fields,
    config_choice,
    config_flags,
    config_integers,
    config_model_type,
    quiet_transformers,
)

#: model_type of the vision tower's config, and of the full model's that holds it in ``vision_config``
TOWER_TYPES = {"siglip_vision_model": "SigLIP", "siglip2_vision_model": "SigLIP 2"}
FULL_TYPES = {"siglip": "SigLIP", "siglip2": "SigLIP 2"}
#: transformers' activation names -> timm's (None: exact GELU, the default)
ACTS: dict[str, str | None] = {"gelu_pytorch_tanh": "gelu_tanh", "gelu": None}
#: SiglipVisionConfig's and Siglip2VisionConfig's own defaults, which a bare state dict was made with
CONFIG_DEFAULTS = {"hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}


def _kind(checkpoint: Checkpoint) -> str:
    return "SigLIP 2" if is_siglip2(checkpoint) else "SigLIP"


def vision_config(checkpoint: Checkpoint) -> dict[str, Any]:
    """The vision tower's config.json fields ({} without a config), refused when it is another model's."""
    config = checkpoint.side_config
    if not config:
        return {}
    found, kind = config.get("model_type"), _kind(checkpoint)
    if not isinstance(found, str):
        found = None  # not a name: shown below, escaped and cut
    if found in FULL_TYPES and FULL_TYPES[found] == kind:
        tower = config.get("vision_config")
        if not isinstance(tower, dict):
            raise ConversionError(f"{WHERE} is a {shown(found)} model without a vision_config object", checkpoint.path)
        return tower
    if found in TOWER_TYPES and TOWER_TYPES[found] == kind:
        return config
    expected = [t for t, k in {**TOWER_TYPES, **FULL_TYPES}.items() if k == kind]
    raise ConversionError(
        f"{WHERE} is model_type {config_model_type(config)}, but the weights are a {kind} vision tower's; expected "
        f"{' or '.join(repr(t) for t in expected)}",
        checkpoint.path,
    )


def _bounded(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The architecture fields present, each inside the bounds our own option has."""
    fields = bounded_fields(config, VIT_CONFIG_FIELDS, path)
    highs = {"intermediate_size": int(MAX_EMBED_DIM * MAX_MLP_RATIO), "num_patches": MAX_PATCHES}
    fields.update(config_integers(config, highs, path))
    why = "the activations of timm's SigLIP"
    fields["hidden_act"] = config_choice(
        config, "hidden_act", tuple(ACTS), str(CONFIG_DEFAULTS["hidden_act"]), why, path
    )
    config_flags(config, ("vision_use_head",), path)
    return fields


def _found(checkpoint: Checkpoint, keys: set[str], depth: int) -> dict[str, Any]:
    """What the weights say of the fields a config states."""
    prefix = siglip_prefix(keys) or ""
    stem = tuple(checkpoint.shape(prefix + MARKER))
    table = tuple(checkpoint.shape(prefix + "embeddings.position_embedding.weight"))
    fc1 = tuple(checkpoint.shape(f"{prefix}encoder.layers.0.mlp.fc1.weight"))
    if len(stem) == 2:  # SigLIP 2: channels x patch x patch inputs
        channels, patch = SIGLIP2_CHANNELS, math.isqrt(stem[1] // SIGLIP2_CHANNELS)
    else:
        channels, patch = stem[1], stem[2]
    return {
        "num_hidden_layers": depth,
        "hidden_size": stem[0],
        "num_channels": channels,
        "patch_size": patch,
        "intermediate_size": fc1[0],
        "positions": table[0],
        "vision_use_head": has_head(keys),
    }


def siglip_hints(checkpoint: Checkpoint, keys: set[str], depth: int) -> dict[str, Any]:
    """Heads, eps, activation and image size from the config beside the weights, checked against them."""
    config = vision_config(checkpoint)
    fields = _bounded(config, checkpoint.path)
    found = _found(checkpoint, keys, depth)
    stated = {**fields, **({"vision_use_head": config["vision_use_head"]} if "vision_use_head" in config else {})}
    wrong = [f"{k} {stated[k]} (the weights: {v})" for k, v in found.items() if k in stated and stated[k] != v]
    heads = fields.get("num_attention_heads")
    if heads is not None and found["hidden_size"] % heads:
        wrong.append(f"num_attention_heads {heads} (does not divide width {found['hidden_size']})")
    if is_siglip2(checkpoint):
        side = fields.get("num_patches", found["positions"])
        grid = (math.isqrt(side),) * 2
        if side != found["positions"]:
            wrong.append(f"num_patches {side} (the weights: a table of {found['positions']})")
        elif grid[0] ** 2 != side:
            wrong.append(f"num_patches {side} (SigLIP 2's table is a square grid)")
    else:
        size = fields.get("image_size")
        grid = (size // found["patch_size"],) * 2 if isinstance(size, int) else (0, 0)
        if size is not None and grid[0] * grid[1] != found["positions"]:
            wrong.append(f"image_size {size} ({grid[0] * grid[1]} patches; the weights: {found['positions']})")
    if wrong:
        raise ConversionError(
            f"{WHERE} does not describe these {_kind(checkpoint)} weights: {'; '.join(wrong)}; expected the config "
            f"saved with them",
            checkpoint.path,
        )
    hints: dict[str, Any] = {"norm_eps": float(fields.get("layer_norm_eps", CONFIG_DEFAULTS["layer_norm_eps"]))}
    act = ACTS[fields["hidden_act"]]
    if act:
        hints["act_layer"] = act
    if heads is not None:
        hints["num_heads"] = heads
    if grid[0]:
        hints["img_size"] = grid[0] * found["patch_size"]
    if config:
        hints["stated_by"] = WHERE
    return hints


def siglip_recorded(checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
    """A config records eps and activation (its own, or its class's defaults, which transformers builds)."""
    heads = {"num_heads"} & set(hints)
    return heads | {"act_layer", "norm_eps"} if checkpoint.side_config else heads


def siglip_options(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """timm's SigLIP: no class token, the MAP pool; a tower without a head pools by the mean (timm's ``_gap``)."""
    if "attn_pool.latent" in shapes:
        return {"class_token": False, "global_pool": "map"}
    return {"class_token": False, "global_pool": "avg", "fc_norm": False}


def is_siglip_shapes(shapes: dict[str, tuple[int, ...]]) -> bool:
    """Our-layout shapes of a SigLIP tower (no class token; ViT and DINOv3 have one)."""
    return "patch_embed.proj.weight" in shapes and "cls_token" not in shapes


def is_siglip_args(args: dict[str, Any]) -> bool:
    """A model's constructor arguments are SigLIP's (no class token, no rotary): exported as a SiglipVisionModel,
    or a Siglip2VisionModel when they are a NaFlex row's (:func:`is_naflex_args`)."""
    return args.get("class_token") is False and not args.get("rope_type")


def is_naflex_args(args: dict[str, Any]) -> bool:
    """A SigLIP 2 NaFlex row's arguments (timm ``NaFlexVit``'s embedding): exported as a Siglip2VisionModel, which
    takes images of any shape as NaFlex does; a classic row takes its one size, as a SiglipVisionModel does."""
    return bool(args.get("naflex_embeds"))


def siglip_config(arch: Arch, siglip2: bool) -> Any:
    """The ``SiglipVisionConfig`` or ``Siglip2VisionConfig`` of an architecture (the reference; export's)."""
    import transformers

    if arch.num_heads is None:
        raise ConversionError("the head count is unknown: pass --num-heads")
    act = arch.options.get("act_layer") or "gelu"
    common: dict[str, Any] = dict(
        hidden_size=arch.embed_dim,
        intermediate_size=arch.mlp_hidden,
        num_hidden_layers=arch.depth,
        num_attention_heads=arch.num_heads,
        num_channels=arch.in_chans,
        patch_size=arch.patch_size,
        hidden_act=next(t for t, ours in ACTS.items() if (ours or "gelu") == act),
        layer_norm_eps=arch.norm_eps,
        vision_use_head=arch.options.get("global_pool") == "map",
    )
    if siglip2:
        return transformers.Siglip2VisionConfig(num_patches=arch.grid[0] * arch.grid[1], **common)
    return transformers.SiglipVisionConfig(image_size=arch.img_size[0], **common)


def patchify(x: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, patches, patch * patch * C), each patch flattened as SigLIP 2's processor does."""
    batch, channels, height, width = x.shape
    grid = x.reshape(batch, channels, height // patch, patch, width // patch, patch)
    return grid.permute(0, 2, 4, 3, 5, 1).reshape(batch, (height // patch) * (width // patch), -1)


def siglip2_inputs(x: torch.Tensor, patch: int) -> dict[str, torch.Tensor]:
    """A Siglip2VisionModel's inputs for a batch of same-size images: patches, every one valid, and the grid."""
    patches = patchify(x, patch)
    grid = torch.tensor([[x.shape[2] // patch, x.shape[3] // patch]] * x.shape[0])
    mask = torch.ones(patches.shape[:2], dtype=torch.int32)
    return dict(pixel_values=patches, pixel_attention_mask=mask, spatial_shapes=grid)


def siglip_reference(checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
    """transformers' own vision model with the checkpoint's vision tensors (prefix less, as transformers 5 saves)."""
    import transformers

    arch, siglip2 = spec.arch, is_siglip2(checkpoint)
    keys = set(checkpoint.keys())
    prefix, dropped = siglip_prefix(keys) or "", siglip_ignorable_keys(checkpoint)
    cls = transformers.Siglip2VisionModel if siglip2 else transformers.SiglipVisionModel
    with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
        siglip_config(arch, siglip2).save_pretrained(tmp)
        tensors = {
            k.removeprefix(prefix): v.contiguous() for k, v in checkpoint.state_dict().items() if k not in dropped
        }
        save_file(tensors, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        model = cls.from_pretrained(tmp, attn_implementation="eager")
    round_parameters(model.float().eval(), spec.round_to)
    interpolate = tuple(spec.img_size) != tuple(arch.img_size)

    def features(x: torch.Tensor) -> torch.Tensor:
        if siglip2:
            out = model(**siglip2_inputs(x, arch.patch_size))
        else:
            out = model(pixel_values=x, interpolate_pos_encoding=interpolate)
        return out.pooler_output if out.pooler_output is not None else out.last_hidden_state.mean(dim=1)

    return Reference(features, None, f"transformers' {cls.__name__}")


#: PIL's resampling filters (a processor's ``resample``) -> timm's interpolation names
INTERPOLATIONS = {3: "bicubic", 2: "bilinear", 0: "nearest", 1: "lanczos"}


def siglip_preprocessing(processor: dict[str, Any]) -> dict[str, Any]:
    """timm's eval transform for a SigLIP processor's fields (a SiglipImageProcessor as Google's resizes straight
    to the size: ``squash``; as our export writes timm's: the short side to ``size / crop_pct``, then the centre
    cut); the resampling filter. Fields of another shape or type say nothing (the row's own stay)."""
    cfg: dict[str, Any] = {}
    resample = processor.get("resample")
    if type(resample) is int and resample in INTERPOLATIONS:
        cfg["interpolation"] = INTERPOLATIONS[resample]
    size, crop = processor.get("size"), processor.get("crop_size")
    if not isinstance(size, dict):
        return cfg
    if not processor.get("do_center_crop", False):
        if type(size.get("height")) is int and type(size.get("width")) is int:
            cfg.update(crop_pct=1.0, crop_mode="squash")
        return cfg
    edge, side = size.get("shortest_edge"), crop.get("height") if isinstance(crop, dict) else None
    if type(edge) is int and type(side) is int and 0 < side <= edge <= MAX_PATCHES * side:
        cfg.update(crop_pct=_crop_pct(side, edge), crop_mode="center")
    return cfg


def _crop_pct(side: int, edge: int) -> float:
    """The shortest crop fraction timm resizes by to ``edge`` (``floor(side / crop_pct)``) for a crop of ``side``."""
    for digits in (2, 3, 4):
        pct = round(side / edge, digits)
        if 0 < pct <= 1 and math.floor(side / pct) == edge:
            return pct
    return side / edge


#: model options a SiglipVisionModel / Siglip2VisionModel has no place for, with the value it builds
NOT_IN_SIGLIP = {
    "class_token": False,
    "reg_tokens": 0,
    "distilled": False,
    "representation_size": None,
    "init_values": None,
    "qk_norm": False,
    "pre_norm": False,
    "final_norm": True,
    "qkv_bias": True,
    "proj_bias": True,
    "rope_type": "",
    "pos_embed": "learn",
    "swiglu_mlp": False,
    "eva_names": False,
    "in_chans": SIGLIP2_CHANNELS,
}


def siglip_export_config(arch: Arch, args: dict[str, Any]) -> tuple[Any, list[str]]:
    """The config a SigLIP model ``args`` (its full constructor arguments) is written with, and notes: a classic row's
    SiglipVisionConfig (its image size: the model transformers runs at it is ours there, as timm's is), a NaFlex
    row's Siglip2VisionConfig (its patch budget); refuses what that class cannot hold."""
    naflex = is_naflex_args(args)
    target = "Siglip2VisionModel" if naflex else "SiglipVisionModel"
    odd = [f"{k}={args.get(k)!r}" for k, v in NOT_IN_SIGLIP.items() if not _same(args.get(k, v), v)]
    pool = args.get("global_pool")
    if pool not in ("map", "avg") or (pool == "avg" and args.get("fc_norm") is not False):
        odd.append(f"global_pool={pool!r}, fc_norm={args.get('fc_norm')!r} (its pooling is the MAP head, or none)")
    if args.get("act_layer") not in (None, "", "gelu", "gelu_tanh"):
        odd.append(f"act_layer={args['act_layer']!r}")
    if args.get("attn_pool_num_heads") not in (None, arch.num_heads):
        odd.append(f"attn_pool_num_heads={args['attn_pool_num_heads']!r} (its head uses the blocks' heads)")
    if arch.grid[0] != arch.grid[1]:
        odd.append(f"a {arch.grid[0]}x{arch.grid[1]} position table (its table is a square grid)")
    if naflex and args.get("pos_embed_interp_mode", "bicubic") != SIGLIP2_RESAMPLE.interpolation:
        # a NaFlex row meets images of any grid: the table must resample as transformers' does, bilinearly
        odd.append(
            f"pos_embed_interp_mode={args.get('pos_embed_interp_mode', 'bicubic')!r} (it resamples the position "
            f"table to each image's grid bilinearly, with antialiasing)"
        )
    if odd:
        raise ConversionError(f"transformers' {target} has no place for {', '.join(odd)}")
    if arch.num_classes:
        raise ConversionError(
            f"transformers' {target} has no classifier, and this model has one of {arch.num_classes} "
            f"classes; export it to timm, or export a num_classes=0 model"
        )
    options = {k: args[k] for k in ("act_layer", "global_pool") if args.get(k) is not None}
    notes = [] if pool == "map" else [f"this model has no MAP head: the {target} is written without one"]
    return siglip_config(replace(arch, options=options), naflex), notes


def _same(value: Any, default: Any) -> bool:
    """An option at what the target builds (None, 0 and '' all mean "none")."""
    return bool(value == default or (not value and not default and type(default) is not bool))
