"""A child process that runs the plugin's loaders on files, for the fuzz tests: ``python loader_worker.py``.

Reads one JSON request per line on stdin (``{"loader": NAME, "path": PATH, "out": DIR}``) and answers
each on stdout with a line ``@@ {"outcome": "ok", ...}`` or ``@@ {"outcome": "error", "type": ...,
"ours": bool, "message": ..., "traceback": ...}``. A parser that crashes the interpreter or hangs
takes only this process down; the test sees it die or go quiet and reports the input. Besides the
loaders, ``limit_memory`` caps the process's address space (``RLIMIT_AS``) for the resource-bound tests,
``allocate`` shows that the cap bites, ``timm_local_dir`` runs timm's own loader on a model directory, and
``model_card`` makes the card a push would upload.
"""

import json
import shutil
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from timm_vitscratch.convert import convert
from timm_vitscratch.errors import ConversionError, ModelArgsError, ModelDirectoryError
from timm_vitscratch.files import sha256_file
from timm_vitscratch.hub.client import check_model_directory
from timm_vitscratch.layouts import open_checkpoint
from timm_vitscratch.model_dir import read_config

warnings.filterwarnings("ignore")  # torch warns about odd pickle protocols in damaged files; answers go to stdout


def load_checkpoint_file(path: Path, request: dict) -> dict:
    """Open a checkpoint and read every tensor; what was read must be what the header promised."""
    with open_checkpoint(path) as checkpoint:
        names = checkpoint.keys()
        for name in names:
            tensor = checkpoint.tensor(name)
            if tuple(tensor.shape) != checkpoint.shape(name) or tensor.dtype != checkpoint.dtype(name):
                return {
                    "outcome": "inconsistent",
                    "message": f"{name}: read {tuple(tensor.shape)} {tensor.dtype}, "
                    f"announced {checkpoint.shape(name)} {checkpoint.dtype(name)}",
                }
    return {"outcome": "ok", "tensors": len(names)}


def checkpoint_values(path: Path, request: dict) -> dict:
    """Open a checkpoint and read every tensor: its shape, dtype and the sha256 of its logical bytes."""
    import hashlib

    values = {}
    with open_checkpoint(path) as checkpoint:
        for name in checkpoint.keys():
            tensor = checkpoint.tensor(name).contiguous()
            data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
            values[name] = [list(tensor.shape), str(tensor.dtype), hashlib.sha256(data).hexdigest()]
    return {"outcome": "ok", "values": values}


def convert_file(path: Path, request: dict) -> dict:
    """Convert end to end; a conversion that succeeds must have written a directory that checks out."""
    out = Path(request["out"])
    shutil.rmtree(out, ignore_errors=True)
    result = convert(path, out, verify=bool(request.get("verify")))
    config, _ = check_model_directory(out, require_sha256=True)
    if config["vitscratch"]["sha256"] != sha256_file(out / "model.safetensors"):
        return {"outcome": "inconsistent", "message": "written sha256 does not match the file"}
    return {"outcome": "ok", "model": result.model_name}


class PictureError(ValueError):
    """The error the picture gate is given to raise here, told apart from any other ValueError."""


def read_picture(path: Path, request: dict) -> dict:
    """A picture through the gate (``max_pixels`` bound); what is decoded must be RGB and within the bound."""
    from timm_vitscratch.gate.images import read_rgb_image

    picture = read_rgb_image(path, PictureError, int(request["max_pixels"]))
    width, height = picture.size
    if picture.mode != "RGB" or width * height > int(request["max_pixels"]):
        return {"outcome": "inconsistent", "message": f"decoded {picture.mode} {width}x{height}"}
    return {"outcome": "ok", "size": [width, height]}


def read_model_config(path: Path, request: dict) -> dict:
    return {"outcome": "ok", "keys": len(read_config(path))}


def check_directory(path: Path, request: dict) -> dict:
    config, _ = check_model_directory(path, require_sha256=True, strict=bool(request.get("strict")))
    return {"outcome": "ok", "sha256": config["vitscratch"]["sha256"]}


def limit_memory(path: Path, request: dict) -> dict:
    """Cap this process's address space at what it uses now plus ``headroom`` bytes (RLIMIT_AS)."""
    import resource

    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * resource.getpagesize()
    limit = in_use + int(request["headroom"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return {"outcome": "ok", "limit": limit}


def allocate(path: Path, request: dict) -> dict:
    """Allocate ``bytes`` (to show that the memory limit bites)."""
    block = bytearray(int(request["bytes"]))
    return {"outcome": "ok", "allocated": len(block)}


def timm_local_dir(path: Path, request: dict) -> dict:
    import timm

    model = timm.create_model(f"local-dir:{path}", pretrained=True)
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    return {"outcome": "ok", "dtypes": dtypes}


def make_model_card(path: Path, request: dict) -> dict:
    """The model card push would generate for a model directory (checked first, as push checks it)."""
    from timm_vitscratch.hub.model_card import model_card

    config, model = check_model_directory(path, require_sha256=False)
    card = model_card(config, model, "org/name")
    card.encode("utf-8")  # what push uploads: a card that cannot be encoded would fail there
    return {"outcome": "ok", "card": card}


#: name -> (the call, the exception types that are our own clear errors)
LOADERS: dict[str, tuple[Callable[[Path, dict], dict], type[Exception] | tuple[type[Exception], ...]]] = {
    "limit_memory": (limit_memory, ()),
    "allocate": (allocate, ()),
    "timm_local_dir": (timm_local_dir, (ModelArgsError, ConversionError, ModelDirectoryError)),
    "checkpoint": (load_checkpoint_file, ConversionError),
    "checkpoint_values": (checkpoint_values, ConversionError),
    "convert": (convert_file, ConversionError),
    "picture": (read_picture, PictureError),
    "read_config": (read_model_config, ModelDirectoryError),
    "check_model_directory": (check_directory, ModelDirectoryError),
    "model_card": (make_model_card, ModelDirectoryError),
}


def answer(request: dict) -> dict:
    run, ours = LOADERS[request["loader"]]
    try:
        return run(Path(request["path"]), request)
    except Exception as error:
        return {
            "outcome": "error",
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "ours": isinstance(error, ours),
            "message": str(error),
            "traceback": "".join(traceback.format_exception(error))[-3000:],
        }


def main() -> None:
    print("@@ " + json.dumps({"outcome": "ready"}), flush=True)
    for line in sys.stdin:
        print("@@ " + json.dumps(answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
