"""What a model family is: one record of its facts, from which the zoo's table, timm's names, the pretrained
tags, the Hub configs and conversion's family facts are read (the records themselves are data, in ``variants.py``).

A family is configuration of the one :class:`~timm_vitscratch.models.vision_transformer.VisionTransformer` plus
the checkpoint layouts that convert it; a row is one registered name: its own arguments over the family's, the
timm model of the same architecture, and the tags of timm's weights it offers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Row:
    """One registered variant of a family."""

    #: the registered name (``scratch_...``)
    name: str
    #: its constructor arguments beyond the family's :attr:`Family.options`
    args: Mapping[str, Any]
    #: timm's model of the same architecture (None: timm has none)
    timm: str | None = None
    #: the tags of timm's weights for :attr:`timm` that the row offers, in timm's order (its first is the default)
    tags: tuple[str, ...] = ()
    #: pretrained-cfg fields of its own, over the family's :attr:`Family.cfg`
    cfg: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    """One model family: its options, sizes, rows, timm reference and names, licence and sources."""

    #: short name (``dinov3``), as conversion names a family
    name: str
    #: what people call it
    title: str
    #: the constructor arguments every row shares (a row's own arguments win)
    options: Mapping[str, Any]
    #: the sizes its rows are built at, by the size's short name (``b16``)
    sizes: Mapping[str, Mapping[str, Any]]
    #: its registered names, in registration order
    rows: tuple[Row, ...]
    #: timm's class that builds the family (``VisionTransformer``, ``Eva``, ``NaFlexVit``)
    timm_class: str
    #: the licence of the family's weights where a checkpoint names none (Meta's and BAAI's own layouts; None:
    #: unknown). A pretrained tag records its source's own licence, from that source's registry.
    licence: str | None
    #: the checkpoint sources (``convert --from`` names) whose layouts convert it
    layouts: tuple[str, ...]
    #: the library whose model the counts set beside each row: ``timm`` (its model of the row's timm name), or
    #: ``torchvision`` (the classic ViT, whose timm names are timm's ``vit_*``)
    counted_against: str = "timm"
    #: where its pretrained tags come from (``timm``, ``torchvision``, ``transformers``), in the tags' order
    tag_sources: tuple[str, ...] = ("timm",)
    #: pretrained-cfg fields every row's cfg shares (the input size is each row's ``img_size`` unless set here)
    cfg: Mapping[str, Any] = field(default_factory=dict)
    #: the cfg's classifier, input size and preprocessing are those of timm's cfg of the row's timm model
    cfg_from_timm: bool = False
    #: named option groups its rows share beside the sizes (``core``, ``gap``), for those who read them back
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: our option -> the argument of :attr:`timm_class` that means it, where conversion builds timm's model
    timm_args: Mapping[str, str] = field(default_factory=dict)
    #: the rotary reference grid (``ref_feat_shape``) is the row's patch grid, ``img_size // patch_size``
    ref_grid_is_patch_grid: bool = False

    def architecture(self, row: Row) -> dict[str, Any]:
        """The row's constructor arguments: the family's options, then the row's own, then what they imply."""
        args = {**self.options, **row.args}
        if self.ref_grid_is_patch_grid:
            side = args["img_size"] // args["patch_size"]
            args["ref_feat_shape"] = (side, side)
        return args

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(row.name for row in self.rows)

    @property
    def timm_names(self) -> dict[str, str]:
        """Ours -> timm's model of the same architecture, for every row timm has."""
        return {row.name: row.timm for row in self.rows if row.timm is not None}

    @property
    def timm_tags(self) -> dict[str, str]:
        """Our ``variant.tag`` -> timm's ``model.tag`` for every tag of timm's weights the rows offer."""
        return {f"{row.name}.{tag}": f"{row.timm}.{tag}" for row in self.rows if row.timm for tag in row.tags}

    def row(self, name: str) -> Row:
        return next(row for row in self.rows if row.name == name)
