"""JSON from outside, parsed only after its size and shape are bounded.

``json.loads`` of 16 MiB of ``{},{},...`` builds millions of objects (seconds, most of a gigabyte), and
its recursion, integer conversion and string copies are each bounded only by the input. So the bytes are
scanned first, at C speed (``re`` and ``bytes.count``): total size, the number of values, the nesting
depth, the longest string and the longest run of digits. Only JSON within every bound is handed to
``json.loads``, which then cannot take more than these bounds allow.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .files import ErrorType, PathLike, read_bytes

#: a JSON string, escapes included; an unterminated one runs to the end (json.loads then says where). Every
#: match succeeds and never backtracks, so the scan is linear whatever the bytes (``"\"\"\"...`` included)
_STRING = re.compile(rb'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.S)
_BRACKETS = re.compile(rb"[\[\]{}]")
_DIGITS = re.compile(rb"[0-9]+")


@dataclass(frozen=True)
class JsonLimits:
    """The most a JSON document from outside may hold."""

    #: bytes in all (a config with 100,000 label names is about 3 MB)
    max_bytes: int = 16 << 20
    #: values in all (objects, lists, strings, numbers, constants): 100,000 labels plus their descriptions
    max_values: int = 250_000
    #: nesting of objects and lists (timm's configs use 3)
    max_depth: int = 32
    #: characters of one string, escapes included (a model card's description is a few KB)
    max_string: int = 1 << 20
    #: digits in one run (an integer or a float's digits; int64 has 19)
    max_digits: int = 64


#: the bounds of every side file (config.json, preprocessor_config.json, a Hub API answer)
DEFAULT_LIMITS = JsonLimits()


def parse_json(
    data: bytes, label: str, error: ErrorType, limits: JsonLimits = DEFAULT_LIMITS, unique_keys: bool = False
) -> Any:
    """``data`` as a JSON value, or ``error("<label> ...")`` saying which bound it passes or where it is invalid.

    With ``unique_keys``, an object that names a key twice is refused (``json.loads`` would keep the last,
    another reader the first: the same bytes would mean two things).
    """
    if len(data) > limits.max_bytes:
        raise error(f"{label} is {len(data):,} bytes, more than the {limits.max_bytes:,} a JSON file may have")
    longest = 0
    strings = 0
    for match in _STRING.finditer(data):
        strings += 1
        if strings > limits.max_values:  # stop at the bound: each match is an object of its own
            raise error(
                f"{label} holds more than {limits.max_values:,} JSON strings; at most that many values are read"
            )
        longest = max(longest, match.end() - match.start() - 2)  # (one more for an unterminated one)
    if longest > limits.max_string:
        raise error(f"{label} holds a string of {longest:,} characters; at most {limits.max_string:,} are read")
    bare = _STRING.sub(b'""', data)  # commas, brackets and digits inside strings are not structure
    values = bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1
    if values > limits.max_values:
        raise error(f"{label} holds about {values:,} JSON values; at most {limits.max_values:,} are read")
    depth = deepest = 0
    for bracket in _BRACKETS.findall(bare):  # at most 2 * max_values brackets here
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    if deepest > limits.max_depth:
        raise error(f"{label} nests JSON deeper than {limits.max_depth} levels ({deepest}); expected a flat config")
    digits = max((len(run) for run in _DIGITS.findall(bare)), default=0)
    if digits > limits.max_digits:
        raise error(f"{label} holds a number of {digits:,} digits; at most {limits.max_digits} are read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{label} is not UTF-8 text: {err}") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_object if unique_keys else None)
    except _DuplicateKey as err:
        raise error(f"{label} names the key {err.args[0]!r} twice in one object; expected each key once") from None
    except (json.JSONDecodeError, RecursionError, ValueError) as err:
        raise error(f"{label} is not valid JSON: {err}") from None


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def read_json_object(
    path: PathLike, error: ErrorType, inside: PathLike | None = None, limits: JsonLimits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """A JSON side file holding an object: a regular file (inside ``inside``), bounded as :func:`parse_json`."""
    value = parse_json(read_bytes(path, limits.max_bytes, error, inside), str(path), error, limits)
    if not isinstance(value, dict):
        raise error(f"{path} holds a JSON {type(value).__name__}; expected an object of config fields")
    return value


def route_timm_configs() -> None:
    """Make timm read every ``local-dir:`` / ``hf-hub:`` ``config.json`` here (a regular file, bounded as
    :func:`parse_json`; a refusal is a ``ModelDirectoryError`` naming the file), not whole and unbounded."""
    from ..errors import ModelDirectoryError
    from ..private_api import read_timm_configs_with

    read_timm_configs_with(lambda path: read_json_object(path, ModelDirectoryError))
