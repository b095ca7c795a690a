"""timm_vitscratch/inspect/zoo_counts.json: the counts `vitscratch list` prints, pinned and equal to a fresh count."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from timm_vitscratch.inspect import zoo_counts
from timm_vitscratch.inspect.render import zoo_table
from timm_vitscratch.inspect.zoo_counts import (
    DATA,
    GENERATE,
    differences,
    live_rows,
    pinned_rows,
    read,
    registry_rows,
    render_data,
    sources_sha256,
    zoo_text,
)
from timm_vitscratch.models.variants import ARCHITECTURES

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def live():
    return live_rows()  # every variant and reference built on meta and counted (seconds)


@pytest.fixture
def no_building(monkeypatch):
    def refuse(name, reference=True):
        raise AssertionError(f"{name} was built")

    monkeypatch.setattr(zoo_counts, "live_row", refuse)


@pytest.mark.slow  # every variant and its reference built
def test_the_pinned_counts_equal_a_fresh_count(live):
    assert [row.name for row in live] == list(ARCHITECTURES)
    assert differences(live) == {}, f"zoo_counts.json is stale: run `{GENERATE}`"
    assert DATA.read_text(encoding="utf-8") == render_data(live, sources_sha256()), f"run `{GENERATE}`"
    assert zoo_text(live) == zoo_table()


def test_the_pinned_rows_are_the_registrys_and_list_builds_none(no_building):
    rows = pinned_rows()
    assert rows is not None, f"models/variants.py or family.py changed since zoo_counts.json: run `{GENERATE}`"
    assert [row.name for row in rows] == list(ARCHITECTURES)
    assert all(row.args == json.loads(json.dumps(ARCHITECTURES[row.name])) for row in rows)
    assert zoo_table() == zoo_text(rows) and zoo_table(reference=False) == zoo_text(rows, reference=False)
    b16 = next(line for line in zoo_table().splitlines() if line.startswith("scratch_vit_b16 "))
    assert b16.split()[1:5] == ["1000", "86,567,656", "86,415,592", "152,064"]
    assert b16.endswith("86,567,656 (torchvision vit_b_16)   yes")


def test_a_variant_not_pinned_or_changed_since_is_built_for_its_row(tmp_path, monkeypatch):
    """Registry sources other than the pinned ones: the registry is read, and a variant the file does not hold at its
    arguments is built and counted; the others are the file's."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    data["sources_sha256"] = "0" * 64
    held = data["rows"]
    del held["scratch_vit_ti16"]  # a variant added since
    held["scratch_vit_s16"] = {**held["scratch_vit_s16"], "args": {**held["scratch_vit_s16"]["args"], "depth": 6}}
    held["scratch_vit_s16"]["true"] = 1  # counted at other arguments: not shown
    held["scratch_vit_b16"]["true"] = 2  # pinned at the registry's arguments: shown as pinned
    path = tmp_path / "zoo_counts.json"
    path.write_text(json.dumps(data))
    assert pinned_rows(path) is None
    built = []
    live_row = zoo_counts.live_row
    monkeypatch.setattr(zoo_counts, "live_row", lambda name, reference=True: built.append(name) or live_row(name))
    rows = {row.name: row for row in registry_rows(path=path)}
    assert built == ["scratch_vit_ti16", "scratch_vit_s16"]
    assert list(rows) == list(ARCHITECTURES)
    pinned = read()[1]
    assert rows["scratch_vit_ti16"] == pinned["scratch_vit_ti16"]
    assert rows["scratch_vit_s16"] == pinned["scratch_vit_s16"]
    assert rows["scratch_vit_b16"].true == 2


def test_check_names_each_difference_and_the_generator_writes_the_file(tmp_path, monkeypatch, capsys):
    rows = list(read()[1].values())  # stand-ins for a fresh count: the check compares, it does not count
    monkeypatch.setattr(zoo_counts, "live_rows", lambda reference=True: rows)
    path = tmp_path / "zoo_counts.json"
    assert zoo_counts.main([str(path)]) == 0
    assert path.read_text(encoding="utf-8") == DATA.read_text(encoding="utf-8")
    assert zoo_counts.main([str(path), "--check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{path}: {len(rows)} rows in sync"

    stale = [replace(rows[0], true=rows[0].true + 1), *rows[2:], replace(rows[1], name="scratch_vit_zz")]
    path.write_text(render_data(stale, "0" * 64))
    assert zoo_counts.main([str(path), "--check"]) == 1
    report = capsys.readouterr().out.splitlines()
    assert report == [
        f"{rows[0].name}: true pinned {rows[0].true + 1!r}, live {rows[0].true!r}",
        f"{rows[1].name}: not pinned",
        "scratch_vit_zz: pinned, not registered",
        "generated from other models/variants.py and models/family.py (vitscratch list imports the registry)",
    ]
    assert zoo_counts.main([str(tmp_path / "none.json"), "--check"]) == 1
    # without references, theirs are not compared
    ours = [replace(row, reference=None, reference_true=None) for row in rows]
    assert differences(ours, reference=False) == {} and "scratch_vit_b16" in differences(ours)


def test_the_file_is_package_data():
    """The wheel ships the file (tests/packaging/test_cli.py reads it from a built wheel)."""
    package_data = (PROJECT / "pyproject.toml").read_text(encoding="utf-8").split("[tool.setuptools.package-data]")[1]
    assert '"inspect/zoo_counts.json"' in package_data.split("\n[")[0]
