"""Fuzzing the picture gate (``vitscratch attention``'s reader): damaged PNG, JPEG and GIF files, and PNG headers
that declare any size, each read or refused with our error naming the file, never past the pixel bound.

Every case runs in the crash-isolated loader process (``tests/support/loader_worker.py``), capped in memory (its
address space may grow by at most ``HEADROOM``) and in time (``TIMEOUT`` per case): a decoder that crashes,
hangs or allocates past the cap is reported, not suffered. Counts come from ``tests/support/fuzz_plan.py``.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES, LoaderProcess, check_outcome, damaged, fuzz_settings
from timm_vitscratch.inspect.attention_maps import MAX_IMAGE_PIXELS

pytestmark = pytest.mark.slow  # fuzz cases in crash-isolated child processes

HEADROOM = 512 << 20
TIMEOUT = 60.0
#: sides a hostile PNG header may declare: small, at and past the bound, Pillow's own limits, 2**31 - 1
SIDES = st.sampled_from([0, 1, 24, 4095, 4096, 4097, 13000, 65535, 1 << 20, (1 << 31) - 1]) | st.integers(0, 1 << 31)


@pytest.fixture(scope="module")
def loader():
    process = LoaderProcess(timeout=TIMEOUT)
    try:
        assert process.run("limit_memory", "-", headroom=HEADROOM)["outcome"] == "ok"
        yield process
    finally:
        process.close()


def picture(kind: str) -> bytes:
    """A 24x20 picture with some structure, saved by Pillow in ``kind``."""
    y, x = np.mgrid[0:20, 0:24]
    pixels = np.stack([x * 10 % 256, y * 12 % 256, (x + y) % 7 * 36], axis=-1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=kind)
    return buffer.getvalue()


def with_declared_size(png: bytes, width: int, height: int) -> bytes:
    """``png`` whose IHDR declares ``width`` x ``height``, with its CRC made right (so the size is what is read)."""
    ihdr = b"IHDR" + struct.pack(">II", width, height) + png[24:29]
    return png[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + png[33:]


def run(loader, tmp_path, name: str, strategy) -> None:
    path = tmp_path / "picture"

    @fuzz_settings(PLAN[name])
    @given(strategy)
    def case(damage):
        path.write_bytes(damage.content)
        result = loader.run("picture", path, max_pixels=MAX_IMAGE_PIXELS)
        CASES[name][check_outcome(result, str(path), damage.description)] += 1

    CASES[name].clear()
    case()
    assert sum(CASES[name].values()) == PLAN[name]


class Sized:
    def __init__(self, content: bytes, description: str) -> None:
        self.content, self.description = content, description

    def __repr__(self) -> str:
        return f"Sized({self.description!r})"


@st.composite
def png_cases(draw):
    """Half: the header declares a size of the strategy's choosing (valid CRC); half: damaged bytes."""
    png = picture("PNG")
    if draw(st.booleans()):
        width, height = draw(SIDES), draw(SIDES)
        return Sized(with_declared_size(png, width, height), f"IHDR declares {width}x{height}")
    return draw(damaged(png, [(0, 64)]))


def test_png(loader, tmp_path):
    run(loader, tmp_path, "picture reader, png", png_cases())
    assert CASES["picture reader, png"]["error"] > 0


def test_jpeg(loader, tmp_path):
    jpeg = picture("JPEG")
    run(loader, tmp_path, "picture reader, jpeg", damaged(jpeg, [(0, min(len(jpeg), 640))]))


def test_gif(loader, tmp_path):
    gif = picture("GIF")
    run(loader, tmp_path, "picture reader, gif", damaged(gif, [(0, 32)]))
