"""`vitscratch attention` without the `plots` extra: one line naming what is missing and the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.environments import PROJECT, env
from timm_vitscratch.cli import main
from timm_vitscratch.inspect.attention_maps import PlotsExtraMissing, write_attention_png

HINT = "pip install 'timm_vitscratch[plots]'"


@pytest.mark.parametrize(
    ("absent", "named"),
    [
        (["matplotlib"], "matplotlib, which is"),
        (["PIL"], "Pillow, which is"),
        (["matplotlib", "PIL"], "matplotlib and Pillow, which are"),
    ],
)
def test_attention_without_the_extra_says_which_to_install(
    absent: list[str], named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for module in absent:  # None in sys.modules: `import module` fails, as it does where it is not installed
        monkeypatch.setitem(sys.modules, module, None)
    out = tmp_path / "maps.png"
    assert main(["attention", str(tmp_path / "picture.png"), "--model", "scratch_vit_ti16", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"vitscratch: error: attention pictures need {named} not installed: {HINT}\n"
    assert not out.exists()
    with pytest.raises(ImportError, match="timm_vitscratch\\[plots\\]"):  # Python callers catch an ImportError
        write_attention_png(tmp_path / "picture.png", "scratch_vit_ti16", out)


@pytest.mark.slow  # the CLI in a process
def test_the_command_in_a_process_without_matplotlib() -> None:
    """The console script's ``main`` in a process whose import of matplotlib fails, as after a plain
    ``pip install timm_vitscratch`` (run from the project root, so the tree's code is the one imported)."""
    blocked = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from timm_vitscratch_cli import main\n"
        "sys.exit(main(['attention', 'picture.png', '--model', 'scratch_vit_ti16']))\n"
    )
    done = subprocess.run([sys.executable, "-c", blocked], cwd=PROJECT, env=env(), capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines() == [
        f"vitscratch: error: attention pictures need matplotlib, which is not installed: {HINT}"
    ]
    assert isinstance(PlotsExtraMissing("x"), ValueError)  # what the CLI turns into its error line
    assert f"\n{done.stderr}```" in (PROJECT / "docs" / "install.md").read_text(encoding="utf-8")  # as shown there
