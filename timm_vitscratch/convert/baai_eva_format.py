"""BAAI's original EVA02 checkpoints, EVA-CLIP's and open_clip's EVA02-CLIP: what conversion adds to their layout
(:mod:`timm_vitscratch.layouts.baai_eva`).

These files record no config. The family's options come from :mod:`timm_vitscratch.convert.eva` (rotary position
on EVA02's 16 x 16 reference grid; the shapes tell the separate q/k/v, the norms inside MLP and attention, and the
pooling), the LayerNorm eps is EVA02's (1e-6) and the SwiGLU's SiLU is in its names; the head count is not in the
weights (the closest variant's, 64-wide heads in every EVA02, is taken and said). ``--verify`` builds timm's ``Eva``
and loads the file through timm's own importer (``timm.models.eva.checkpoint_filter_fn``): an independent reading.
The converted directory records MIT, under which BAAI publishes the EVA02 weights.
"""

from __future__ import annotations

from typing import Any

from ..layouts.baai_eva import BaaiEvaLayout
from ..layouts.checkpoint import Checkpoint
from .eva import LICENSES, NORM_EPS, eva_options, timm_eva
from .source_format import Reference, ReferenceSpec, SourceFormat, round_parameters, timm_reference


class BaaiEvaFormat(BaaiEvaLayout, SourceFormat):
    reference_name = "timm's Eva (through timm's own importer of EVA02 files)"

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        return eva_options(shapes)

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        return {"norm_eps": NORM_EPS["eva02"], "stated_by": "EVA02 layout (every EVA02's norms)"}

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        return {"act_layer", "norm_eps"}  # SwiGLU (its names say it); BAAI builds every norm with eps 1e-6

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        return {"license": LICENSES["eva02"]}

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        from timm.models.eva import checkpoint_filter_fn

        eva = timm_eva(spec)
        eva.load_state_dict(checkpoint_filter_fn(checkpoint.state_dict(), eva), strict=True)
        round_parameters(eva.eval(), spec.round_to)
        return timm_reference(eva, "timm's Eva (timm's importer of EVA02 files)")


#: what conversion reads of source baai_eva (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = BaaiEvaFormat()
