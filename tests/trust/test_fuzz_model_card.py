"""Fuzzing the model card: arbitrary values in a config's license, description, paper, origin, notes, tag, label
names and the weights' recorded source.

Each case writes the values into a tiny model directory's config.json and asks the crash-isolated loader process
(``tests/support/loader_worker.py``, capped in memory and time as the other fuzz tests) for the card a push would
upload. A config whose text fields hold text must give a card; one whose fields hold other kinds may be refused
with our error. Every card must read back, with ``huggingface_hub.ModelCard``, to exactly the front matter we
write (no injected key; the license a known id or ``unknown``), and its body must hold our headings only, no raw
HTML or link, and one line per detail. Counts come from ``tests/support/fuzz_plan.py``.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
from huggingface_hub import ModelCard
from hypothesis import given
from hypothesis import strategies as st

from tests.support import tiny
from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, check_outcome, fuzz_settings, offline_loader
from tests.support.hub_fixtures import model_dir
from timm_vitscratch.hub.model_card import LICENSES, card_license, card_metadata

pytestmark = pytest.mark.slow  # model-card fuzz cases in a crash-isolated worker

HEADROOM = 1 << 30
TIMEOUT = 120.0
NAME = "model-card fields (check_model_directory + model_card)"
CLASSES = 3
#: pieces of Markdown, HTML and YAML that a card must show as text
SNIPPETS = st.sampled_from(
    [
        "\n---\nbase_model: x\ninference: true\n",
        "mit\nwidget:\n- src: http://attacker.example/p.png",
        "\n## Security audit\n",
        '<img src="http://attacker.example/t.gif">',
        "<script>alert(1)</script>",
        "[link](javascript:alert(1))",
        "![img](http://attacker.example/i.png)",
        "```\ncode\n```",
        "`x`",
        "$$x$$",
        "&lt;b&gt;",
        "| a | b |\n|---|---|",
        "\u202e\u2066\u200b\u2028\u2029\x00\x1b[31m",
        "\\",
        "_x_ *y* ~~z~~",
        "{{ template }}",
        "- item\n1. item",
        "    indented code",
        ">",
        ":",
        "null",
        "&",
    ]
)
TEXT = st.text(max_size=40) | SNIPPETS | st.sampled_from(list(LICENSES) + ["MIT", " Apache-2.0 ", "other", ""])
TEXTS = st.lists(TEXT | SNIPPETS, max_size=3).map(lambda parts: "".join(parts))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ("license", "description", "origin_url", "paper_name", "paper_ids", "notes", "tag")
#: fields each case may set: mostly text (which must always give a card), sometimes any JSON value
EDITS = st.dictionaries(st.sampled_from(FIELDS), st.one_of([TEXTS] * 6 + [JSON]), max_size=5)
CASE = st.tuples(
    EDITS,
    st.none() | st.lists(TEXTS, min_size=CLASSES, max_size=CLASSES),  # label names
    st.none() | st.dictionaries(st.text(max_size=8), TEXTS | JSON, max_size=3),  # the weights' recorded source
)


@pytest.fixture(scope="module")
def loader():
    with offline_loader(TIMEOUT, HEADROOM) as process:
        yield process


def is_text(name, value) -> bool:
    if name in ("paper_ids", "notes"):
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    return isinstance(value, str)


def check_card(card: str, license_id: str, label: str) -> None:
    parsed = ModelCard(card, ignore_metadata_errors=False)
    assert parsed.data.to_dict() == card_metadata(license_id), f"{label}: front matter {parsed.data.to_dict()}"
    body = re.sub(r"```.*?```", "", parsed.text, flags=re.S)  # our usage code blocks
    headings = [line for line in body.splitlines() if line.startswith("#")]
    assert headings == ["# Model card for name", "## Model Details", "## Model Usage"], f"{label}: {headings}"
    assert "<" not in body, f"{label}: raw HTML in the body"
    assert not re.search(r"(?<!\\)\]\(", body), f"{label}: a link in the body"
    details = body.split("## Model Details\n", 1)[1].split("\n## ", 1)[0].strip().splitlines()
    assert all(line.startswith("- **") for line in details), f"{label}: a value spans lines: {details}"


def test_model_card_fields(loader, tmp_path):
    directory = model_dir(tmp_path / "model", tiny(num_classes=CLASSES))
    original = json.loads((directory / "config.json").read_text())
    CASES[NAME].clear()

    @fuzz_settings(PLAN[NAME])
    @given(CASE)
    def case(drawn):
        edits, labels, source = drawn
        config = json.loads(json.dumps(original))
        config["pretrained_cfg"].update(edits)
        if labels is not None:
            config["label_names"] = labels
        if source is not None:
            config["vitscratch"]["source"] = source
        (directory / "config.json").write_text(json.dumps(config))
        label = repr(drawn)
        result = loader.run("model_card", directory)
        outcome = check_outcome(result, str(directory), label)
        if all(is_text(k, v) for k, v in edits.items()):
            assert outcome == "ok", f"{label}: text fields refused: {result.get('message')}"
        if outcome == "ok":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                random_init = isinstance(source, dict) and source.get("weights") == "random init"
                license_id = card_license(None if random_init else config["pretrained_cfg"].get("license"))
            check_card(result["card"], license_id, label)
        CASES[NAME][outcome] += 1

    case()
    assert sum(CASES[NAME].values()) == PLAN[NAME]
    assert CASES[NAME]["ok"] > 0 and CASES[NAME]["error"] > 0
