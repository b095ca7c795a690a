"""Hugging Face transformers ViT and DeiT checkpoints: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.transformers`): the config.json's hints, the reference model built by
transformers itself, and the processor's preprocessing."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..choices import MAX_EMBED_DIM, MAX_MLP_RATIO
from ..errors import ConversionError, ModelArgsError, shown
from ..layouts.checkpoint import Checkpoint
from ..layouts.keymap import KeyMap
from ..layouts.transformers import TransformersLayout, is_legacy, model_prefix
from ..layouts.transformers_dinov2 import dinov2_export_map, is_dinov2
from ..layouts.transformers_dinov3 import dinov3_export_map, is_dinov3
from ..layouts.transformers_siglip import is_siglip, is_siglip2, siglip_export_map
from ..models.architecture import Arch
from ..models.layers import to_2tuple
from ..models.model_args import check_option
from .dinov3 import LICENSE, dinov3_options, has_eva_names
from .source_format import Reference, ReferenceSpec, SourceFormat, classifier_input, round_parameters
from .timm_format import FORMAT as TIMM
from .transformers_dinov2 import (
    dinov2_export_config,
    dinov2_hints,
    dinov2_options,
    dinov2_recorded,
    dinov2_reference,
)
from .transformers_dinov3 import (
    VIT_CONFIG_FIELDS,
    config_choice,
    config_flags,
    config_integers,
    dinov3_export_config,
    dinov3_hints,
    dinov3_recorded,
    dinov3_reference,
    quiet_transformers,
)
from .transformers_siglip import (
    is_siglip_args,
    is_siglip_shapes,
    siglip_export_config,
    siglip_hints,
    siglip_options,
    siglip_preprocessing,
    siglip_recorded,
    siglip_reference,
)

#: transformers' own ViTConfig default; a bare state dict without config.json was made with it
TRANSFORMERS_NORM_EPS = 1e-12


#: config.json fields -> the model option whose bounds each keeps (models/model_args.py)
BOUNDED_FIELDS = {**VIT_CONFIG_FIELDS, "pooler_output_size": "representation_size", "num_labels": "num_classes"}
WHERE = "config.json beside the weights"


class TransformersFormat(TransformersLayout, SourceFormat):
    reference_name = "transformers' model"
    export_directory = True  # DINOv3ViTModel / Dinov2Model: config.json + model.safetensors, for AutoModel

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        if is_siglip_shapes(shapes):
            return siglip_options(shapes)
        if has_eva_names(shapes):
            return dinov3_options(shapes)
        if "blocks.0.ls1.gamma" in shapes:  # DINOv2 (a ViT of transformers has no LayerScale)
            return dinov2_options(shapes, TIMM.options(shapes))
        return {}

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        if checkpoint.directory is not None and not checkpoint.side_config:
            # save_pretrained writes config.json beside the weights: without it, nothing says the folder holds the
            # whole model (one shard renamed model.safetensors reads as a model of fewer blocks)
            raise ConversionError(
                "is a transformers model directory without its config.json (or with an empty one): nothing says "
                "these weights are the whole model (not one shard of several, or some of its blocks); expected "
                "the config.json save_pretrained wrote beside them (or pass the weights file itself, to convert it "
                "as a bare state dict with the config class's defaults)",
                checkpoint.directory,
            )
        if is_dinov3(keys):
            return dinov3_hints(checkpoint, keys, self.depth(keys))
        if is_siglip(keys):
            return siglip_hints(checkpoint, keys, self.depth(keys))
        if is_dinov2(keys):
            return dinov2_hints(checkpoint, keys, self.depth(keys))
        config = checkpoint.side_config if "model_type" in checkpoint.side_config else {}
        config_choice(config, "model_type", None, "vit", "the model_type of a ViT or DeiT config", checkpoint.path)
        for field, act in (("hidden_act", "gelu"), ("pooler_act", "tanh")):
            config_choice(config, field, (act,), act, "the scratch ViT uses exact GELU and Tanh", checkpoint.path)
        fields = checked_fields(config, checkpoint.path)
        check_fields_against_weights(fields, config, checkpoint, keys, self.depth(keys))
        # transformers' names for our options
        hints: dict[str, Any] = {"norm_eps": TRANSFORMERS_NORM_EPS}
        for field, option in (("layer_norm_eps", "norm_eps"), ("num_attention_heads", "num_heads")):
            if field in fields:
                hints[option] = fields[field]
        if "image_size" in fields:
            size = fields["image_size"]
            hints["img_size"] = (size, size) if isinstance(size, int) else size
        return hints

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        if is_dinov3(set(checkpoint.keys())):
            return dinov3_recorded(checkpoint, hints)
        if is_siglip(set(checkpoint.keys())):
            return siglip_recorded(checkpoint, hints)
        if is_dinov2(set(checkpoint.keys())):
            return dinov2_recorded(checkpoint, hints)
        # with a config.json, activation and eps are its own (or ViTConfig's defaults, which transformers builds);
        # without one, even the eps hint is only transformers' default, assumed
        if "model_type" not in checkpoint.side_config:
            return {"num_heads"} & set(hints)
        return {"act_layer", "norm_eps"} | ({"num_heads"} & set(hints))

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        processor = checkpoint.preprocess_config
        cfg: dict[str, Any] = {}
        if "image_mean" in processor and "image_std" in processor:
            cfg.update(mean=tuple(processor["image_mean"]), std=tuple(processor["image_std"]))
        if processor and not processor.get("do_center_crop", False):
            cfg["crop_pct"] = 1.0  # the processor resizes straight to the input size
        if is_dinov3(set(checkpoint.keys())):  # the layout of Meta's DINOv3 releases: the family's license
            cfg["license"] = LICENSE
        if is_siglip(set(checkpoint.keys())) and not is_siglip2(checkpoint):  # SiglipImageProcessor: timm's transform
            cfg.update(siglip_preprocessing(processor))
        return cfg

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        import transformers

        keys = set(checkpoint.keys())
        if is_dinov3(keys):
            return dinov3_reference(checkpoint, spec)
        if is_siglip(keys):
            return siglip_reference(checkpoint, spec)
        if is_dinov2(keys):
            return dinov2_reference(checkpoint, spec)
        arch = spec.arch
        prefix = model_prefix(keys)
        cls: type[transformers.PreTrainedModel]
        if "cls_classifier.weight" in keys:
            cls, output = transformers.DeiTForImageClassificationWithTeacher, "logits"
        elif "classifier.weight" in keys:
            cls, output = transformers.ViTForImageClassification, "logits"
        else:
            cls = transformers.DeiTModel if arch.distilled else transformers.ViTModel
            output = "pooler" if arch.representation_size else ("tokens" if arch.distilled else "cls")
        with quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
            config = checkpoint.side_config if "model_type" in checkpoint.side_config else {}
            self._write_config(Path(tmp), arch, prefix, checked_fields(config, checkpoint.path))
            # the names as stored in the file: transformers applies its own renaming for the old ones
            save_file(
                {k: v.contiguous() for k, v in checkpoint.state_dict().items()},
                str(Path(tmp) / "model.safetensors"),
                metadata={"format": "pt"},
            )
            extra: dict[str, Any] = {} if output == "logits" else {"add_pooling_layer": output == "pooler"}
            model = cls.from_pretrained(tmp, attn_implementation="eager", **extra)
        round_parameters(model.float().eval(), spec.round_to)
        interpolate = tuple(spec.img_size) != tuple(arch.img_size)

        def forward(x: torch.Tensor) -> torch.Tensor:
            out = model(pixel_values=x, interpolate_pos_encoding=interpolate)
            if output == "logits":
                return out.logits
            if output == "pooler":
                return out.pooler_output
            tokens = out.last_hidden_state
            return tokens[:, 0] if output == "cls" else (tokens[:, 0] + tokens[:, 1]) / 2

        description = f"transformers' {cls.__name__}"
        if output != "logits":
            return Reference(forward, None, description)
        heads = [
            getattr(model, n) for n in ("classifier", "cls_classifier", "distillation_classifier") if hasattr(model, n)
        ]
        return Reference(classifier_input(model, heads, forward), forward, description)

    # --- export: a DINOv3ViTModel, SiglipVisionModel (NaFlex: Siglip2VisionModel) or Dinov2Model directory --------
    def export_map(self, arch: Arch, keys: set[str]) -> KeyMap:
        if "cls_token" not in keys:  # SigLIP: a classic row, or a NaFlex row (timm NaFlexVit's ``embeds``)
            naflex, channels_last = "embeds.proj.weight" in keys, arch.options.get("patchify_channels_last", True)
            return siglip_export_map(arch.depth, "attn_pool.latent" in keys, naflex, channels_last is not False)
        if arch.options.get("eva_names"):  # DINOv3
            return dinov3_export_map(
                arch.depth, "blocks.0.mlp.fc1_g.weight" in keys, "blocks.0.attn.q_bias" in keys, "reg_token" in keys
            )
        packed = bool(arch.options.get("swiglu_mlp")) and "blocks.0.mlp.fc1_g.weight" not in keys
        return dinov2_export_map(keys, arch.depth, packed, bool(arch.options.get("no_embed_class")))

    def export_config(self, arch: Arch, args: dict[str, Any]) -> tuple[Any, list[str]]:
        if is_siglip_args(args):
            return siglip_export_config(arch, args)
        if args.get("rope_type") or args.get("eva_names"):
            return dinov3_export_config(arch, args)
        return dinov2_export_config(arch, args)

    @staticmethod
    def _write_config(directory: Path, arch: Any, prefix: str, stated: dict[str, Any]) -> None:
        """A config.json made from the architecture read and checked here, never the source's own file: its
        fields were checked against the weights (:func:`check_fields_against_weights`), and any other field it
        holds (a ``quantization_config``, a ``dtype``...) would reach transformers' loader unchecked. The heads
        and eps are the source's own where it ``stated`` them: ``--num-heads`` overrides ours, not the source's."""
        import transformers

        config_cls = transformers.DeiTConfig if arch.distilled or prefix == "deit." else transformers.ViTConfig
        # num_labels is taken through PreTrainedConfig's **kwargs, which its dataclass_transform hides from checkers
        config_cls(  # type: ignore[call-arg]
            hidden_size=arch.embed_dim,
            num_hidden_layers=arch.depth,
            num_attention_heads=stated.get("num_attention_heads", arch.num_heads),
            intermediate_size=arch.mlp_hidden,
            image_size=arch.img_size[0] if arch.img_size[0] == arch.img_size[1] else list(arch.img_size),
            patch_size=arch.patch_size,
            num_channels=arch.in_chans,
            num_labels=max(arch.num_classes, 1),
            layer_norm_eps=stated.get("layer_norm_eps", arch.norm_eps),
            qkv_bias=True,
            pooler_output_size=arch.representation_size,
        ).save_pretrained(directory)


def checked_fields(config: dict[str, Any], path: Any) -> dict[str, Any]:
    """The architecture fields of a transformers config.json that are present, each inside the bounds our own
    option has (:data:`BOUNDED_FIELDS`), checked before anything is built. Raises ConversionError."""
    fields: dict[str, Any] = {}
    for field, option in BOUNDED_FIELDS.items():
        if field not in config:
            continue
        value = config[field]
        if field == "image_size" and type(value) is float and value.is_integer():
            value = int(value)  # transformers configs may store a whole number as float
        try:
            fields[field] = check_option(option, value, WHERE)
        except ModelArgsError as err:
            raise ConversionError(str(err).replace(f": {option} is", f": {field} is"), path) from None
    # the MLP width: embed_dim x mlp_ratio, inside both options' bounds
    fields.update(config_integers(config, {"intermediate_size": int(MAX_EMBED_DIM * MAX_MLP_RATIO)}, path))
    config_flags(config, ("qkv_bias",), path)
    id2label = config.get("id2label")
    if id2label is not None:
        if not isinstance(id2label, dict):
            raise ConversionError(
                f"{WHERE}: id2label is a {type(id2label).__name__}; expected an object of class index -> label", path
            )
        try:
            check_option("num_classes", len(id2label), f"{WHERE}: id2label")
        except ModelArgsError as err:
            raise ConversionError(f"{err} (the number of labels)", path) from None
    return fields


def check_fields_against_weights(
    fields: dict[str, Any], config: dict[str, Any], checkpoint: Checkpoint, keys: set[str], layers: int
) -> None:
    """Refuse a config.json that describes other weights than those beside it (a missing block, another
    model's config), before anything is built, including the reference model of ``--verify``: transformers
    builds what the config says and fills what the weights lack with random values."""
    prefix = model_prefix(keys)
    problems: list[str] = []

    def compare(field: str, stated: Any, found: Any, what: str) -> None:
        if stated is not None and stated != found:
            problems.append(f"{field} {shown(config.get(field, stated))}, but the weights have {what}")

    if "num_hidden_layers" in fields:
        compare("num_hidden_layers", fields["num_hidden_layers"], layers, f"{layers} layers")
    stem = _shape(checkpoint, keys, f"{prefix}embeddings.patch_embeddings.projection.weight")
    if stem is not None and len(stem) == 4:
        where = f"(patch embedding {stem})"
        patch = fields.get("patch_size")
        compare("hidden_size", fields.get("hidden_size"), stem[0], f"width {stem[0]} {where}")
        compare("num_channels", fields.get("num_channels"), stem[1], f"{stem[1]} input channels {where}")
        compare(
            "patch_size", patch and to_2tuple(patch, "patch_size"), stem[2:], f"{stem[2]}x{stem[3]} patches {where}"
        )
        heads = fields.get("num_attention_heads")
        if heads is not None and stem[0] % heads:
            compare("num_attention_heads", heads, None, f"width {stem[0]}, which {heads} heads do not divide")
    legacy = is_legacy(keys, prefix)
    layer = f"{prefix}encoder.layer.0." if legacy else f"{prefix}layers.0."
    fc1 = _shape(checkpoint, keys, layer + ("intermediate.dense.weight" if legacy else "mlp.fc1.weight"))
    if fc1:
        compare("intermediate_size", fields.get("intermediate_size"), fc1[0], f"an MLP of width {fc1[0]}")
    head = _shape(checkpoint, keys, "cls_classifier.weight") or _shape(checkpoint, keys, "classifier.weight")
    if head:
        id2label = config.get("id2label")
        labels = fields.get("num_labels", len(id2label) if isinstance(id2label, dict) else None)
        compare("num_labels / id2label", labels, head[0], f"a classifier of {head[0]} classes")
    pooler = _shape(checkpoint, keys, f"{prefix}pooler.dense.weight")
    if pooler:
        compare("pooler_output_size", fields.get("pooler_output_size"), pooler[0], f"a pooler of width {pooler[0]}")
    query_bias = layer + ("attention.attention.query.bias" if legacy else "attention.q_proj.bias")
    if config.get("qkv_bias") is False and query_bias in keys:
        compare("qkv_bias", False, True, "query, key and value biases")
    if problems:
        raise ConversionError(
            f"{WHERE} does not describe these weights: it says {'; '.join(problems)}; expected the config saved "
            f"with them (tensors are missing, or the config is another model's); nothing was built",
            checkpoint.path,
        )


def _shape(checkpoint: Checkpoint, keys: set[str], key: str) -> tuple[int, ...] | None:
    return tuple(checkpoint.shape(key)) if key in keys else None


#: what conversion reads and writes of source transformers (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = TransformersFormat()
