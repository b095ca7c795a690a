"""Meta's original Perception Encoder checkpoints: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.meta_pe`).

A Meta file records no config. The family's options come from :mod:`timm_vitscratch.convert.eva` (the rotary's
reference grid is the position table's, the attention pool has PE's 8 heads), the LayerNorm eps is every PE's
(1e-5) and the MLP's activation GELU (Meta's ``nn.GELU``); the head count is not in the weights (the closest
variant's is taken, and said). ``--verify`` builds timm's ``Eva`` and loads the file through timm's own PE importer
(``timm.models.eva.checkpoint_filter_fn``): an independent reading. The converted directory records Apache-2.0, under
which Meta publishes the PE weights.
"""

from __future__ import annotations

from typing import Any

from ..layouts.checkpoint import Checkpoint
from ..layouts.meta_pe import MetaPeLayout
from .eva import LICENSES, NORM_EPS, eva_options, timm_eva
from .source_format import Reference, ReferenceSpec, SourceFormat, round_parameters, timm_reference


class MetaPeFormat(MetaPeLayout, SourceFormat):
    reference_name = "timm's Eva (through timm's own importer of Meta's PE files)"

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        return eva_options(shapes)

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        return {"norm_eps": NORM_EPS["pe"], "stated_by": "Perception Encoder layout (every PE's norms)"}

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        # Meta's MLP is exact GELU and its norms' eps 1e-5, in every PE it released
        return {"act_layer", "norm_eps"}

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        return {"license": LICENSES["pe"]}

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        from timm.models.eva import checkpoint_filter_fn

        eva = timm_eva(spec)
        eva.load_state_dict(checkpoint_filter_fn(checkpoint.state_dict(), eva), strict=True)
        round_parameters(eva.eval(), spec.round_to)
        return timm_reference(eva, "timm's Eva (timm's importer of Meta's PE files)")


#: what conversion reads of source meta_pe (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = MetaPeFormat()
