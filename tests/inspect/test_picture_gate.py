"""Pictures from outside (``vitscratch attention``) enter through the gate: regular files in a few known formats,
refused from their header when they declare more pixels than a model can take, before anything is decoded.

The hostile inputs of probe r09 (a 164 KB PNG of 13000x13000), made here: refused in one line, with no
Pillow DecompressionBombWarning and nothing written, in a child process capped at 200 MB over what it uses.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.support.bounded_child import bounded
from timm_vitscratch.choices import MAX_IMG_SIDE
from timm_vitscratch.cli import main
from timm_vitscratch.gate.images import read_rgb_image
from timm_vitscratch.inspect.attention_maps import MAX_IMAGE_PIXELS, read_picture

pytestmark = pytest.mark.slow  # picture bombs in capped child processes


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(width: int, height: int, idat: bytes | None = None) -> bytes:
    """A grayscale PNG; without ``idat``, its pixels (all zero) compressed row by row, as a real bomb holds them."""
    if idat is None:
        packer, row, parts = zlib.compressobj(9), bytes(width + 1), []  # filter byte + one byte a pixel
        parts = [packer.compress(row) for _ in range(height)]
        idat = b"".join(parts) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    """Probe r09's picture: 13000x13000 (169 Mpx, under Pillow's own error limit, over its warning limit)."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.png"
    path.write_bytes(png_bytes(13000, 13000))
    assert path.stat().st_size < 200_000
    return path


def cli_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vitscratch: error: "), err
    assert "Traceback" not in err and "DecompressionBombWarning" not in err, err
    return lines[0]


def test_the_bound_is_the_largest_input_a_model_takes():
    assert MAX_IMAGE_PIXELS == MAX_IMG_SIDE * MAX_IMG_SIDE


def test_a_decompression_bomb_is_refused_from_its_header(bomb, tmp_path, capsys):
    out = tmp_path / "out.png"
    line = cli_error(capsys, ["attention", str(bomb), "--model", "scratch_vit_ti16", "--out", str(out)])
    assert f"cannot read image '{bomb}': it is 13000x13000 = 169,000,000 pixels" in line
    assert f"expected at most {MAX_IMAGE_PIXELS:,} pixels (4096x4096" in line and "nothing was decoded" in line
    assert not out.exists() and sorted(os.listdir(tmp_path)) == []


def test_the_refusal_is_bounded_and_quiet(bomb, tmp_path):
    """In a child capped at 200 MB more than it uses; Pillow's warnings are errors there, so one would show."""
    setup = (
        "import warnings\nwarnings.simplefilter('error')\n"
        "from timm_vitscratch.inspect.attention_maps import write_attention_png"
    )
    result = bounded(setup, f"write_attention_png({str(bomb)!r}, 'scratch_vit_ti16', {str(tmp_path / 'o.png')!r})")
    assert result["type"] == "ValueError" and "169,000,000 pixels" in result["message"], result
    assert result["peak_growth_mb"] < 200, result
    assert not (tmp_path / "o.png").exists()
    print(f"r09: {result['seconds']:.3f} s, peak +{result['peak_growth_mb']:.0f} MB: {result['message']}")


def test_no_warning_reaches_the_console(bomb, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "timm_vitscratch.cli", "attention", str(bomb), "--model", "scratch_vit_ti16"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"},
    )
    assert result.returncode == 2 and "DecompressionBombWarning" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "169,000,000 pixels" in result.stderr
    assert os.listdir(tmp_path) == []


def test_past_pillows_own_limit_our_message_too(tmp_path, capsys):
    path = tmp_path / "huge.png"
    path.write_bytes(png_bytes(30000, 30000, idat=zlib.compress(b"\0" * 64)))  # only the header matters
    with pytest.raises(ValueError, match=f"expected at most {MAX_IMAGE_PIXELS:,} pixels"):
        read_picture(path)


def test_the_bound_is_checked_before_decoding(tmp_path):
    """One pixel over the bound is refused, whatever the data holds (here: no valid data at all)."""
    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(small)
    assert read_rgb_image(small, ValueError, 100).size == (10, 10)
    with pytest.raises(ValueError, match="10x10 = 100 pixels; expected at most 99 pixels"):
        read_rgb_image(small, ValueError, 99)
    broken = tmp_path / "broken.png"
    broken.write_bytes(png_bytes(11, 10, idat=b"not zlib"))
    with pytest.raises(ValueError, match="11x10 = 110 pixels; expected at most 100"):
        read_rgb_image(broken, ValueError, 100)
    with pytest.raises(ValueError, match=r"cannot read image .*expected an image file"):
        read_rgb_image(broken, ValueError, 1000)  # within the bound, the data is read, and is damaged


def test_only_regular_files(tmp_path):
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    with pytest.raises(ValueError, match="not a regular file"):
        read_picture(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_picture(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        read_picture(tmp_path / "missing.png")


def test_formats_that_run_other_programs_are_not_tried(tmp_path):
    """EPS is opened by Pillow through Ghostscript: never offered outside bytes."""
    eps = tmp_path / "picture.png"
    eps.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n")
    with pytest.raises(ValueError, match="not a picture in any of the formats read"):
        read_picture(eps)


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP", "PPM"])
def test_each_format_read_reads(kind, tmp_path):
    path = tmp_path / f"picture.{kind.lower()}"
    pixels = np.arange(12 * 9 * 3, dtype=np.uint8).reshape(9, 12, 3)
    Image.fromarray(pixels).save(path, format=kind)
    picture = read_picture(path)
    assert picture.mode == "RGB" and picture.size == (12, 9)


def test_a_large_jpeg_photo_is_read_at_a_reduced_scale(tmp_path):
    # a 24 Mpx photo is past a 16 Mpx bound, but JPEG decodes at 1/2 scale within it, without a full-size copy
    path = tmp_path / "photo.jpg"
    Image.new("RGB", (6000, 4000), (200, 120, 40)).save(path, quality=50)
    picture = read_rgb_image(path, ValueError, 16_777_216)
    assert picture.size == (3000, 2000) and picture.mode == "RGB"
    assert picture.getpixel((1500, 1000)) == pytest.approx((200, 120, 40), abs=3)
    # the same pixels as a PNG have no reduced decoding: refused from the header
    png = tmp_path / "photo.png"
    Image.new("RGB", (6000, 4000), 0).save(png)
    with pytest.raises(ValueError, match="6000x4000 = 24,000,000 pixels; expected at most 16,777,216"):
        read_rgb_image(png, ValueError, 16_777_216)
