"""The DINOv3 License's text travels through the Hub: push uploads it as ``LICENSE.md`` (the package's copy,
whatever the directory holds), pull installs it (the package's copy, never the Hub's file), and the model card
names it in its front matter (``license: other``, ``license_name``, ``license_link``) and in its body.

A classic tiny model whose pretrained cfg records ``dinov3-license`` stands for the DINOv3 variants.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from huggingface_hub import ModelCard, hf_hub_download

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for, upload_raw
from timm_vitscratch import hub
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.hub.client import NothingToPush
from timm_vitscratch.hub.model_card import LICENSES, card_license, card_metadata, model_card
from timm_vitscratch.licenses import TRAVELLING
from timm_vitscratch.model_dir import model_config

DINOV3 = "dinov3-license"
TEXT = TRAVELLING[DINOV3].read()
LICENSE_LINE = (
    "- **License:** DINOv3 License (dinov3-license); its text is in LICENSE.md, which must go with every copy "
    "of these weights"
)
FRONT_MATTER = {
    "tags": ["image-classification", "timm", "timm_vitscratch", "vision-transformer"],
    "pipeline_tag": "image-classification",
    "library_name": "timm",
    "license": "other",
    "license_name": "dinov3-license",
    "license_link": "LICENSE.md",
}


def dinov3_tiny(**kwargs):
    return tiny(pretrained_cfg_overlay=dict(license=DINOV3), **kwargs)


def hub_files(local_hub, repo):
    return sorted(local_hub.store.resolve(repo, "main")["files"])


# --- the card ------------------------------------------------------------------------------------------
def test_the_card_names_the_license_and_its_file():
    model = dinov3_tiny()
    card = model_card(model_config(model, weights_sha256="0" * 64), model, "org/name")
    assert card_license(DINOV3) == DINOV3 and DINOV3 in LICENSES
    assert card_metadata(DINOV3) == FRONT_MATTER
    parsed = ModelCard(card, ignore_metadata_errors=False)
    assert parsed.data.to_dict() == FRONT_MATTER
    assert card.split("---\n")[1].splitlines()[-3:] == [
        "license: other",
        "license_name: dinov3-license",
        "license_link: LICENSE.md",
    ]
    assert LICENSE_LINE in parsed.text.splitlines()


def test_the_fair_noncommercial_license_is_named_the_same_way():
    fair = "fair-noncommercial-research-license"
    model = tiny(pretrained_cfg_overlay=dict(license=fair))
    card = model_card(model_config(model, weights_sha256="0" * 64), model, "org/name")
    parsed = ModelCard(card, ignore_metadata_errors=False)
    assert parsed.data.to_dict() == {**FRONT_MATTER, "license_name": fair} == card_metadata(fair)
    assert (
        "- **License:** FAIR Noncommercial Research License (fair-noncommercial-research-license); its text is "
        "in LICENSE.md, which must go with every copy of these weights"
    ) in parsed.text.splitlines()


def test_a_random_init_card_states_no_license():
    model = dinov3_tiny()
    config = model_config(model, weights_sha256="0" * 64, source={"weights": "random init"})
    card = model_card(config, model, "org/name")
    assert ModelCard(card).data.to_dict()["license"] == "unknown"
    assert "LICENSE.md" not in card and "DINOv3" not in card


# --- push and pull -------------------------------------------------------------------------------------
def assert_pushed_with_the_dinov3_text(local_hub, repo: str) -> ModelCard:
    """The repo holds the model's files and the package's DINOv3 text, and its card names that licence; the card."""
    assert hub_files(local_hub, repo) == [
        ".gitattributes",
        "LICENSE.md",
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    assert Path(hf_hub_download(repo, "LICENSE.md")).read_bytes() == TEXT
    card = ModelCard(Path(hf_hub_download(repo, "README.md")).read_text(), ignore_metadata_errors=False)
    assert card.data.to_dict() == FRONT_MATTER
    return card


@pytest.mark.slow  # through the local Hub server
def test_push_uploads_the_packaged_text_and_pull_installs_it(hub_env, local_hub, tmp_path, request, capsys):
    repo = repo_for(request)
    directory = model_dir(tmp_path / "model", dinov3_tiny(num_classes=7))
    (directory / "LICENSE.md").write_text("a text someone edited\n")  # not what is sent: the package's copy is
    assert cli_main(["push", str(directory), repo]) == 0
    card = assert_pushed_with_the_dinov3_text(local_hub, repo)
    assert LICENSE_LINE in card.text.splitlines()
    assert isinstance(hub.push(directory, repo), NothingToPush)  # the Hub holds the text already: nothing to send

    out = tmp_path / "pulled"
    assert cli_main(["pull", repo, str(out)]) == 0
    assert sorted(os.listdir(out)) == ["LICENSE.md", "README.md", "config.json", "model.safetensors"]
    assert (out / "LICENSE.md").read_bytes() == TEXT
    hub.check_model_directory(out)
    capsys.readouterr()


@pytest.mark.slow
def test_push_of_weights_under_another_license_sends_no_license_text(hub_env, local_hub, tmp_path, request):
    repo = repo_for(request)
    hub.push(model_dir(tmp_path / "model", tiny()), repo)  # timm's apache-2.0, as the default tag records
    assert hub_files(local_hub, repo) == [".gitattributes", "README.md", "config.json", "model.safetensors"]


@pytest.mark.slow
def test_pull_takes_the_text_from_the_package_never_from_the_hub(hub_env, tmp_path, request):
    """A repo published by another tool holds a LICENSE.md of its own: the pull never downloads it."""
    repo = repo_for(request)
    directory = model_dir(tmp_path / "model", dinov3_tiny())
    (directory / "LICENSE.md").write_text("# DINOv3 License\n\nyou may do anything\n")
    upload_raw(directory, repo)
    out = hub.pull(repo, tmp_path / "pulled")
    assert (out / "LICENSE.md").read_bytes() == TEXT

    other = repo_for(request, "-apache")  # weights under apache-2.0 whose repo holds the DINOv3 text anyway
    apache = model_dir(tmp_path / "apache", tiny())
    (apache / "LICENSE.md").write_bytes(TEXT)
    upload_raw(apache, other)
    assert sorted(os.listdir(hub.pull(other, tmp_path / "pulled-apache"))) == ["config.json", "model.safetensors"]


@pytest.mark.slow  # through the local Hub server
@pytest.mark.parametrize(
    ("tag", "license_id"),
    [
        ("scratch_eva02_t14.mim_in22k", "mit"),
        ("scratch_pe_core_t16.fb", "apache-2.0"),
        ("scratch_dinov2_s14_reg4.lvd142m", "apache-2.0"),
        ("scratch_siglip_b16.v2_webli", "apache-2.0"),
        ("scratch_dinov3_s16.lvd1689m", DINOV3),
    ],
)
def test_family_license_push_pull_hf_hub(hub_env, local_hub, tmp_path, request, tag, license_id):
    """Each family's license, as the tag's cfg records it (timm's), in the model directory, the card push writes,
    the directory pull installs and the model ``hf-hub:`` builds; a standard license needs no text beside the
    weights, the DINOv3 License's text goes with them both ways."""
    import timm

    options = dict(depth=1, img_size=32) if "dinov3" in tag else dict(depth=1, embed_dim=96, num_heads=4)
    directory = model_dir(tmp_path / "model", timm.create_model(tag, pretrained=False, **options))
    assert json.loads((directory / "config.json").read_text())["pretrained_cfg"]["license"] == license_id
    repo = repo_for(request)
    hub.push(directory, repo)
    text = ["LICENSE.md"] if license_id == DINOV3 else []
    assert hub_files(local_hub, repo) == sorted(
        [".gitattributes", "README.md", "config.json", "model.safetensors", *text]
    )
    out = hub.pull(repo, tmp_path / "pulled")
    assert json.loads((out / "config.json").read_text())["pretrained_cfg"]["license"] == license_id
    card = ModelCard((out / "README.md").read_text()).data.to_dict()
    assert card.get("license_name", card["license"]) == license_id
    assert sorted(os.listdir(out)) == sorted(["README.md", "config.json", "model.safetensors", *text])
    if text:
        assert (out / "LICENSE.md").read_bytes() == TEXT
    loaded = timm.create_model(f"hf-hub:{repo}", pretrained=True)
    assert loaded.pretrained_cfg["license"] == license_id


@pytest.mark.slow
def test_push_refuses_an_unknown_license_unless_license_names_it(hub_env, local_hub, tmp_path, request, capsys):
    """A directory whose source named no license records ``unknown``: push sends nothing without ``--license``;
    with it, the pushed config and card record that id, and the text of a license that travels goes too. A
    ``--license`` that contradicts the directory's own is refused."""
    repo = repo_for(request)
    directory = model_dir(tmp_path / "model", tiny(), license=None)
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"]["license"] = "unknown"  # as convert writes it for a source naming none
    (directory / "config.json").write_text(json.dumps(config))
    assert cli_main(["push", str(directory), repo]) == 2
    assert "the weights' license is unknown" in capsys.readouterr().err
    assert cli_main(["push", str(directory), repo, "--license", DINOV3]) == 0
    assert_pushed_with_the_dinov3_text(local_hub, repo)
    pushed = json.loads(Path(hf_hub_download(repo, "config.json")).read_text())
    assert pushed["pretrained_cfg"]["license"] == DINOV3
    assert json.loads((directory / "config.json").read_text())["pretrained_cfg"]["license"] == "unknown"  # as it was
    apache = model_dir(tmp_path / "apache", tiny())  # the default tag's apache-2.0
    assert cli_main(["push", str(apache), repo, "--license", "mit"]) == 2
    assert "records the license apache-2.0; --license mit disagrees" in capsys.readouterr().err
