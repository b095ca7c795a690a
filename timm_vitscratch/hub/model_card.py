"""The README model card pushed with a model: architecture, both counts, weights source, usage, license.

A card states only what the model's files record: a license, paper, origin or published top-1 appears
when ``config.json``'s ``pretrained_cfg`` holds it, and never for weights its ``vitscratch`` block says
are a random init (timm gives such a model its default tag's cfg, whose facts are not its own).
"""

from __future__ import annotations

import json
from typing import Any

from torch import nn

from ..inspect.counts import leaf_module_param_count, true_param_count
from ..model_dir import METADATA_KEY
from ..models.architecture import describe_model
from ..private_api import generate_readme

TAGS = ["image-classification", "timm", "timm_vitscratch", "vision-transformer"]
#: the Hub's license identifier for "not stated" (timm's card writer would otherwise claim apache-2.0)
UNKNOWN_LICENSE = "unknown"


def architecture_line(config: dict[str, Any], model: nn.Module) -> str:
    """``scratch_vit_b16: patch 16, embed_dim 768, depth 12, heads 12, 224x224, 1000 classes``."""
    arch = describe_model(model)
    parts = [
        f"patch {arch.patch_size}",
        f"embed_dim {arch.embed_dim}",
        f"depth {arch.depth}",
        f"heads {arch.num_heads}",
        f"{arch.img_size[0]}x{arch.img_size[1]}",
        f"{arch.num_classes} classes",
    ]
    if arch.distilled:
        parts.append("distillation token + head_dist (DeiT)")
    elif arch.representation_size:
        parts.append(f"representation layer {arch.representation_size} (has_logits)")
    return f"{config['architecture']}: " + ", ".join(parts)


def weights_facts(pretrained_cfg: dict[str, Any]) -> dict[str, str]:
    """Card lines for what the weights' source publishes (preprocessing, paper, origin, top-1)."""
    from ..models.pretrained import top1

    cfg = pretrained_cfg
    facts = {}
    if cfg.get("input_size"):
        facts["Preprocessing"] = (
            f"input {cfg['input_size'][-2]}x{cfg['input_size'][-1]}, "
            f"{cfg.get('interpolation')} resize, crop_pct {cfg.get('crop_pct')} "
            f"({cfg.get('crop_mode', 'center')}), mean {tuple(cfg.get('mean', ()))}, "
            f"std {tuple(cfg.get('std', ()))}"
        )
    if cfg.get("paper_name") or cfg.get("paper_ids"):
        facts["Paper"] = " ".join(str(p) for p in (cfg.get("paper_name"), cfg.get("paper_ids")) if p)
    for key, title in (("origin_url", "Origin"), ("description", "Weights")):
        if cfg.get(key):
            facts[title] = str(cfg[key])
    accuracy = top1(cfg)
    if accuracy is not None:
        facts["Published ImageNet-1k top-1"] = f"{accuracy}"
    return facts


def recorded_facts(config: dict[str, Any]) -> dict[str, Any]:
    """The pretrained cfg facts that belong to these weights (none for a random init)."""
    source = config.get(METADATA_KEY, {}).get("source") or {}
    if isinstance(source, dict) and source.get("weights") == "random init":
        return {}
    cfg = config.get("pretrained_cfg")
    return cfg if isinstance(cfg, dict) else {}


def model_card(config: dict[str, Any], model: nn.Module, repo_id: str) -> str:
    """Markdown card for ``repo_id`` holding ``config`` (timm Hub config) and weights of ``model``."""
    metadata = config.get(METADATA_KEY, {})
    source = metadata.get("source")
    source_text = json.dumps(source, sort_keys=True) if source else "not recorded"
    facts = recorded_facts(config)
    license_name = facts.get("license")
    usage = (
        "```python\n"
        "import timm\n"
        "import timm_vitscratch  # registers the scratch_* architectures with timm\n\n"
        f"model = timm.create_model('hf-hub:{repo_id}', pretrained=True).eval()\n"
        "```\n\n"
        "Or install a verified copy (sha256 checked against `config.json`) into a directory:\n\n"
        f"```bash\nvitscratch pull {repo_id} OUT_DIR\n```\n"
    )
    card = {
        "license": license_name or UNKNOWN_LICENSE,
        "tags": TAGS,
        "description": (
            "A Vision Transformer written from scratch in PyTorch and registered with timm by the "
            "timm_vitscratch plugin. "
            "The repository holds timm's Hub layout: `config.json` and `model.safetensors`."
        ),
        "details": {
            "Architecture": architecture_line(config, model),
            "Parameters (true count, sum of model.parameters())": f"{true_param_count(model):,}",
            "Parameters (leaf-module count, what torchsummary prints)": f"{leaf_module_param_count(model):,}",
            "Weights source": source_text,
            "Weights sha256": metadata.get("sha256", "not recorded"),
            **weights_facts(facts),
            "License": license_name or "not recorded by the weights' source",
        },
        "usage": usage,
    }
    return generate_readme(card, repo_id.split("/")[-1])
