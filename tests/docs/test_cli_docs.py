"""The docs and the CLI agree: every option ``vitscratch CMD --help`` lists is documented where the docs
talk about that command, every ``vitscratch ...`` command line the docs' shell blocks show parses, and
every command and option named in the prose (```vitscratch convert --labels```) exists."""

from __future__ import annotations

import re
import shlex

import pytest

import timm_vitscratch_cli as cli
from tests.docs.test_doc_blocks import FENCE, MARKER, markdown_files, shown_path

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
HEADING = re.compile(r"^#{1,6} ")
SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&"}
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}


def help_options(parser) -> list[str]:
    """The options a parser's --help lists (its own --help aside)."""
    return sorted(set(OPTION.findall(parser.format_help())) - {"--help"})


def sections() -> list[tuple[str, str]]:
    """(where, text) for every heading section of the README and docs/."""
    found = []
    for path in markdown_files():
        start, lines = 1, []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if HEADING.match(line) and lines:
                found.append((f"{shown_path(path)}:{start}", "\n".join(lines)))
                start, lines = number, []
            lines.append(line)
        found.append((f"{shown_path(path)}:{start}", "\n".join(lines)))
    return found


def documented(command: str | None, option: str, pages: list[tuple[str, str]]) -> bool:
    """Whether a section that names ``vitscratch COMMAND`` also names ``option``."""
    name = re.compile(rf"vitscratch {command}(?![\w-])" if command else r"vitscratch(?![\w-])")
    flag = re.compile(rf"(?<![\w-]){re.escape(option)}(?![\w-])")
    return any(name.search(text) and flag.search(text) for _, text in pages)


def shown_commands() -> list[tuple[str, str]]:
    """(where, command line) for every ``vitscratch ...`` line in a shell block."""
    found = []
    for path in markdown_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            opening = FENCE.match(lines[index])
            if opening:
                fence, info = opening.group("fence"), lines[index][len(opening.group("fence")) :].strip()
                output = index > 0 and MARKER.match(lines[index - 1])  # a checked block holds output
                end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == fence)
                if info in SHELL_FENCES and not output:
                    body = "\n".join(lines[index + 1 : end]).replace("\\\n", " ")
                    found += [
                        (f"{shown_path(path)}:{index + 1}", line.strip())
                        for line in body.splitlines()
                        if line.strip().startswith("vitscratch ")
                    ]
                index = end + 1
                continue
            index += 1
    return found


def named_in_prose() -> list[tuple[str, str]]:
    """(where, span) for every inline ```vitscratch ...``` outside code blocks: a command, maybe with options,
    named in a sentence (its arguments may be placeholders such as ``MODEL_DIR``)."""
    found = []
    for path in markdown_files():
        inside = None
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            opening = FENCE.match(line)
            if inside is None and opening:
                inside = opening.group("fence")
            elif inside is not None and line.strip() == inside:
                inside = None
            elif inside is None:
                found += [(f"{shown_path(path)}:{number}", span) for span in re.findall(r"`(vitscratch [^`]+)`", line)]
    return found


def unknown_names(span: str) -> list[str]:
    """The command or options in a prose mention that the CLI does not have."""
    words = span.split()[1:]
    commands = cli.command_parsers()
    if words and not words[0].startswith("-"):
        if words[0] not in commands:
            return [words[0]]
        parser = commands[words[0]]
    else:
        parser = cli.build_parser()
    known = set(help_options(parser)) | {"--help"}
    return [word for word in words if word.startswith("--") and word.split("=")[0] not in known]


def parse(line: str) -> str | None:
    """None when ``line`` parses as the CLI would parse it; else argparse's complaint."""
    tokens = shlex.split(line, comments=True)
    argv = []
    for token in tokens[1:]:
        if token in SHELL_OPERATORS:
            break
        argv.append(token)
    commands = cli.command_parsers()
    if len(argv) == 1 and argv[0] in commands:
        return None  # a command named in prose
    try:
        cli.build_parser().parse_args(argv)
    except SystemExit as done:
        return None if done.code == 0 else f"exit {done.code}"
    return None


COMMANDS: dict[str | None, object] = {None: cli.build_parser(), **cli.command_parsers()}
OPTIONS = [(command, option) for command, parser in COMMANDS.items() for option in help_options(parser)]
SHOWN = shown_commands()
PROSE = named_in_prose()


@pytest.mark.parametrize("command, option", OPTIONS, ids=[f"{c or 'vitscratch'} {o}" for c, o in OPTIONS])
def test_every_option_is_documented_with_its_command(command, option):
    assert documented(command, option, sections()), (
        f"`vitscratch {command or ''} --help` lists {option}, but no section of README.md or docs/ that names "
        f"`vitscratch {command or ''}` mentions it"
    )


@pytest.mark.parametrize("where, line", SHOWN, ids=[where for where, _ in SHOWN])
def test_every_command_shown_parses(where, line, capsys):
    problem = parse(line)
    assert problem is None, f"{where}: `{line}` does not parse ({problem}): {capsys.readouterr().err.strip()}"


@pytest.mark.parametrize("where, span", PROSE, ids=[f"{where} {span}" for where, span in PROSE])
def test_every_command_and_option_named_in_prose_exists(where, span):
    assert unknown_names(span) == [], f"{where}: `{span}` names what the CLI does not have"


def test_the_docs_show_every_command():
    shown = {words[1] for words in (shlex.split(line, comments=True) for _, line in SHOWN) if len(words) > 1}
    assert set(cli.command_parsers()) <= shown


def test_the_checks_catch_an_undocumented_option_and_a_bad_command():
    pages = sections()
    assert documented("convert", "--strict", pages) and not documented("convert", "--no-such-option", pages)
    assert not documented("pull", "--num-heads", pages)  # documented for convert, not for pull
    assert parse("vitscratch convert in.pth out/ --verify") is None
    assert parse("vitscratch convert in.pth") == "exit 2"  # OUT_DIR missing
    assert parse("vitscratch export out/ vit.pth --to onnx") == "exit 2"  # not a target
    assert parse("vitscratch summarise scratch_vit_b16") == "exit 2"
    assert unknown_names("vitscratch export MODEL_DIR --to FORMAT OUT") == []
    assert unknown_names("vitscratch export --ema") == ["--ema"] and unknown_names("vitscratch CMD --help") == ["CMD"]


def test_commands_are_found_in_shell_blocks_and_inline(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "Run `vitscratch list --pretrained`.\n\n```bash\nvitscratch pull ORG/NAME \\\n  out/\n```\n"
        "<!-- check: vitscratch list -->\n```text\nvitscratch is not a command here\n```\n"
    )
    monkeypatch.setattr("tests.docs.test_cli_docs.markdown_files", lambda: [page])
    assert [line for _, line in shown_commands()] == ["vitscratch pull ORG/NAME    out/"]
    assert [span for _, span in named_in_prose()] == ["vitscratch list --pretrained"]
