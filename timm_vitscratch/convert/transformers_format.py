"""Hugging Face transformers ViT and DeiT checkpoints: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.transformers`): the config.json's hints, the reference model built by
transformers itself, and the processor's preprocessing."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import ConversionError, ModelArgsError
from ..layouts.checkpoint import Checkpoint
from ..layouts.transformers import TransformersLayout, model_prefix
from ..models.model_args import check_option
from .source_format import Reference, ReferenceSpec, SourceFormat, classifier_input, round_parameters

#: transformers' own ViTConfig default; a bare state dict without config.json was made with it
TRANSFORMERS_NORM_EPS = 1e-12


class TransformersFormat(TransformersLayout, SourceFormat):
    reference_name = "transformers' model"

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        config = checkpoint.side_config if "model_type" in checkpoint.side_config else {}
        if config.get("hidden_act", "gelu") != "gelu" or config.get("pooler_act", "tanh") != "tanh":
            raise ConversionError(
                f"config.json asks for activations hidden_act={config.get('hidden_act')!r}, "
                f"pooler_act={config.get('pooler_act')!r}; the scratch ViT uses exact GELU and Tanh",
                checkpoint.path,
            )
        # transformers' names for our options; each value is checked as a config's own option is
        fields = (("layer_norm_eps", "norm_eps"), ("num_attention_heads", "num_heads"), ("image_size", "img_size"))
        hints: dict[str, Any] = {"norm_eps": TRANSFORMERS_NORM_EPS}
        try:
            for field, option in fields:
                if field in config:
                    value = config[field]
                    if option == "img_size" and type(value) is float and value.is_integer():
                        value = int(value)  # transformers configs may store a whole number as float
                    hints[option] = check_option(option, value, f"config.json beside the weights: {field}")
        except ModelArgsError as err:
            raise ConversionError(str(err).replace(f"{option} is", f"{field} is"), checkpoint.path) from None
        if isinstance(hints.get("img_size"), int):
            hints["img_size"] = (hints["img_size"], hints["img_size"])
        return hints

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
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
        return cfg

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        import transformers

        keys = set(checkpoint.keys())
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
        with _quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
            self._write_config(Path(tmp), checkpoint, arch, prefix)
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

    @staticmethod
    def _write_config(directory: Path, checkpoint: Checkpoint, arch: Any, prefix: str) -> None:
        """The source's own config.json when it came with one, else one describing the shapes."""
        import transformers

        if "model_type" in checkpoint.side_config:
            (directory / "config.json").write_text(json.dumps(checkpoint.side_config))
            return
        config_cls = transformers.DeiTConfig if arch.distilled or prefix == "deit." else transformers.ViTConfig
        # num_labels is taken through PreTrainedConfig's **kwargs, which its dataclass_transform hides from checkers
        config_cls(  # type: ignore[call-arg]
            hidden_size=arch.embed_dim,
            num_hidden_layers=arch.depth,
            num_attention_heads=arch.num_heads,
            intermediate_size=arch.mlp_hidden,
            image_size=arch.img_size[0],
            patch_size=arch.patch_size,
            num_channels=arch.in_chans,
            num_labels=max(arch.num_classes, 1),
            layer_norm_eps=arch.norm_eps,
            qkv_bias=True,
            pooler_output_size=arch.representation_size,
        ).save_pretrained(directory)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
