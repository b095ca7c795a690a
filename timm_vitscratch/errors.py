"""The project's exception types, the one way their messages list many things (and show a value from a file),
and their CLI wording."""

from __future__ import annotations

import os
from collections.abc import Iterable


class ConversionError(ValueError):
    """A checkpoint could not be read, converted, verified or written.

    The message names the file (when there is one) and says what was wrong and what was expected.
    Every loader and converter in the package raises this (and nothing else) for bad input.
    """

    def __init__(self, problem: str, path: str | os.PathLike | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path is not None else problem)


class VerificationError(ConversionError):
    """The converted model's logits differ from the source model's by more than the tolerance."""


class ModelArgsError(ValueError):
    """A config, side file or checkpoint's args asks for a model option outside the allow-list or its bounds.

    Raised by :mod:`timm_vitscratch.models.model_args` on every route a saved config takes (``local-dir:``,
    ``hf-hub:``, conversion, model directories); the message names the file, the option, its value and
    what was expected. The loaders re-raise it as their own error type where they have one.
    """


class ModelDirectoryError(ValueError):
    """A model directory (local or on the Hub) whose files are missing, foreign, damaged or inconsistent.

    Raised by ``model_dir.read_config``, ``hub.check_model_directory``, ``hub.push`` and ``hub.pull``;
    the message starts with the directory (or ``repo@revision``) and says what is wrong.
    """


class PretrainedWeightsUnavailable(OSError):
    """A pretrained tag's weights could not be fetched (no network, ``HF_HUB_OFFLINE=1``, an unreachable URL).

    The message names the tag, the Hub repo or URL the weights come from, the cache path where they
    would be found, and how to provide them offline. It is raised alone (``from None``): the download's own
    error, when there was one, is kept as its ``__context__``.
    """


class NaFlexBatchError(ValueError):
    """A NaFlex batch (``patches``, ``patch_coord``, ``patch_valid``, ``attn_mask``) the model cannot take.

    ``field`` names the entry that is wrong; the message says what it holds and what was expected.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"NaFlex batch {field!r}: {problem}")


#: how a message tells a Python caller what to pass -> how the CLI says the same (``in_cli_words``)
CLI_WORDS = {"force=True": "--force", "online=True": "--online"}


def in_cli_words(message: str) -> str:
    """``message`` as the CLI tells it: the package's errors name keyword arguments (``pass force=True``),
    which on the command line are options (``pass --force``)."""
    for python, cli in CLI_WORDS.items():
        message = message.replace(python, cli)
    return message


def terminal_safe(text: str) -> str:
    """``text`` with every character a terminal would act on (ESC and the other C0 / C1 controls, DEL, and the
    unprintable others, such as bidirectional overrides) written as ``repr`` writes it (``\\x1b``), so that
    no name or path from the command line, a file or the Hub reaches a terminal raw. Newlines and tabs stay."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def listed(items: Iterable[object], limit: int = 5, sep: str = ", ", quote: bool = True) -> str:
    """The first ``limit`` items (``repr`` when ``quote``), then how many there are in all: a message stays
    short however many keys or tensors are wrong."""
    items = list(items)
    if not items:
        return "none"
    head = sep.join(repr(i) if quote else str(i) for i in items[:limit])
    return head + (f"{sep}... ({len(items)} in all)" if len(items) > limit else "")


def shown(value: object, limit: int = 60) -> str:
    """A value from a file for a one-line message: its ``repr`` (control and other unprintable characters escaped,
    so none reaches a terminal raw), cut to ``limit`` characters however long the value is."""
    if isinstance(value, str) and len(value) > 4 * limit:
        value = value[: 4 * limit]  # the repr of a long string is never built whole
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
