"""torchvision ``vit_*`` state dicts (``conv_proj``, ``encoder.layers.encoder_layer_N``, ``heads``).

torchvision's ``in_proj_weight`` is q, k, v stacked by rows, exactly our fused ``qkv``; every tensor
is a rename. Both MLP namings are read: ``mlp.0`` / ``mlp.3`` and the older ``mlp.linear_1`` /
``mlp.linear_2``. Export writes the current names.
"""

from __future__ import annotations

from typing import Any

from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

from ..errors import ConversionError
from ..layouts.checkpoint import Checkpoint
from ..layouts.keymap import KeyMap, invert_renames
from ..layouts.torchvision import TorchvisionLayout
from ..models.architecture import Arch
from .source_format import (
    Reference,
    ReferenceSpec,
    SourceFormat,
    classifier_input,
    round_parameters,
    without_init,
)


class TorchvisionFormat(TorchvisionLayout, SourceFormat):
    reference_name = "torchvision's VisionTransformer"
    export_suffixes = (".pth", ".pt", ".safetensors")

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        # torchvision's ViT has one activation (GELU, in MLPBlock), and every vit_* builder its default eps 1e-6;
        # the head count is in no torchvision state dict (in_proj_weight fuses the heads)
        return super().recorded_facts(checkpoint, hints) | {"act_layer", "norm_eps"}

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        # torchvision's ViT weights: resize 256 (bilinear), centre crop 224, ImageNet mean/std
        return dict(mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, interpolation="bilinear", crop_pct=224 / 256)

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        from torchvision.models.vision_transformer import VisionTransformer, interpolate_embeddings

        arch = spec.arch
        if spec.img_size[0] != spec.img_size[1] or arch.in_chans != 3:
            raise ConversionError("torchvision's VisionTransformer takes square 3-channel images only; cannot verify")
        model = without_init(
            VisionTransformer,
            image_size=spec.img_size[0],
            patch_size=arch.patch_size,
            num_layers=arch.depth,
            num_heads=arch.num_heads,
            hidden_dim=arch.embed_dim,
            mlp_dim=arch.mlp_hidden,
            num_classes=arch.num_classes,
            representation_size=arch.representation_size,
        )
        state_dict = checkpoint.state_dict()
        if spec.img_size != arch.img_size:
            state_dict = interpolate_embeddings(spec.img_size[0], arch.patch_size, state_dict)
        model.load_state_dict(state_dict, strict=True)
        round_parameters(model.eval(), spec.round_to)
        # the classifier reads the representation layer's output when there is one
        features = classifier_input(model, [model.get_submodule("heads.head")], model)
        return Reference(features, model, self.reference_name)

    def export_map(self, arch: Arch, keys: set[str]) -> KeyMap:
        if arch.distilled:
            raise ConversionError(
                "torchvision's VisionTransformer has no distillation token; a distilled DeiT "
                "cannot be exported to it (export to timm instead)"
            )
        if arch.in_chans != 3:
            raise ConversionError(f"torchvision's VisionTransformer takes 3 input channels, this model {arch.in_chans}")
        if arch.grid[0] != arch.grid[1]:
            raise ConversionError("torchvision's VisionTransformer takes square images only")
        inverse = invert_renames(self.key_map(set(), arch.depth))
        return {target: rule for target, rule in inverse.items() if rule.sources[0] in keys}


#: what conversion reads and writes of source torchvision (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = TorchvisionFormat()
