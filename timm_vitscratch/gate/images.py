"""Images from outside: a regular file in a known format whose header declares at most a bounded number of
pixels, decoded only then (a large JPEG at the codec's reduced scale that fits).

Pillow reads the size from the header when it opens a file and decodes nothing until asked, so a picture
of 169 million pixels packed into 164 KB (a decompression bomb) is refused from its header, before a byte
of it is decompressed, with our message instead of Pillow's ``DecompressionBombWarning``. Only the formats
in :data:`FORMATS` are tried: no plugin that hands the bytes to another program (EPS runs Ghostscript)
ever sees them. Pillow is imported here, when a picture is read, not when the package is.
"""

from __future__ import annotations

import os
import stat
import warnings
from typing import TYPE_CHECKING

from ..choices import IMAGE_EXPECTED as EXPECTED
from ..choices import IMAGE_FORMATS as FORMATS
from ..choices import NOT_A_PICTURE
from .files import ErrorType, PathLike, regular_file

if TYPE_CHECKING:  # Pillow is imported when a picture is read
    from PIL.Image import Image


def read_rgb_image(path: PathLike, error: ErrorType, max_pixels: int, bound: str = "") -> Image:
    """The picture in ``path`` as an RGB ``PIL.Image``, decoded only when its header declares at most
    ``max_pixels`` pixels (``bound`` says where that number comes from, for the message).

    Raises ``error`` with one line naming the file and what was wrong: not a regular file, not a picture
    in one of :data:`FORMATS`, too many pixels, or bytes the decoder cannot read.
    """
    from PIL import Image

    where = f"cannot read image {str(path)!r}"

    def unreadable(problem: str) -> Exception:
        return error(f"{where}: {problem}; {EXPECTED}")

    regular_file(path, unreadable)
    try:
        # O_NONBLOCK: if the file was swapped for a FIFO since the check, the open does not hang
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise unreadable(f"{err.strerror}") from None
    with os.fdopen(fd, "rb") as handle, warnings.catch_warnings():
        # Pillow's own bomb warning and conversion notes: the bound below is ours, and said in our words
        warnings.simplefilter("ignore")
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise unreadable("not a regular file")
        try:
            image = Image.open(handle, formats=FORMATS)  # reads the header only
        except Image.DecompressionBombError as err:  # past Pillow's own limit, far above ours
            raise error(f"{where}: {err}; expected at most {max_pixels:,} pixels{bound}") from None
        except Image.UnidentifiedImageError:
            raise unreadable(NOT_A_PICTURE) from None
        except Exception as err:  # whatever a plugin raises on bytes it cannot parse
            raise unreadable(_reason(err)) from None
        with image:
            width, height = _within(image, max_pixels)
            if width * height > max_pixels:
                raise error(
                    f"{where}: it is {width}x{height} = {width * height:,} pixels; expected at most "
                    f"{max_pixels:,} pixels{bound}; make it smaller first (nothing was decoded)"
                )
            try:
                return image.convert("RGB")  # decodes (the first frame of an animation)
            except Exception as err:  # truncated or damaged data, an unsupported mode
                raise unreadable(_reason(err)) from None


def _within(image: Image, max_pixels: int) -> tuple[int, int]:
    """The size ``image`` decodes at: a JPEG past ``max_pixels`` is decoded at 1/2, 1/4 or 1/8 scale (the
    codec's own reduced decoding, no full-size copy), the largest that fits, so a 48 Mpx photo reads."""
    width, height = image.size
    if image.format == "JPEG" and width * height > max_pixels:
        for scale in (2, 4, 8):
            size = (-(-width // scale), -(-height // scale))
            if size[0] * size[1] <= max_pixels:
                image.draft("RGB", size)
                return image.size
    return width, height


def _reason(err: Exception) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."
