"""No raw control byte from the command line reaches the terminal (issue 36, s15): names, tags, ``hf-hub:`` names,
repo ids and paths that hold terminal escapes are shown escaped in the CLI's one error line, as config values are."""

from __future__ import annotations

import pytest

from timm_vitscratch.cli import main
from timm_vitscratch.errors import terminal_safe

ESCAPES = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b\u202e"  # OSC 52 (clipboard), clear screen, C1 CSI, bidi override


def test_terminal_safe_escapes_controls_and_keeps_text():
    assert terminal_safe("plain 'name' ok") == "plain 'name' ok"
    assert terminal_safe("a" + ESCAPES) == "a\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x9b\\u202e"
    assert terminal_safe("two\nlines\tand a tab") == "two\nlines\tand a tab"


@pytest.mark.parametrize(
    "argv",
    [
        ["summary", "scratch_vit" + ESCAPES],
        ["summary", "scratch_vit_ti16.t" + ESCAPES],
        ["summary", "hf-hub:org/na" + ESCAPES],
        ["pull", "org/na" + ESCAPES, "{tmp}/out"],
        ["push", "scratch_vit_ti16", "org/x" + ESCAPES],
        ["convert", "{tmp}/f" + ESCAPES, "{tmp}/out"],
        ["attention", "{tmp}/x" + ESCAPES, "--model", "scratch_vit" + ESCAPES],
    ],
    ids=["summary-name", "summary-tag", "summary-hf-hub", "pull-repo", "push-repo", "convert-path", "attention"],
)
def test_names_with_escapes_are_shown_escaped(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        status = main(argv)
    except SystemExit as exit:  # argparse's own refusals
        status = exit.code
    assert status == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert "error" in text
    assert not any(c in text for c in "\x1b\x07\x9b\u202e"), text
    assert "\\x1b" in text


def test_result_lines_echo_paths_escaped(tmp_path, capsys, monkeypatch):
    """A command that succeeds echoes the paths it was given (``wrote ...``): escaped too, as in its errors."""
    from safetensors.torch import save_file

    from tests.support.sources import timm_vit

    monkeypatch.chdir(tmp_path)
    save_file(timm_vit().state_dict(), "vit.safetensors")
    out = "out\x1b]0;pwned\x07"
    assert main(["convert", "vit.safetensors", out, "--num-heads", "3"]) == 0
    printed = capsys.readouterr().out
    assert (
        "\x1b" not in printed and "\x07" not in printed and "wrote out\\x1b]0;pwned\\x07/model.safetensors" in printed
    )
    assert (tmp_path / out / "model.safetensors").is_file()  # the path itself is the one given
