"""Whether a file is a picture, from its header alone: the console script's check before torch is imported.

It imports nothing from the package (the console script runs this file on its own, as it runs ``choices.py``),
and decodes nothing: the pixel bound and the decoding are :mod:`.images`', when the library reads the picture.
"""

from __future__ import annotations

import os
import warnings


def is_picture(path: str | os.PathLike[str], formats: tuple[str, ...]) -> bool:
    """Whether one of Pillow's readers of ``formats`` takes the header of the regular file ``path``. Only a
    header no reader takes is False: a bomb or a damaged header is True here, for the library to tell in full."""
    from PIL import Image, UnidentifiedImageError

    try:
        # O_NONBLOCK: a file swapped for a FIFO since the caller's check does not hang the open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return True  # the library says why it cannot be read
    with os.fdopen(fd, "rb") as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's bomb warning: the library says that one, in its words
        try:
            with Image.open(handle, formats=formats):
                return True
        except UnidentifiedImageError:
            return False
        except Exception:  # whatever a reader raises on a header it cannot parse: the library's to tell
            return True
