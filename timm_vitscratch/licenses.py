"""Licenses whose text must travel with the weights: the one table of them, and the writer of their files.

Most weights of the zoo carry a license the Hub knows by an SPDX id (apache-2.0, bsd-3-clause ...), and a
model card naming it is enough. Some licenses demand that a copy of their text goes with every
redistribution: the DINOv3 License of Meta's DINOv3 weights (timm records ``license: 'dinov3-license'``)
and the FAIR Noncommercial Research License of its EUPE weights (``'fair-noncommercial-research-license'``)
do. For each of those, :data:`TRAVELLING` names the text shipped inside this package
(``timm_vitscratch/license_texts/``), the file name it gets in a model directory, and what the model card's
front matter says (the Hub has no id for it: ``license: other`` with ``license_name`` and ``license_link``).

The license is chosen by the config's recorded id only, looked up in this table; the text always comes from
the package, never from a file found beside the weights or on the Hub.

A source's license is what its files say (:func:`source_statements`, read through
:mod:`timm_vitscratch.gate.license_files`): a Hugging Face folder's ``README.md`` front matter and its
``LICENSE`` / ``LICENSE.md`` file, the ``<file>.LICENSE.md`` an export writes beside a file, and the source
format's own record (a timm ``config.json``, or the family's licence for a layout only one publisher
releases). A license text is recognised when it equals one of the package's texts up to whitespace and line
endings; an export of weights under a standard license writes a one-line ``SPDX-License-Identifier: ID``
file instead. :func:`resolve_license` makes one id of them: agreeing statements give that id, none gives
``unknown``, and statements that disagree, or name a license the package does not know, are refused unless
``--license`` names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from .files import PathLike, atomic_write
from .gate.files import ErrorType
from .gate.license_files import read_card_licence, read_license_file

#: the package folder holding the license texts (package data, shipped in the wheel)
TEXTS = "license_texts"


@dataclass(frozen=True)
class TravellingLicense:
    """A license whose text goes with the weights, as a file of the model directory."""

    id: str  #: as ``pretrained_cfg.license`` records it (lowercase)
    name: str  #: the license's own title, for the model card
    text: str  #: the file under ``timm_vitscratch/license_texts/`` holding its text, verbatim
    file_name: str  #: the file it becomes in a model directory (and a Hub repo)

    def card_metadata(self) -> dict[str, str]:
        """The model card's front-matter license fields: the Hub's way to name a license it has no id for."""
        return {"license": "other", "license_name": self.id, "license_link": self.file_name}

    def read(self) -> bytes:
        """The license text as the package ships it."""
        return files(__package__).joinpath(TEXTS).joinpath(self.text).read_bytes()


#: license id -> the text that must travel with weights under that license; every other license needs none
TRAVELLING = {
    # facebookresearch/dinov3's LICENSE.md
    "dinov3-license": TravellingLicense("dinov3-license", "DINOv3 License", "dinov3-license.md", "LICENSE.md"),
    # facebookresearch/EUPE's LICENSE.md
    "fair-noncommercial-research-license": TravellingLicense(
        "fair-noncommercial-research-license",
        "FAIR Noncommercial Research License",
        "fair-noncommercial-research-license.md",
        "LICENSE.md",
    ),
}


def travelling_license(recorded: Any) -> TravellingLicense | None:
    """The table's entry for a recorded license id (compared as the model card compares ids), or None."""
    return TRAVELLING.get(recorded.strip().lower()) if isinstance(recorded, str) else None


def license_files(recorded: Any, prefix: str = "") -> dict[str, bytes]:
    """The files a recorded license id requires beside the weights (name -> bytes): none for most licenses.

    ``prefix`` goes before each name (an export that writes one file puts ``<file name>.LICENSE.md`` beside it).
    """
    found = travelling_license(recorded)
    return {prefix + found.file_name: found.read()} if found is not None else {}


def write_license_files(directory: PathLike, recorded: Any, prefix: str = "", export: bool = False) -> list[Path]:
    """Write into ``directory`` (each file atomically: a staging name, then a rename) the license texts a
    recorded license id requires; returns the paths written (none for a license whose text need not travel).
    ``export``: what an export writes instead (:func:`export_license_files`)."""
    written = []
    for name, text in (export_license_files if export else license_files)(recorded, prefix).items():
        path = Path(directory) / name
        with atomic_write(path, "wb") as handle:
            handle.write(text)
        written.append(path)
    return written


#: what a model directory records when no source names its weights' license (the Hub's id for "not stated")
UNKNOWN = "unknown"
#: license ids the Hub knows (lowercase SPDX) that a weight's license may be recorded as: those of the weights
#: the zoo offers (timm's and Google's apache-2.0, torchvision's bsd-3-clause, SWAG's cc-by-nc-4.0, EVA02's mit)
#: and those people plausibly give their own weights; their text need not travel (the Hub links it)
STANDARD = (
    "apache-2.0",
    "mit",
    "bsd-2-clause",
    "bsd-3-clause",
    "cc0-1.0",
    "cc-by-4.0",
    "cc-by-sa-4.0",
    "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0",
    "cc-by-nc-nd-4.0",
    "gpl-3.0",
    "lgpl-3.0",
    "agpl-3.0",
    "mpl-2.0",
    "unlicense",
    # AIMv2's weights as timm's cfgs record them: the Hub's id of the Apple Sample Code License (no SPDX id
    # exists; the export line names the Hub's)
    "apple-ascl",
)
#: the line an export writes beside weights under a standard license, before the id
SPDX = "SPDX-License-Identifier:"
#: the names a folder's license text goes by
LICENSE_FILE_NAMES = ("LICENSE", "LICENSE.md", "LICENSE.txt")
CARD_NAME = "README.md"


