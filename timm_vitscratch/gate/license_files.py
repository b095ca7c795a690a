"""What a source's files say of its licence: a model card's front matter and a licence file, read bounded.

A Hugging Face folder names its licence in ``README.md``'s YAML front matter (``license:``, and for a licence
the Hub has no id for, ``license_name:`` and ``license_link:``) and may hold the text as ``LICENSE`` /
``LICENSE.md``; a file exported by this package has its licence beside it as ``<file>.LICENSE.md``. Nothing
here runs a YAML parser: the front matter is the lines between the first two ``---`` lines (at most
:data:`MAX_FRONT_MATTER_LINES`), and only top-level ``key: value`` lines with a plain or quoted scalar are
taken. A licence key whose value is anything else (a list, a block, a flow mapping) reads as ``""``, which the
caller treats as a licence it cannot name.
"""

from __future__ import annotations

from .files import ErrorType, PathLike, read_bytes

#: the most bytes of a licence file read (the DINOv3 License is 8 KB; the GPL-3.0's text 35 KB)
MAX_LICENSE_BYTES = 256 << 10
#: the most bytes of a model card read (cards are a few KB to a few hundred)
MAX_CARD_BYTES = 16 << 20
#: the most lines of front matter looked at, and the most characters of one value kept
MAX_FRONT_MATTER_LINES = 500
MAX_VALUE_CHARS = 200
#: the front-matter keys that name a licence
LICENSE_KEYS = ("license", "license_name", "license_link")


def read_license_file(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> bytes:
    """A licence file's bytes (a regular file inside ``inside``, at most :data:`MAX_LICENSE_BYTES`)."""
    return read_bytes(path, MAX_LICENSE_BYTES, error, inside)


def _scalar(value: str) -> str:
    """A plain or quoted YAML scalar's text; anything else (a list, mapping, block or anchor) as ``""``."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    elif " #" in value:  # a comment after a plain scalar
        value = value.split(" #", 1)[0].rstrip()
    if not value or value[0] in "[{|>&*!-" or len(value) > MAX_VALUE_CHARS or not value.isprintable():
        return ""
    return value


def front_matter_licence(text: str) -> dict[str, str]:
    """The licence keys of a model card's front matter (``{}`` when it has none), values as plain text."""
    lines = text.lstrip("\ufeff").splitlines()[: MAX_FRONT_MATTER_LINES + 2]
    if not lines or lines[0].strip() != "---":
        return {}
    found: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return found
        key, colon, value = line.partition(":")
        if colon and key in LICENSE_KEYS:  # top level only: an indented key is part of another value
            found[key] = _scalar(value)
    return {}  # no closing line within the bound: not front matter


def read_card_licence(path: PathLike, error: ErrorType, inside: PathLike | None = None) -> dict[str, str]:
    """The licence keys of the front matter of the model card at ``path`` (read bounded, UTF-8)."""
    data = read_bytes(path, MAX_CARD_BYTES, error, inside)
    return front_matter_licence(data.decode("utf-8", errors="replace"))
