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
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from .files import PathLike, atomic_write

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


def write_license_files(directory: PathLike, recorded: Any, prefix: str = "") -> list[Path]:
    """Write into ``directory`` (each file atomically: a staging name, then a rename) the license texts a
    recorded license id requires; returns the paths written (none for a license whose text need not travel)."""
    written = []
    for name, text in license_files(recorded, prefix).items():
        path = Path(directory) / name
        with atomic_write(path, "wb") as handle:
            handle.write(text)
        written.append(path)
    return written
