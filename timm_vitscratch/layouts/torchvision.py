"""torchvision ``vit_*`` state dicts (``conv_proj``, ``encoder.layers.encoder_layer_N``, ``heads``).

torchvision's ``in_proj_weight`` is q, k, v stacked by rows, exactly our fused ``qkv``; every tensor
is a rename. Both MLP namings are read: ``mlp.0`` / ``mlp.3`` and the older ``mlp.linear_1`` /
``mlp.linear_2``.
"""

from __future__ import annotations

from .keymap import KeyMap, Rule, weight_and_bias
from .layout import Layout, Resample

LAYER = "encoder.layers.encoder_layer_{}."


class TorchvisionLayout(Layout):
    name = "torchvision"
    library = "torchvision"
    block_pattern = r"^encoder\.layers\.encoder_layer_(\d+)\."
    example_keys = ("conv_proj.weight", "class_token", "encoder.pos_embedding")
    # torchvision's interpolate_embeddings: bicubic, align_corners=True, no antialias
    resample = Resample("bicubic", antialias=False, align_corners=True)

    def detect(self, keys: set[str]) -> bool:
        return "conv_proj.weight" in keys and "encoder.pos_embedding" in keys

    def key_map(self, keys: set[str], depth: int) -> KeyMap:
        rules: KeyMap = {"cls_token": Rule.rename("class_token"), "pos_embed": Rule.rename("encoder.pos_embedding")}
        weight_and_bias(rules, "patch_embed.proj", "conv_proj")
        for i in range(depth):
            src, dst = LAYER.format(i), f"blocks.{i}."
            legacy = f"{src}mlp.linear_1.weight" in keys and f"{src}mlp.0.weight" not in keys
            fc1, fc2 = ("mlp.linear_1", "mlp.linear_2") if legacy else ("mlp.0", "mlp.3")
            weight_and_bias(rules, dst + "norm1", src + "ln_1")
            rules[dst + "attn.qkv.weight"] = Rule.rename(src + "self_attention.in_proj_weight")
            rules[dst + "attn.qkv.bias"] = Rule.rename(src + "self_attention.in_proj_bias")
            weight_and_bias(rules, dst + "attn.proj", src + "self_attention.out_proj")
            weight_and_bias(rules, dst + "norm2", src + "ln_2")
            weight_and_bias(rules, dst + "mlp.fc1", src + fc1)
            weight_and_bias(rules, dst + "mlp.fc2", src + fc2)
        weight_and_bias(rules, "norm", "encoder.ln")
        weight_and_bias(rules, "pre_logits.fc", "heads.pre_logits")
        weight_and_bias(rules, "head", "heads.head")
        return rules


#: the layout of source torchvision (registered by that name in timm_vitscratch.choices.SOURCES)
LAYOUT = TorchvisionLayout()
