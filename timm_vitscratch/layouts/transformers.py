"""Hugging Face transformers ``ViTForImageClassification`` / ``ViTModel`` / ``DeiTForImageClassificationWithTeacher``,
``DINOv3ViTModel`` and ``Dinov2Model`` (their key maps are :mod:`timm_vitscratch.layouts.transformers_dinov3` and
:mod:`timm_vitscratch.layouts.transformers_dinov2`).

Two namings are read. Checkpoints on the Hub store the original names
(``vit.encoder.layer.N.attention.attention.query``, ``attention.output.dense``,
``intermediate.dense``, ``output.dense``); transformers 5 renames them when loading to its module
names (``vit.layers.N.attention.q_proj`` … ``o_proj``, ``mlp.fc1``, ``mlp.fc2``). Separate q, k, v
projections are stacked into our fused ``qkv``. A ``ViTModel`` pooler (Linear + Tanh on the class
token) is our representation layer.
"""

from __future__ import annotations

from ..errors import ConversionError
from .checkpoint import Checkpoint
from .keymap import KeyMap, Rule, concat_rows, weight_and_bias
from .layout import Layout, Resample
from .transformers_dinov2 import dinov2_ignorable_keys, dinov2_key_map, dinov2_resample, is_dinov2
from .transformers_dinov3 import dinov3_ignorable_keys, dinov3_key_map, is_dinov3
from .transformers_siglip import is_siglip, siglip_ignorable_keys, siglip_key_map, siglip_resample

PREFIXES = ("vit.", "deit.", "")
LEGACY_BLOCK = dict(
    q="attention.attention.query",
    k="attention.attention.key",
    v="attention.attention.value",
    o="attention.output.dense",
    fc1="intermediate.dense",
    fc2="output.dense",
)
CURRENT_BLOCK = dict(
    q="attention.q_proj", k="attention.k_proj", v="attention.v_proj", o="attention.o_proj", fc1="mlp.fc1", fc2="mlp.fc2"
)


def model_prefix(keys: set[str]) -> str:
    for prefix in PREFIXES:
        if f"{prefix}embeddings.patch_embeddings.projection.weight" in keys:
            return prefix
    return ""


def is_legacy(keys: set[str], prefix: str) -> bool:
    return any(k.startswith(f"{prefix}encoder.layer.") for k in keys)


class TransformersLayout(Layout):
    name = "transformers"
    library = "Hugging Face transformers"
    # ViT: (vit.|deit.)encoder.layer.N / layers.N; DINOv3ViTModel: layer.N / model.layer.N; Dinov2Model: encoder.layer.N
    block_pattern = r"^(?:vit\.|deit\.|model\.|vision_model\.)?(?:encoder\.layers?|layers|layer)\.(\d+)\."
    example_keys = (
        "vit.embeddings.patch_embeddings.projection.weight",
        "vit.encoder.layer.0.attention.attention.query.weight (or vit.layers.0.attention.q_proj.weight)",
        "embeddings.patch_embeddings.weight and layer.0.layer_scale1.lambda1 (DINOv3ViTModel)",
        "embeddings.patch_embedding.weight and head.probe (SiglipVisionModel, Siglip2VisionModel)",
        "embeddings.patch_embeddings.projection.weight and encoder.layer.0.layer_scale1.lambda1 (Dinov2Model)",
    )
    resample = Resample("bicubic", antialias=False)  # ViTEmbeddings.interpolate_pos_encoding

    def resample_of(self, checkpoint: Checkpoint) -> Resample:
        return siglip_resample(checkpoint) or dinov2_resample(checkpoint) or self.resample

    def detect(self, keys: set[str]) -> bool:
        return (
            is_dinov3(keys)
            or is_siglip(keys)
            or is_dinov2(keys)
            or any(f"{p}embeddings.patch_embeddings.projection.weight" in keys for p in PREFIXES)
        )

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        if is_dinov3(keys):
            return dinov3_key_map(keys, depth)
        if is_siglip(keys):
            return siglip_key_map(keys, depth)
        if is_dinov2(keys):
            return dinov2_key_map(keys, depth)
        prefix = model_prefix(keys)
        names = LEGACY_BLOCK if is_legacy(keys, prefix) else CURRENT_BLOCK
        layer = f"{prefix}encoder.layer.{{}}." if names is LEGACY_BLOCK else f"{prefix}layers.{{}}."
        emb = f"{prefix}embeddings."
        rules: KeyMap = {
            "cls_token": Rule.rename(emb + "cls_token"),
            "dist_token": Rule.rename(emb + "distillation_token"),
            "pos_embed": Rule.rename(emb + "position_embeddings"),
        }
        weight_and_bias(rules, "patch_embed.proj", emb + "patch_embeddings.projection")
        for i in range(depth):
            src, dst = layer.format(i), f"blocks.{i}."
            weight_and_bias(rules, dst + "norm1", src + "layernorm_before")
            for part in ("weight", "bias"):
                qkv = tuple(f"{src}{names[n]}.{part}" for n in "qkv")
                rules[f"{dst}attn.qkv.{part}"] = Rule(qkv, concat_rows)
            weight_and_bias(rules, dst + "attn.proj", src + names["o"])
            weight_and_bias(rules, dst + "norm2", src + "layernorm_after")
            weight_and_bias(rules, dst + "mlp.fc1", src + names["fc1"])
            weight_and_bias(rules, dst + "mlp.fc2", src + names["fc2"])
        weight_and_bias(rules, "norm", prefix + "layernorm")
        weight_and_bias(rules, "pre_logits.fc", prefix + "pooler.dense")
        head = "cls_classifier" if "cls_classifier.weight" in keys else "classifier"
        weight_and_bias(rules, "head", head)
        weight_and_bias(rules, "head_dist", "distillation_classifier")
        return rules

    def ignorable_keys(self, checkpoint: Checkpoint) -> set[str]:
        keys = set(checkpoint.keys())
        if is_dinov3(keys):
            return dinov3_ignorable_keys(checkpoint)
        if is_siglip(keys):
            return siglip_ignorable_keys(checkpoint)
        if is_dinov2(keys):
            return dinov2_ignorable_keys(checkpoint)
        prefix = model_prefix(keys)
        distilled = f"{prefix}embeddings.distillation_token" in keys
        if distilled and "classifier.weight" in keys:
            raise ConversionError(
                "this is a DeiTForImageClassification (distillation token, one classifier on the "
                "class token only); only DeiTForImageClassificationWithTeacher converts",
                checkpoint.path,
            )
        if distilled and f"{prefix}pooler.dense.weight" in keys:
            raise ConversionError(
                "a DeiT model with a pooler has no scratch equivalent (distilled models have no representation layer)",
                checkpoint.path,
            )
        return set()


#: the layout of source transformers (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = TransformersLayout()
