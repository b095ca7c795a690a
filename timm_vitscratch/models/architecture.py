"""What a built model is: its architecture facts (:class:`Arch`) and the one way they are described.

The converter reads the same facts from a checkpoint's shapes (``convert.shape_inference``); the
exporter, the inspection report and the model card describe built models with :func:`describe_model`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .block import TransformerBlock
from .layers import DEFAULT_NORM_EPS, RmsNorm, to_2tuple
from .vision_transformer import VisionTransformer

Shape = tuple[int, ...]


@dataclass
class Arch:
    """The architecture a checkpoint's shapes (plus side config) describe."""

    patch_size: int
    embed_dim: int
    depth: int
    num_heads: int | None  # None when the shapes cannot tell (fused or square projections)
    in_chans: int
    grid: tuple[int, int]  # patch grid of the position table
    num_classes: int
    representation_size: int | None
    distilled: bool
    mlp_hidden: int
    norm_eps: float = DEFAULT_NORM_EPS
    #: timm constructor options read from key names / shapes (reg_tokens, init_values, fc_norm, ...)
    options: dict[str, Any] = field(default_factory=dict)
    #: one line when the head count was assumed rather than read
    heads_note: str | None = None
    #: the facts shapes cannot tell (heads, activation, eps) that nothing recorded, with the value assumed
    assumed: dict[str, Any] = field(default_factory=dict)

    @property
    def num_prefix_tokens(self) -> int:
        cls = 1 if self.options.get("class_token", True) else 0
        return cls + int(self.distilled) + int(self.options.get("reg_tokens", 0))

    @property
    def pos_prefix_tokens(self) -> int:
        """Prefix tokens that have a row in the position table (none with ``no_embed_class``)."""
        return 0 if self.options.get("no_embed_class") else self.num_prefix_tokens

    @property
    def img_size(self) -> tuple[int, int]:
        return self.grid[0] * self.patch_size, self.grid[1] * self.patch_size

    @property
    def mlp_ratio(self) -> float:
        return self.mlp_hidden / self.embed_dim

    def describe(self) -> str:
        heads = f", heads {self.num_heads}" if self.num_heads else ""
        rep = (
            f", representation {self.representation_size}" if self.representation_size else ", no representation layer"
        )
        mlp = f", mlp_ratio {self.mlp_ratio:g}" if self.mlp_hidden != 4 * self.embed_dim else ""
        options = "".join(f", {k}={v}" for k, v in self.options.items())
        return (
            f"patch {self.patch_size}, embed_dim {self.embed_dim}, depth {self.depth}{heads}{mlp}{rep}, "
            f"{'distilled' if self.distilled else 'not distilled'}, {self.num_classes} classes, "
            f"img_size {self.img_size[0]}x{self.img_size[1]}{options}"
        )

    def constructor_args(self, img_size: tuple[int, int] | None = None) -> dict[str, Any]:
        """Every architecture-defining ``VisionTransformer`` argument of this architecture."""
        size = tuple(img_size or self.img_size)
        return dict(
            img_size=size[0] if size[0] == size[1] else size,
            patch_size=self.patch_size,
            embed_dim=self.embed_dim,
            depth=self.depth,
            num_heads=self.num_heads,
            mlp_ratio=self.mlp_ratio,
            representation_size=self.representation_size,
            distilled=self.distilled,
            in_chans=self.in_chans,
            norm_eps=self.norm_eps,
            **self.options,
        )


def describe_model(model: nn.Module) -> Arch:
    """The architecture facts of one of our built models (it may live on ``meta``)."""
    if not isinstance(model, VisionTransformer):
        raise TypeError(f"describe_model takes a scratch VisionTransformer, not {type(model).__name__}")
    embed = model.patch_embed.proj.weight.shape
    first, grid = model.blocks[0], model.patch_embed.grid_size
    assert isinstance(first, TransformerBlock) and isinstance(first.norm1, (nn.LayerNorm, RmsNorm))
    fc = getattr(model.pre_logits, "fc", None)  # the representation layer's Linear, when there is one
    return Arch(
        patch_size=to_2tuple(model.patch_embed.patch_size, "patch_size")[0],
        embed_dim=embed[0],
        depth=len(model.blocks),
        num_heads=first.attn.num_heads,
        in_chans=model.in_chans,
        grid=(grid[0], grid[1]),
        num_classes=model.num_classes,
        representation_size=fc.out_features if isinstance(fc, nn.Linear) else None,
        distilled=model.distilled,
        mlp_hidden=first.mlp_shape[0],
        norm_eps=first.norm1.eps,  # every norm has the one eps; ``norm`` is an Identity under fc_norm
    )