def known_license(value: Any) -> str | None:
    """``value`` as a license id the package knows (standard or travelling), or None."""
    name = value.strip().lower() if isinstance(value, str) else None
    return name if name in STANDARD or name in TRAVELLING else None


def check_license_id(value: Any, where: str = "--license") -> str:
    """``value`` as a known license id, or a ValueError naming the ids there are."""
    found = known_license(value)
    if found is None:
        raise ValueError(
            f"{where} {str(value)[:80]!r} is not a license id the package knows; expected one of "
            f"{', '.join((*STANDARD, *TRAVELLING))}"
        )
    return found


def _words(data: bytes) -> list[bytes]:
    return data.split()  # whitespace and line endings are all a copy may change


def recognise_license_text(data: bytes) -> str | None:
    """The id of a license text: one of the package's texts (up to whitespace and line endings), or an
    ``SPDX-License-Identifier: ID`` line of a known id; None for any other text."""
    words = _words(data)
    if len(words) == 2 and words[0] == SPDX.encode():
        return known_license(words[1].decode("ascii", errors="replace"))
    for license_id, travelling in TRAVELLING.items():
        if words == _words(travelling.read()):
            return license_id
    return None


def export_license_files(recorded: Any, prefix: str = "") -> dict[str, bytes]:
    """What an export writes with the weights so that converting them back finds their license: the text of a
    travelling license, an ``SPDX-License-Identifier`` line for a standard one, nothing for an unknown one."""
    files_ = license_files(recorded, prefix)
    standard = known_license(recorded)
    if not files_ and standard is not None:
        files_ = {prefix + "LICENSE.md": f"{SPDX} {standard}\n".encode()}
    return files_


@dataclass(frozen=True)
class Statement:
    """What one of a source's files says of its license."""

    where: str  #: the file (or record) that says it
    license: str | None  #: the id it names; None: a license the package does not know
    said: str  #: what it says, as one short line


def _card_statement(card: dict[str, str], where: str) -> Statement | None:
    """What a model card's front-matter license keys say (None: they name none, or say ``unknown``)."""
    said, name = card.get("license"), card.get("license_name", "")
    if (said is None and not name) or (said or "").lower() == UNKNOWN:
        return None
    if (said or "").lower() == "other" or (not said and name):
        found = TRAVELLING.get(name.strip().lower())
        return Statement(where, found.id if found else None, f"license: other, license_name: {name or '(none)'}")
    return Statement(where, known_license(said), f"license: {said or '(not a plain value)'}")


def source_statements(directory: Path | None, weights: Path, error: ErrorType) -> list[Statement]:
    """What the files of a source say of its license: a folder's ``README.md`` front matter and ``LICENSE`` /
    ``LICENSE.md`` / ``LICENSE.txt``; for a single file, the ``<file>.LICENSE.md`` beside it."""
    found: list[Statement] = []
    if directory is not None:
        card = directory / CARD_NAME
        if card.exists() or card.is_symlink():
            statement = _card_statement(read_card_licence(card, error, inside=directory), f"{CARD_NAME}'s front matter")
            found += [statement] if statement is not None else []
        texts = [directory / name for name in LICENSE_FILE_NAMES]
    else:
        texts = [weights.with_name(weights.name + ".LICENSE.md")]
    for path in texts:
        if path.exists() or path.is_symlink():
            data = read_license_file(path, error, inside=path.parent)
            recognised = recognise_license_text(data)
            said = "its text" if recognised is None else f"the text of {recognised}"
            found.append(Statement(path.name, recognised, said))
    return found


def resolve_license(statements: list[Statement], given: Any = None) -> str:
    """One license id from what a source's files say (and ``--license``, ``given``): ValueError when they
    disagree, or name a license the package does not know and ``given`` does not name it."""
    named = {s.license for s in statements if s.license is not None}
    listed = "; ".join(f"{s.where} says {s.said}" for s in statements)
    if given is not None:
        chosen = check_license_id(given)
        if named and chosen not in named:
            raise ValueError(f"--license {chosen} disagrees with the source ({listed})")
        return chosen
    unknown = [s for s in statements if s.license is None]
    if len(named) > 1 or unknown:
        what = "name different licenses" if len(named) > 1 else "name a license the package does not know"
        raise ValueError(
            f"the source's files {what} ({listed}); the license a model directory records is one id, its text "
            f"the package's own: pass --license ID to state it (one of {', '.join((*STANDARD, *TRAVELLING))})"
        )
    return named.pop() if named else UNKNOWN
