"""transformers loads our model directories: ``AutoModelForImageClassification`` and the
``image-classification`` pipeline (its ``TimmWrapper`` builds the model with timm), on a directory
from ``vitscratch convert`` and one from ``vitscratch pull``; timm's ``local-dir:`` and ``hf-hub:``
read the same files."""

import json

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForImageClassification, pipeline

from tests.support.hub_fixtures import repo_for
from timm_vitscratch.cli import main as cli_main

pytestmark = pytest.mark.slow  # transformers' pipeline on converted and pulled directories

NAMES = ["cat", "dog", "owl"]
TOL = 1e-5
SOURCES = {  # timm's stock models, small: a plain ViT and a DeiT with its distillation head
    "vit": ("vit_tiny_patch16_224", "scratch_vit_ti16"),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", "scratch_deit_ti16_distilled"),
}


def converted(tmp_path, source="vit"):
    """``vitscratch convert --labels`` of a randomly initialised timm checkpoint; returns the directory."""
    timm_name, _ = SOURCES[source]
    model = timm.create_model(
        timm_name, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=len(NAMES)
    )
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.02)
    save_file(model.state_dict(), str(tmp_path / "source.safetensors"))
    (tmp_path / "labels.txt").write_text("\n".join(NAMES) + "\n")
    out = tmp_path / "converted"
    assert (
        cli_main(
            [
                "convert",
                "--from",
                "timm",
                str(tmp_path / "source.safetensors"),
                str(out),
                "--labels",
                str(tmp_path / "labels.txt"),
                "--num-heads",
                "4",
            ]
        )
        == 0
    )
    return out


def picture(seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8))


def assert_transformers_reads(directory):
    """Both transformers entry points on ``directory`` against timm's ``local-dir:`` model of it."""
    reference = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    assert reference.pretrained_cfg["label_names"] == NAMES
    model = AutoModelForImageClassification.from_pretrained(str(directory)).eval()
    assert type(model).__name__ == "TimmWrapperForImageClassification"
    assert model.config.id2label == dict(enumerate(NAMES))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        diff = (model(pixel_values=x).logits - reference(x)).abs().max().item()
        assert diff <= TOL
        features = AutoModel.from_pretrained(str(directory)).eval()(pixel_values=x).pooler_output
        assert (features - reference.forward_head(reference.forward_features(x), pre_logits=True)).abs().max() <= TOL

    classify = pipeline("image-classification", model=str(directory))
    image = picture()
    shown = classify(image)
    config = timm.data.resolve_data_config(model=reference)
    with torch.no_grad():  # timm's own preprocessing and model
        probabilities = reference(timm.data.create_transform(**config)(image).unsqueeze(0)).softmax(dim=-1)[0]
    assert [entry["label"] for entry in shown] == [NAMES[i] for i in probabilities.argsort(descending=True)]
    for entry in shown:
        assert abs(entry["score"] - probabilities[NAMES.index(entry["label"])].item()) <= TOL
    return diff, shown[0]["label"]


@pytest.mark.parametrize("source", list(SOURCES))
def test_transformers_loads_a_converted_directory(tmp_path, source):
    directory = converted(tmp_path, source)
    config = json.loads((directory / "config.json").read_text())
    assert config["num_classes"] == len(NAMES) and "num_classes" not in config["model_args"]
    assert config["architecture"] == SOURCES[source][1] and config["label_names"] == NAMES
    assert_transformers_reads(directory)
    # timm's reader of the same directory: the source's logits
    source_model = timm.create_model(
        SOURCES[source][0], img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=len(NAMES)
    )
    source_model.load_state_dict(load_file(str(tmp_path / "source.safetensors")))
    loaded = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (loaded(x) - source_model.eval()(x)).abs().max() <= TOL


def test_transformers_loads_a_pulled_directory_and_timm_reads_the_hub(hub_env, tmp_path, request):
    repo = repo_for(request)
    directory = converted(tmp_path)  # from a bare file that names no license: the push names it
    assert cli_main(["push", str(directory), repo, "--license", "apache-2.0"]) == 0
    pulled = tmp_path / "pulled"
    assert cli_main(["pull", repo, str(pulled)]) == 0
    assert_transformers_reads(pulled)
    from_hub = timm.create_model(f"hf-hub:{repo}", pretrained=True).eval()
    from_dir = timm.create_model(f"local-dir:{directory}", pretrained=True).eval()
    assert from_hub.pretrained_cfg["label_names"] == NAMES
    transformers_from_hub = AutoModelForImageClassification.from_pretrained(repo).eval()  # the repo id itself
    assert transformers_from_hub.config.id2label == dict(enumerate(NAMES))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(from_hub(x), from_dir(x))
        assert (transformers_from_hub(pixel_values=x).logits - from_hub(x)).abs().max() <= TOL
