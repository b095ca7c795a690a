"""The README model card pushed with a model: architecture, both counts, weights source, usage, license.

A card states only what the model's files record: a license, paper, origin or published top-1 appears
when ``config.json``'s ``pretrained_cfg`` holds it, and never for weights its ``vitscratch`` block says
are a random init (timm gives such a model its default tag's cfg, whose facts are not its own).

A card carries data, not markup. Whatever comes from a config or a checkpoint (a description, a paper
name, the weights' source) becomes one line of escaped text (:func:`card_text`): no newline, no HTML, no
link, image, heading or code span of its own. The YAML front matter holds only values of ours: the tags,
the library, and a license from :data:`LICENSES` (a recorded license the table does not know becomes
``unknown`` there, and is shown escaped in the card's body; one whose text travels with the weights, see
:mod:`timm_vitscratch.licenses`, is ``other`` with its name and the file holding its text, which the body
names too). ``huggingface_hub.ModelCard`` must parse the front matter back to exactly these fields, or no
card is made.
"""

from __future__ import annotations

import json
import unicodedata
import warnings
from typing import Any

from huggingface_hub import ModelCard
from huggingface_hub.utils import validate_repo_id
from torch import nn

from ..inspect.counts import leaf_module_param_count, true_param_count
from ..licenses import STANDARD, TRAVELLING, UNKNOWN, travelling_license
from ..model_dir import METADATA_KEY, recorded_facts
from ..models.architecture import describe_model
from ..private_api import generate_readme

TAGS = ["image-classification", "timm", "timm_vitscratch", "vision-transformer"]
TASK = "image-classification"
LIBRARY = "timm"
#: the Hub's license identifier for "not stated" (timm's card writer would otherwise claim apache-2.0)
UNKNOWN_LICENSE = UNKNOWN
#: license ids a card may state, as the Hub writes them (lowercase SPDX ids): those of the weights the zoo
#: offers (timm's and Google's apache-2.0, torchvision's bsd-3-clause, SWAG's cc-by-nc-4.0) and those
#: people plausibly give their own weights; then the ids of licenses whose text travels with the weights
#: (the DINOv3 License, FAIR's noncommercial one), which the Hub knows by no id: their card says ``other``,
#: with name and file
LICENSES = (*STANDARD, *TRAVELLING, UNKNOWN_LICENSE)
#: the most characters of one value a card shows (a longer one is cut, and says so)
MAX_CARD_TEXT = 1000
#: Markdown and HTML that a value's characters could start, each written as itself
_ESCAPES = {
    "\\": "\\\\",
    "`": "\\`",
    "*": "\\*",
    "_": "\\_",
    "[": "\\[",
    "]": "\\]",
    "|": "\\|",
    "~": "\\~",
    "$": "\\$",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
}
_NAMED = {"\n": "\\\\n", "\r": "\\\\r", "\t": "\\\\t"}


def card_text(value: Any, limit: int = MAX_CARD_TEXT) -> str:
    """``value`` as one line of Markdown that shows exactly its characters and means nothing else.

    Text is taken as it is, anything else as JSON. Markdown's and HTML's special characters are escaped
    (an ``_`` inside a word, which Markdown leaves alone, stays readable); newlines, other control, format
    and separator characters are written as ``\\n`` / ``\\uXXXX``; more than ``limit`` characters are cut.
    """
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    cut = len(text) > limit
    text = text[:limit]
    out = []
    for index, char in enumerate(text):
        if char in _NAMED:
            out.append(_NAMED[char])
        elif unicodedata.category(char)[0] == "C" or unicodedata.category(char) in ("Zl", "Zp"):
            out.append(f"\\\\u{ord(char):04x}")
        elif char == "_" and 0 < index < len(text) - 1 and text[index - 1].isalnum() and text[index + 1].isalnum():
            out.append(char)
        else:
            out.append(_ESCAPES.get(char, char))
    return "".join(out) + (f" … (cut at {limit} characters)" if cut else "")


