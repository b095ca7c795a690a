"""What conversion adds to a checkpoint layout: hints, the reference model, export."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn

from ..errors import ConversionError
from ..layouts.checkpoint import Checkpoint
from ..layouts.keymap import KeyMap
from ..layouts.layout import Layout
from ..models.architecture import Arch

if TYPE_CHECKING:  # timm's models are imported where a reference is built, not when this module loads
    from timm.models.eva import Eva
    from timm.models.vision_transformer import VisionTransformer

Forward = Callable[[torch.Tensor], torch.Tensor]
#: what shapes cannot tell about an architecture: a config records them, the format fixes them, or they are assumed
ARCH_FACTS = ("num_heads", "act_layer", "norm_eps")
M = TypeVar("M", bound=nn.Module)


class Reference:
    """The source model as its own library runs it: logits (None without a classifier) and the
    pre-logit features (what the classifier reads)."""

    def __init__(self, features: Forward, logits: Forward | None, description: str) -> None:
        self.features, self.logits, self.description = features, logits, description


def classifier_input(model: nn.Module, classifiers: list[nn.Module], forward: Forward) -> Forward:
    """Pre-logit features of ``model``: the mean of what its ``classifiers`` receive during ``forward(x)``."""

    def features(x: torch.Tensor) -> torch.Tensor:
        seen: list[torch.Tensor] = []
        handles = [c.register_forward_pre_hook(lambda _m, args: seen.append(args[0])) for c in classifiers]
        try:
            forward(x)
        finally:
            for handle in handles:
                handle.remove()
        return sum(seen[1:], seen[0]) / len(seen)

    return features


def timm_reference(model: VisionTransformer | Eva, description: str) -> Reference:
    """A timm model's reference: its own ``forward_head(pre_logits=True)`` and logits."""

    def features(x: torch.Tensor) -> torch.Tensor:
        return model.forward_head(model.forward_features(x), pre_logits=True)

    return Reference(features, model if getattr(model, "num_classes", 0) else None, description)


@dataclass
class ReferenceSpec:
    """What a reference (source-library) model must be built for."""

    arch: Arch
    img_size: tuple[int, int]  # the converted model's input size (the source's, unless resampled)
    round_to: torch.dtype | None = None  # weights rounded to the output dtype, then computed in fp32


class SourceFormat(Layout):
    """A layout (``layouts``) plus what only conversion needs: side-config hints, the reference model
    built by the source's own library, and export."""

    reference_name = "?"  # what --verify compares against
    export_suffixes: tuple[str, ...] = ()

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        """Architecture facts shapes cannot give (heads, norm eps, image size), from side configs."""
        return {}

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        """Which :data:`ARCH_FACTS` the checkpoint, its side config or the layout itself fixes; the rest are
        assumed (and ``--verify`` cannot confirm them: its reference is built under the same assumption)."""
        return {fact for fact in ARCH_FACTS if fact in hints}

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        """timm constructor options (``reg_tokens``, ``init_values``, ...) read from our-layout shapes."""
        return {}

    def settle_family(
        self, shapes: dict[str, tuple[int, ...]], hints: dict[str, Any], model: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The options and hints the architecture is read with: by default the shapes' options (:meth:`options`)
        and the side config's ``hints``. A format whose shapes leave the model family open settles it here, from
        a variant the source's config (``hints``) or the user (``model``, ``--model``) names, or refuses."""
        return self.options(shapes), hints

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """pretrained_cfg entries (mean, std, ...) the weights were trained with, when known."""
        return {}

    def label_names(self, checkpoint: Checkpoint) -> list[str] | None:
        """The classifier's label names, when the source records them."""
        return None

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        """The source model built by its own library, loaded with the checkpoint, in eval mode."""
        raise NotImplementedError

    # --- export -------------------------------------------------------------------------------------
    #: the export writes a model directory (config.json + model.safetensors) rather than one file
    export_directory = False

    def export_map(self, arch: Arch, keys: set[str]) -> KeyMap:
        raise ConversionError(f"export to {self.name} is not supported")

    def export_config(self, arch: Arch, args: dict[str, Any]) -> tuple[Any, list[str]]:
        """For a directory export: the config (an object with ``save_pretrained(directory)``) for a model of these
        constructor ``args``, and notes; raises ConversionError for what the target cannot hold."""
        raise ConversionError(f"export to {self.name} writes no model directory")


def round_parameters(module: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """Round every floating parameter/buffer to ``dtype`` and back, as a conversion to ``dtype`` does."""
    if dtype is not None and dtype != torch.float32:
        with torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                if tensor.is_floating_point():
                    tensor.copy_(tensor.to(dtype).float())
    return module


def without_init(cls: Callable[..., M], **kwargs: Any) -> M:
    """Build ``cls(**kwargs)`` with uninitialised CPU storage: every tensor is loaded right after, so
    running the library's (slow) random init would be wasted work."""
    with torch.device("meta"):
        model = cls(**kwargs)
    return model.to_empty(device="cpu")
