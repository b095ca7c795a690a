"""Run one page's docs snippets in order, as a reader would in one session (the child process of
``test_doc_snippets.py``): ``python -m tests.docs.snippet_runner SPEC.json RESULTS.json``.

The spec names the page's workspace (the current directory for its snippets), the stand-ins its setup
makes there (tiny files where the docs name big checkpoints, a local Hub server where they name the Hub)
and the snippets, stand-ins already applied. Python blocks run with ``exec`` in one namespace per page;
``vitscratch ...`` lines run through the CLI's ``main`` in this process (a child per line would import torch
each time), and must exit 0. The results file holds one ``{"key", "error"}`` per snippet (``error`` None: ran).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SHELL_OPERATORS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "&"}


# --- stand-ins: small files where the docs name big ones ------------------------------------------------------
def _torchvision_file(path: Path) -> None:
    """A torchvision-layout ViT with 12 heads (4-wide), a random head so that --verify can tell weights apart."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=1, num_heads=12, hidden_dim=48, mlp_dim=96, num_classes=4
    )
    torch.nn.init.normal_(model.heads.head.weight, std=0.05)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)


def _tiny_timm() -> Any:
    import timm
    import torch

    torch.manual_seed(0)
    return timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=48, depth=1, num_heads=12, num_classes=3
    )


def _train_checkpoint(path: Path) -> None:
    """What timm's train.py saves: the weights, their EMA and the epoch."""
    import torch

    state = _tiny_timm().state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 1, "arch": "vit_tiny_patch16_224", "state_dict": state, "state_dict_ema": state}, path)


def _npz(path: Path) -> None:
    """Google's .npz layout of a ViT-Ti/16 (the smallest variant a ``--model`` can name)."""
    import timm
    import torch

    from tests.support.sources import google_npz

    torch.manual_seed(0)
    google_npz(timm.create_model("vit_tiny_patch16_224", num_classes=3), path)


def _transformers_folder(path: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=48, num_hidden_layers=1, num_attention_heads=12, intermediate_size=96, image_size=32,
        patch_size=8, num_labels=3,
    )  # fmt: skip
    transformers.ViTForImageClassification(config).save_pretrained(path)


def _model_directory(path: Path, **kwargs: Any) -> None:
    import timm
    import torch

    import timm_vitscratch  # noqa: F401  (registers the models)
    from timm_vitscratch.model_dir import save_model_directory

    torch.manual_seed(0)
    save_model_directory(timm.create_model("scratch_vit_ti16", **kwargs), path)


def _timm_weights(path: Path) -> None:
    """timm's ``model.safetensors`` of the model its stem names, one block deep (the snippet asks for depth=1)."""
    import timm
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    save_file(timm.create_model(path.stem, depth=1).state_dict(), str(path))


def _image(path: Path, size: tuple[int, int] = (64, 48)) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 120, 40)).save(path)


def _image_folder(path: Path) -> None:
    for name in ("cat", "dog", "owl"):
        for index in range(2):
            _image(path / name / f"{index}.jpg", (48 + 16 * index, 40))


def _classes(path: Path) -> None:
    path.write_text("cat\ndog\nowl\n")


#: setup step -> what it makes (``name:PATH`` steps make PATH, relative to the workspace)
SETUPS: dict[str, Callable[[Path], None]] = {
    "torchvision": _torchvision_file,
    "train_checkpoint": _train_checkpoint,
    "npz": _npz,
    "transformers_folder": _transformers_folder,
    "ti16_3_classes": lambda path: _model_directory(path, num_classes=3),
    "tiny_directory": lambda path: _model_directory(path, img_size=32, depth=1, num_classes=3),
    "timm_weights": _timm_weights,
    "image": _image,
    "image_folder": _image_folder,
    "classes": _classes,
    "non_empty": lambda path: (path.mkdir(parents=True), (path / "notes.txt").write_text("kept\n")),
}


@contextlib.contextmanager
def hub_if(needed: bool) -> Iterator[None]:
    """A local Hub-protocol server for this process's huggingface_hub, while the page runs."""
    if not needed:
        yield
        return
    from examples.local_hub_session import local_hub_session

    with local_hub_session():
        yield


# --- running ------------------------------------------------------------------------------------------------
def run_command(line: str) -> None:
    from timm_vitscratch.cli import main

    argv = []
    for token in shlex.split(line, comments=True)[1:]:
        if token in SHELL_OPERATORS:
            break
        argv.append(os.path.expanduser(token))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"exit {status}: {err.getvalue().strip()[-2000:]}")


def run_page(spec: dict[str, Any]) -> list[dict[str, Any]]:
    workspace = Path(spec["workspace"])
    os.chdir(workspace)
    for step in spec["setup"]:
        name, _, target = step.partition(":")
        if name != "hub":
            SETUPS[name](workspace / target)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    results = []
    with hub_if("hub" in spec["setup"]):
        if spec.get("hub_repo"):  # the repo the page's hf-hub: lines load
            from timm_vitscratch.hub import push

            _model_directory(workspace / ".hub-model", img_size=32, depth=1, num_classes=3)
            push(workspace / ".hub-model", spec["hub_repo"])
        for snippet in spec["snippets"]:
            where = workspace / snippet["cwd"] if snippet["cwd"] else workspace
            where.mkdir(parents=True, exist_ok=True)
            os.chdir(where)
            try:
                if snippet["kind"] == "python":
                    exec(compile(snippet["text"], snippet["key"], "exec"), namespace)
                else:
                    run_command(snippet["text"])
                error = None
            except BaseException as failure:  # reported, with its traceback, by the test
                error = "".join(traceback.format_exception(failure))[-3000:]
            finally:
                os.chdir(workspace)
            results.append({"key": snippet["key"], "error": error})
    return results


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    results = run_page(spec)
    Path(argv[1]).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