def card_license(recorded: Any) -> str:
    """The front matter's license for what ``pretrained_cfg.license`` records (None: not recorded)."""
    if recorded is None:
        return UNKNOWN_LICENSE
    name = recorded.strip().lower() if isinstance(recorded, str) else None
    if name in LICENSES:
        return name
    warnings.warn(
        f"config.json's license {card_text(recorded, 80)} is not a license id the model card may state "
        f"({', '.join(LICENSES)}); the card's metadata says {UNKNOWN_LICENSE!r} and its text shows the "
        "recorded value",
        stacklevel=3,
    )
    return UNKNOWN_LICENSE


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
    """Card lines for what the weights' source publishes (preprocessing, paper, origin, top-1), as text to
    escape: every value is the config's, whatever its type."""
    from ..models.pretrained import top1

    cfg = pretrained_cfg
    facts = {}
    size = cfg.get("input_size")
    if size:
        shown = f"{size[-2]}x{size[-1]}" if isinstance(size, list | tuple) and len(size) >= 2 else str(size)
        facts["Preprocessing"] = (
            f"input {shown}, {cfg.get('interpolation')} resize, crop_pct {cfg.get('crop_pct')} "
            f"({cfg.get('crop_mode', 'center')}), mean {_listed(cfg.get('mean', ()))}, "
            f"std {_listed(cfg.get('std', ()))}"
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


def _listed(values: Any) -> str:
    return str(tuple(values)) if isinstance(values, list | tuple) else str(values)


def card_metadata(license_id: str) -> dict[str, Any]:
    """The card's front matter: ours only (``huggingface_hub.ModelCard`` reads the card back to exactly this)."""
    travelling = travelling_license(license_id)
    fields = travelling.card_metadata() if travelling is not None else {"license": license_id}
    return {"tags": list(TAGS), "pipeline_tag": TASK, "library_name": LIBRARY, **fields}


def model_card(config: dict[str, Any], model: nn.Module, repo_id: str) -> str:
    """Markdown card for ``repo_id`` holding ``config`` (timm Hub config) and weights of ``model``.

    Every value from ``config`` is one line of escaped text (:func:`card_text`). Raises ValueError for a
    ``repo_id`` that is not a Hub repo id (it is written into the card's code blocks as it is).
    """
    validate_repo_id(repo_id)
    metadata = config.get(METADATA_KEY)
    metadata = metadata if isinstance(metadata, dict) else {}
    source = metadata.get("source")
    source_text = json.dumps(source, sort_keys=True, default=repr) if source else "not recorded"
    facts = recorded_facts(config)
    recorded = facts.get("license")
    license_id = card_license(recorded)
    travelling = travelling_license(license_id)
    if recorded is None:
        license_line = "not recorded by the weights' source"
    elif travelling is not None:
        license_line = (
            f"{travelling.name} ({travelling.id}); its text is in {travelling.file_name}, which must go with "
            "every copy of these weights"
        )
    elif isinstance(recorded, str) and recorded.strip().lower() == UNKNOWN_LICENSE:
        license_line = "unknown: the weights' source names none"
    elif license_id == UNKNOWN_LICENSE:
        license_line = f"recorded as {card_text(recorded)} (not a license id the Hub knows)"
    else:
        license_line = license_id
    usage = (
        "```python\n"
        "import timm\n"
        "import timm_vitscratch  # registers the scratch_* architectures with timm\n\n"
        f"model = timm.create_model('hf-hub:{repo_id}', pretrained=True).eval()\n"
        "```\n\n"
        "Or install a verified copy (sha256 checked against `config.json`) into a directory:\n\n"
        f"```bash\nvitscratch pull {repo_id} OUT_DIR\n```\n"
    )
    details = {
        "Architecture": architecture_line(config, model),
        "Parameters (true count, sum of model.parameters())": f"{true_param_count(model):,}",
        "Parameters (leaf-module count, what torchsummary prints)": f"{leaf_module_param_count(model):,}",
        "Weights source": source_text,
        "Weights sha256": metadata.get("sha256", "not recorded"),
        **weights_facts(facts),
    }
    expected = card_metadata(license_id)
    card = {
        **{k: v for k, v in expected.items() if k.startswith("license")},
        "tags": list(TAGS),
        "description": (
            "A Vision Transformer written from scratch in PyTorch and registered with timm by the "
            "timm_vitscratch plugin. "
            "The repository holds timm's Hub layout: `config.json` and `model.safetensors`."
        ),
        "details": {**{k: card_text(v) for k, v in details.items()}, "License": license_line},
        "usage": usage,
    }
    text = generate_readme(card, card_text(repo_id.split("/")[-1]), task_name=TASK)
    parsed = ModelCard(text, ignore_metadata_errors=False).data.to_dict()
    if parsed != expected:  # the card's own metadata writer would have let something through
        raise ValueError(f"the model card's metadata reads back as {parsed}, not as written ({expected})")
    return text
