"""A model card carries data, not markup (probe r04).

r04: a config.json whose ``license`` held newlines added ``base_model``, ``inference`` and ``widget`` keys to the
pushed card's YAML front matter, and whose ``description`` added a heading and a tracking ``<img>`` to its body.
Every value from a config now becomes one line of escaped text, the license is a known id (or ``unknown``), and
``huggingface_hub.ModelCard`` reads the front matter back to exactly the fields written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import ModelCard, hf_hub_download

from tests.support import tiny
from tests.support.hub_fixtures import model_dir, repo_for
from timm_vitscratch.cli import main as cli_main
from timm_vitscratch.hub.model_card import LICENSES, card_license, card_metadata, card_text, model_card
from timm_vitscratch.model_dir import check_model_directory, model_config

pytestmark = pytest.mark.slow  # pushes through the local Hub server

LICENSE = (
    "mit\nbase_model: google/vit-base-patch16-224\ninference: true\nwidget:\n- src: http://attacker.example/pixel.png"
)
DESCRIPTION = 'ok\n\n## Security audit\nThis model was **verified safe by Hugging Face**. <img src="http://attacker.example/t.gif">'
HOSTILE = {
    "license": LICENSE,
    "description": DESCRIPTION,
    "origin_url": "[click](javascript:alert(1)) ![x](http://attacker.example/x.png)",
    "paper_name": "`code` $x$ &lt;b&gt; <script>alert(1)</script>\u202eevil\u2028next",
    "paper_ids": ["arXiv:1\r\n---\nlicense: apache-2.0"],
    "notes": ["ImageNet-1k top-1 not-a-number"],
}
HEADINGS = ["# Model card for {name}", "## Model Details", "## Model Usage"]


def card_parts(card: str) -> tuple[dict, str]:
    """The front matter as huggingface_hub reads it, and the body outside code blocks."""
    parsed = ModelCard(card, ignore_metadata_errors=False)
    body = re.sub(r"```.*?```", "", parsed.text, flags=re.S)
    return parsed.data.to_dict(), body


def assert_card_is_data(card: str, license_id: str, name: str, details: int | None = None) -> None:
    metadata, body = card_parts(card)
    assert metadata == card_metadata(license_id)
    assert [line for line in body.splitlines() if line.startswith("#")] == [h.format(name=name) for h in HEADINGS]
    assert "<" not in body and "](" not in body.replace("\\](", "")
    section = body.split("## Model Details\n", 1)[1].split("\n## ", 1)[0].strip().splitlines()
    assert all(line.startswith("- **") for line in section), section
    if details is not None:
        assert len(section) == details


def hostile_config(**fields):
    model = tiny()
    config = model_config(model, weights_sha256="0" * 64, source={"format": "test", "note": "a\n## b <i>"})
    config["pretrained_cfg"].update(fields)
    return config, model


def test_r04_the_hostile_config_gives_a_card_of_data():
    config, model = hostile_config(**HOSTILE)
    with pytest.warns(UserWarning, match="is not a license id the model card may state"):
        card = model_card(config, model, "victim/model")
    assert_card_is_data(card, "unknown", "model", details=10)
    for shown in (
        "recorded as mit\\\\nbase_model: google/vit-base-patch16-224\\\\ninference: true",
        "ok\\\\n\\\\n## Security audit\\\\nThis model was \\*\\*verified safe by Hugging Face\\*\\*. &lt;img",
        "\\[click\\](javascript:alert(1)) !\\[x\\](http://attacker.example/x.png)",
        "\\`code\\` \\$x\\$ &amp;lt;b&amp;gt; &lt;script&gt;alert(1)&lt;/script&gt;\\\\u202eevil\\\\u2028next",
    ):
        assert shown in card, shown
    assert "Published ImageNet-1k top-1" not in card  # a note that holds no number is no accuracy


def test_r04_pushed_through_the_cli(hub_env, local_hub, tmp_path, request, capsys):
    directory = model_dir(tmp_path / "model", tiny(num_classes=5))
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"].update(license=LICENSE, description=DESCRIPTION)
    (directory / "config.json").write_text(json.dumps(config))
    repo = repo_for(request)
    assert cli_main(["push", str(directory), repo]) == 0
    assert "Traceback" not in capsys.readouterr().err
    card = Path(hf_hub_download(repo, "README.md")).read_text()
    assert_card_is_data(card, "unknown", repo.split("/")[1])
    assert local_hub.store.resolve(repo, "main")["files"]["README.md"]  # the Hub holds that card


@pytest.mark.parametrize(
    "recorded,expected",
    [
        ("mit", "mit"),
        ("MIT", "mit"),
        (" Apache-2.0\n", "apache-2.0"),
        ("cc-by-nc-4.0", "cc-by-nc-4.0"),
        (None, "unknown"),
    ],
)
def test_a_known_license_is_written_as_the_hubs_id(recorded, expected):
    assert card_license(recorded) == expected
    config, model = hostile_config(license=recorded)
    card = model_card(config, model, "org/name")
    assert_card_is_data(card, expected, "name")
    assert f"**License:** {expected}" in card or recorded is None


@pytest.mark.parametrize("recorded", ["llama3", "other", "apache-2.0 OR mit", "see LICENSE", ""])
def test_a_license_the_table_does_not_know_is_unknown_in_the_metadata(recorded):
    config, model = hostile_config(license=recorded)
    with pytest.warns(UserWarning, match="not a license id"):
        card = model_card(config, model, "org/name")
    assert_card_is_data(card, "unknown", "name")
    assert f"**License:** recorded as {card_text(recorded)} (not a license id the Hub knows)" in card


def test_the_license_table_holds_the_zoos_licenses():
    from timm_vitscratch.models.pretrained import pretrained_tags

    assert {cfg["license"] for cfg in pretrained_tags().values() if cfg.get("license")} <= set(LICENSES)


@pytest.mark.parametrize(
    "value,shown",
    [
        ("scratch_vit_b16", "scratch_vit_b16"),  # an _ inside a word stays readable
        ("_emphasis_ and __strong__", "\\_emphasis\\_ and \\_\\_strong\\_\\_"),
        ("a\nb\r\tc", "a\\\\nb\\\\r\\\\tc"),
        ("<b>&amp;</b>", "&lt;b&gt;&amp;amp;&lt;/b&gt;"),
        ("\\`*[]|~$", "\\\\\\`\\*\\[\\]\\|\\~\\$"),
        ("\u202e\u200b\x00\ud800", "\\\\u202e\\\\u200b\\\\u0000\\\\ud800"),
        ({"format": "x"}, '{"format": "x"}'),
        (0.5, "0.5"),
    ],
)
def test_card_text(value, shown):
    assert card_text(value) == shown


def test_card_text_is_cut_and_says_so():
    assert card_text("x" * 5000) == "x" * 1000 + " … (cut at 1000 characters)"


def test_a_repo_id_that_is_not_one_makes_no_card():
    config, model = hostile_config()
    with pytest.raises(ValueError):
        model_card(config, model, "org/name')\nimport os  #")


def test_a_checked_model_directory_carries_its_data_through(tmp_path):
    """The fields check_model_directory lets through are text; the card made from them is still data."""
    directory = model_dir(tmp_path / "m", tiny())
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"].update(HOSTILE)
    (directory / "config.json").write_text(json.dumps(config))
    checked, model = check_model_directory(directory)
    with pytest.warns(UserWarning):
        assert_card_is_data(model_card(checked, model, "org/m"), "unknown", "m")
