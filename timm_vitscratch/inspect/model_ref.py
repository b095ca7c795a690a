"""What ``vitscratch summary`` and ``vitscratch attention`` take as a model, resolved in one place.

A registered name (``scratch_vit_b16``), a pretrained tag (``scratch_vit_b16.tv_in1k``), a model
directory, ``local-dir:DIR`` or ``hf-hub:ORG/NAME``: each becomes the name ``timm.create_model``
takes for it, so timm's own loaders read the config (and, when asked, the weights).

A directory's or repo's ``config.json`` is read and checked here first, before timm sees it: timm builds
whatever architecture a config names, and only ours check their arguments, so a config naming timm's own
``vit_tiny_patch16_224`` with 20,000 blocks would be built before anyone could refuse it. A Hub repo is
pinned to the commit whose config was checked.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import constants as hf_constants
from timm.models import split_model_name_tag
from torch import nn

from ..errors import ModelArgsError, ModelDirectoryError
from ..gate.hub_config import read_hub_config
from ..gate.json_data import read_json_object
from ..models.config_file import check_config_file
from ..models.pretrained_cfgs import default_cfgs, unknown_model_message
from ..models.variants import ARCHITECTURES
from ..models.vision_transformer import VisionTransformer
from ..weight_sources import cached_weights, hub_file_source, not_reached, unreachable

KINDS = (
    "a registered name (scratch_vit_b16), a pretrained tag (scratch_vit_b16.tv_in1k), a model directory "
    "(config.json + model.safetensors), local-dir:DIR or hf-hub:ORG/NAME"
)
PREFIXES = ("local-dir:", "hf-hub:")
CONFIG_NAME = "config.json"


def timm_model_name(ref: str) -> str:
    """``ref`` as ``timm.create_model`` names it; ValueError for a name or tag that is not registered, and
    :class:`ModelDirectoryError` for a directory's or repo's config that is not one of ours or not data
    (checked here, before timm builds anything; a repo comes back pinned: ``hf-hub:ORG/NAME@commit``)."""
    if ref.startswith("hf-hub:"):
        repo_id, _, revision = ref[len("hf-hub:") :].partition("@")
        commit, config = _cached_config_without_network(ref, repo_id, revision) or read_hub_config(
            repo_id, revision or None, ModelDirectoryError
        )
        _check_config(config, f"{repo_id}@{commit}")
        return f"hf-hub:{repo_id}@{commit}"
    directory = ref[len("local-dir:") :] if ref.startswith("local-dir:") else ref
    if ref.startswith("local-dir:") or Path(ref).is_dir():
        if Path(directory).is_dir() and not (Path(directory) / "config.json").exists():
            raise ModelDirectoryError(
                f"{directory} is a folder but not a model directory: it holds no config.json (a model directory "
                f"holds config.json + model.safetensors, as convert, pull and training write it)"
            )
        config = read_json_object(Path(directory) / "config.json", ModelDirectoryError, inside=directory)
        _check_config(config, directory)
        return f"local-dir:{directory}"
    variant, tag = split_model_name_tag(ref)
    if variant not in ARCHITECTURES:
        raise ValueError(f"{unknown_model_message(variant)} (a model is {KINDS})")
    known = [t for t in default_cfgs[variant].tags if t]
    if tag and tag not in known:
        raise ValueError(
            f"{variant} has no pretrained tag {tag!r}; its tags: {', '.join(known) or 'none'} "
            f"(vitscratch list --pretrained)"
        )
    return ref


def _cached_config_without_network(ref: str, repo_id: str, revision: str) -> tuple[str, dict] | None:
    """Before huggingface_hub's retries (about 25 s without a network): one short request to the Hub. None when
    it answers (or HF_HUB_OFFLINE is set: huggingface_hub then reads its cache at once); the cached config and
    its commit when it does not and the cache holds one; else one error, in seconds, saying what to do."""
    if hf_constants.HF_HUB_OFFLINE:
        return None
    source = hub_file_source(ref[len("hf-hub:") :], CONFIG_NAME)
    folder = source.cache_path
    error = unreachable(source)
    if error is None:
        return None
    found = cached_weights(source)
    if found is None:
        raise ModelDirectoryError(
            f"cannot read {CONFIG_NAME} of {ref}: {not_reached(source, error)}, and the Hugging Face cache has no "
            f"copy in {folder}; on a machine with network, `vitscratch pull {repo_id} DIR` (then give DIR here) or "
            f"`hf download {repo_id}` and copy {folder} into this machine's cache (HF_HUB_CACHE)"
        )
    commit = found[1]
    return commit, read_json_object(folder / "snapshots" / commit / CONFIG_NAME, ModelDirectoryError)


def _check_config(config: dict, label: str) -> None:
    try:
        check_config_file(config, f"{label}: config.json")
    except ModelArgsError as err:
        raise ModelDirectoryError(str(err)) from None


def has_weights(ref: str) -> bool:
    """Whether ``ref`` names weights (a tag, a directory, a Hub repo) rather than a bare architecture."""
    return ref.startswith(PREFIXES) or Path(ref).is_dir() or bool(split_model_name_tag(ref)[1])


def check_scratch_model(model: nn.Module, ref: str) -> VisionTransformer:
    """``model`` if it is one of ours; a ValueError naming what ``ref`` holds otherwise."""
    if not isinstance(model, VisionTransformer):
        architecture = getattr(model, "pretrained_cfg", {}).get("architecture", type(model).__name__)
        raise ValueError(
            f"{ref} holds {architecture!r}, which is not a timm_vitscratch model (its "
            f"architecture must be one of {', '.join(ARCHITECTURES)})"
        )
    return model
