"""Meta's original DINOv3 checkpoints: what conversion adds to their layout (:mod:`timm_vitscratch.layouts.meta_dinov3`).

A Meta file records no config. The head width comes from the rotary's stored periods (``rope_embed.periods``,
``head_dim / 4`` of them), the activation from the MLP's names (``fc1``/``fc2`` GELU, ``w1``/``w2``/``w3``
SwiGLU); the LayerNorm eps is the layout's own: every DINOv3 ViT Meta released builds its norms as
``layernormbf16`` (eps 1e-5, in ``dinov3/hub/backbones.py``). ``--verify`` builds timm's ``Eva`` and loads the
file through timm's own DINOv3 importer (``timm.models.eva.checkpoint_filter_fn``): an independent reading. That
importer ignores ``qkv.bias_mask``, which Meta's attention multiplies the bias by; the reference is handed the
biases with their masks applied, so it computes what Meta's file computes.
The converted directory records the DINOv3 License, under which Meta publishes these weights, and carries its text.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

from ..layouts.checkpoint import Checkpoint
from ..layouts.meta_dinov3 import MetaDinov3Layout, apply_bias_masks
from .dinov3 import LICENSE, dinov3_options, timm_eva
from .source_format import Reference, ReferenceSpec, SourceFormat, round_parameters, timm_reference


class MetaDinov3Format(MetaDinov3Layout, SourceFormat):
    reference_name = "timm's Eva (through timm's own importer of Meta's files)"

    def options(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
        return dinov3_options(shapes)

    def hints(self, checkpoint: Checkpoint, keys: set[str]) -> dict[str, Any]:
        hints: dict[str, Any] = {}
        if "rope_embed.periods" in keys and "patch_embed.proj.weight" in keys:  # checked by ignorable_keys
            head_dim = 4 * checkpoint.shape("rope_embed.periods")[0]
            width = (checkpoint.shape("patch_embed.proj.weight") or (0,))[0]
            if head_dim and width and width % head_dim == 0:
                hints["num_heads"] = width // head_dim
                hints["stated_by"] = "rotary periods (rope_embed.periods)"
        return hints

    def preprocessing(self, checkpoint: Checkpoint) -> dict[str, Any]:
        # Meta's DINOv3 weights (and the code whose layout this is) are under the DINOv3 License, whose text
        # must travel with them: recorded, the converted directory carries it
        return {"license": LICENSE}

    def recorded_facts(self, checkpoint: Checkpoint, hints: dict[str, Any]) -> set[str]:
        # the MLP's names fix its activation (Meta's "mlp" is exact GELU), Meta's released ViTs all their norms'
        # eps (1e-5); heads come from the periods
        return {"act_layer", "norm_eps"} | ({"num_heads"} & set(hints))

    def reference(self, checkpoint: Checkpoint, spec: ReferenceSpec) -> Reference:
        from timm.models.eva import checkpoint_filter_fn

        eva = timm_eva(spec)
        with contextlib.redirect_stdout(io.StringIO()):  # timm's importer prints why it drops zero biases
            state_dict = checkpoint_filter_fn(apply_bias_masks(checkpoint.state_dict()), eva)
        eva.load_state_dict(state_dict, strict=True)
        round_parameters(eva.eval(), spec.round_to)
        return timm_reference(eva, "timm's Eva (timm's importer of Meta's DINOv3 files)")


#: what conversion reads of source meta_dinov3 (registered by that name in timm_vitscratch.choices.SOURCES)
FORMAT = MetaDinov3Format()
