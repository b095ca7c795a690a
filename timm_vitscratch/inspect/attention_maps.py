"""What a ViT attends to: last-block CLS attention, attention rollout, and a PNG of both.

Attention rollout (Abnar & Zuidema, 2020): average each block's attention over heads, add the
identity for the residual path and renormalise rows, then multiply the blocks' matrices from the
first to the last. Every matrix here is row-stochastic: each row sums to 1.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import timm
import torch
from timm.data import create_transform, resolve_data_config
from timm.models import split_model_name_tag
from torch import nn

from ..choices import MAX_IMG_SIDE
from ..errors import ModelDirectoryError
from ..files import PathLike, atomic_write
from ..gate.images import read_rgb_image
from ..models import TransformerBlock, VisionTransformer
from ..models.model_args import check_architecture, check_option
from ..models.variants import ARCHITECTURES
from .model_ref import check_scratch_model, has_weights, timm_model_name

if TYPE_CHECKING:  # Pillow is imported by the gate when a picture is read
    import PIL.Image

#: the optional dependencies a picture needs (import name: distribution), all in the ``plots`` extra
PLOTS_MODULES = {"matplotlib": "matplotlib", "PIL": "Pillow"}
PLOTS_INSTALL = "pip install 'timm_vitscratch[plots]'"


class PlotsExtraMissing(ModuleNotFoundError, ValueError):
    """matplotlib or Pillow is not installed: the message names them and the extra that brings them.

    A ``ModuleNotFoundError`` for code that catches import errors, and a ``ValueError`` so that the CLI
    prints it as its one error line.
    """


def require_plots() -> None:
    """Raise :class:`PlotsExtraMissing` unless matplotlib and Pillow can be imported.

    Checked before the model is built or the picture read, so a missing extra costs no wait.
    """
    missing = [distribution for module, distribution in PLOTS_MODULES.items() if find_spec(module) is None]
    if missing:
        raise PlotsExtraMissing(
            f"attention pictures need {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed: {PLOTS_INSTALL}",
            name=missing[0],
        )


#: the most memory the attention maps of one picture may take (every block's, every head's)
MAX_ATTENTION_BYTES = 1 << 30

FIGSIZE = (9.0, 3.4)  # inches; at DPI 100 the PNG is 900 x 340 pixels
DPI = 100


@dataclass
class AttentionMaps:
    """Attention of a batch of B images; N tokens = prefix tokens + grid_size[0] * grid_size[1] patches."""

    blocks: list[torch.Tensor]  # per block (B, heads, N, N)
    last_block: torch.Tensor  # (B, N, N): the last block averaged over heads
    rollout: torch.Tensor  # (B, N, N): rollout across all blocks
    num_prefix_tokens: int
    grid_size: tuple[int, int]

    def cls_patch_map(self, matrix: torch.Tensor) -> torch.Tensor:
        """The class token's row of ``matrix`` over the patch tokens, as a (B, grid_h, grid_w) map."""
        return matrix[:, 0, self.num_prefix_tokens :].reshape(-1, *self.grid_size)

    @property
    def cls_last_block(self) -> torch.Tensor:
        return self.cls_patch_map(self.last_block)

    @property
    def cls_rollout(self) -> torch.Tensor:
        return self.cls_patch_map(self.rollout)


def attention_rollout(blocks: list[torch.Tensor]) -> torch.Tensor:
    """Rollout of per-block (B, heads, N, N) attention: (B, N, N), rows summing to 1."""
    rollout: torch.Tensor | None = None
    for attn in blocks:
        mixed = 0.5 * attn.mean(dim=1) + 0.5 * torch.eye(attn.shape[-1], dtype=attn.dtype, device=attn.device)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    if rollout is None:
        raise ValueError("attention rollout needs at least one block")
    return rollout


def attention_maps(model: nn.Module, images: torch.Tensor) -> AttentionMaps:
    """Run ``model``'s eager attention path on (B, C, H, W) ``images`` and collect the maps."""
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"{type(model).__name__} has no forward_attention: attention maps need a timm_vitscratch VisionTransformer"
        )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, blocks = model.forward_attention(images)
    finally:
        model.train(was_training)
    return AttentionMaps(
        blocks=blocks,
        last_block=blocks[-1].mean(dim=1),
        rollout=attention_rollout(blocks),
        num_prefix_tokens=model.num_prefix_tokens,
        grid_size=model.patch_embed.grid_size,
    )


def _with_weights(name: str, kwargs: dict) -> nn.Module:
    """timm's loader on ``name``; a local directory must hold safetensors (no pickle is read here)."""
    if name.startswith("local-dir:") and not (Path(name[len("local-dir:") :]) / "model.safetensors").is_file():
        raise ModelDirectoryError(
            f"{name[len('local-dir:') :]}: no model.safetensors; a model directory holds "
            "config.json and model.safetensors (convert other weights with vitscratch convert)"
        )
    try:
        return timm.create_model(name, pretrained=True, **kwargs)
    except RuntimeError as err:  # timm's loader raises RuntimeError for weights that do not fit
        raise ModelDirectoryError(f"{name}: cannot load the model: {str(err).splitlines()[0]}") from None


def load_model(name_or_dir: str, img_size: int | None = None) -> tuple[VisionTransformer, str]:
    """A model with its weights (a pretrained tag, a model directory, ``local-dir:``, ``hf-hub:``) or a bare
    registered name (random weights, seed 0).

    Returns the model in eval mode and a description for the figure title.
    """
    kwargs = {} if img_size is None else dict(img_size=check_option("img_size", img_size, "--img-size"))
    name = timm_model_name(name_or_dir)
    variant = split_model_name_tag(name)[0]
    if variant in ARCHITECTURES:
        check_architecture({**ARCHITECTURES[variant], **kwargs}, f"{name_or_dir} with {kwargs}")
    if has_weights(name_or_dir):
        model = check_scratch_model(_with_weights(name, kwargs), name_or_dir)
        # pretrained_cfg is set on the model by timm's builder, so the class does not declare it
        cfg = getattr(model, "pretrained_cfg", {})
        description = f"{cfg.get('architecture', type(model).__name__)}, weights from {name_or_dir}"
    else:
        with torch.random.fork_rng(devices=[]):  # same picture on every run, global RNG untouched
            torch.manual_seed(0)
            model = check_scratch_model(timm.create_model(name, **kwargs), name_or_dir)
        description = f"{name_or_dir}, RANDOM weights (untrained)"
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    first = model.blocks[0]
    assert isinstance(
        first, TransformerBlock
    )  # nn.Sequential types its items as Module; a VisionTransformer's are Blocks
    kept = len(model.blocks) * first.attn.num_heads * tokens * tokens * 4
    if kept > MAX_ATTENTION_BYTES:
        # every block's attention matrix is kept for the picture: tokens^2 per head
        raise ValueError(
            f"{description} at {tokens} tokens would keep {kept:,} bytes of attention maps; expected at "
            f"most {MAX_ATTENTION_BYTES:,} (give a smaller --img-size)"
        )
    if model.patch_embed.in_chans != 3:
        raise ValueError(
            f"attention pictures need an RGB model (in_chans=3), got in_chans={model.patch_embed.in_chans}"
        )
    return model.eval(), description


#: the most pixels a picture given to ``attention`` may have: a model's input is at most MAX_IMG_SIDE on a side,
#: so anything larger is only downscaled away (and a small file can declare far more: a decompression bomb)
MAX_IMAGE_PIXELS = MAX_IMG_SIDE * MAX_IMG_SIDE
_PIXEL_BOUND = f" ({MAX_IMG_SIDE}x{MAX_IMG_SIDE}: no model takes a larger input, so more is only downscaled away)"


def read_picture(path: PathLike) -> PIL.Image.Image:
    """The picture in ``path`` as RGB, through the gate: a regular file, header checked against
    :data:`MAX_IMAGE_PIXELS` before anything is decoded. Raises ValueError saying what was wrong."""
    return read_rgb_image(path, ValueError, MAX_IMAGE_PIXELS, _PIXEL_BOUND)


def model_input(picture: PIL.Image.Image, model: VisionTransformer) -> torch.Tensor:
    """``picture`` through the model's eval transform (timm's, at the model's size): (1, 3, H, W), normalised."""
    config = resolve_data_config(args=dict(input_size=(3, *model.patch_embed.img_size)), model=model)
    return create_transform(**config)(picture).unsqueeze(0)


def load_image(path: PathLike, model: VisionTransformer) -> torch.Tensor:
    """Read an image (:func:`read_picture`) and apply the model's eval transform (:func:`model_input`).

    Returns a (1, 3, H, W) normalised tensor. Raises ValueError when the file cannot be read as an image.
    """
    return model_input(read_picture(path), model)


def _denormalise(image: torch.Tensor, model: nn.Module) -> np.ndarray:
    config = resolve_data_config(model=model)
    mean = torch.tensor(config["mean"]).view(3, 1, 1)
    std = torch.tensor(config["std"]).view(3, 1, 1)
    return (image * std + mean).clamp(0, 1).permute(1, 2, 0).numpy()


def render_attention_png(
    image: torch.Tensor,
    maps: AttentionMaps,
    model: nn.Module,
    title: str,
    figsize: tuple[float, float] = FIGSIZE,
    dpi: int = DPI,
) -> bytes:
    """PNG bytes: the image as the model sees it, last-block CLS attention, and rollout, overlaid."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    picture = _denormalise(image[0], model)
    height, width = picture.shape[:2]
    figure = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(figure)
    depth = len(maps.blocks)
    heads = maps.blocks[-1].shape[1]
    panels = [
        ("input (as the model sees it)", None),
        (f"last block: CLS attention\n(mean of {heads} heads)", maps.cls_last_block[0]),
        (f"attention rollout\n({depth} blocks)", maps.cls_rollout[0]),
    ]
    for index, (label, attention) in enumerate(panels, start=1):
        axes = figure.add_subplot(1, 3, index)
        axes.imshow(picture)
        if attention is not None:
            axes.imshow(
                attention.float().numpy(),
                cmap="inferno",
                alpha=0.6,
                interpolation="bilinear",
                extent=(0, width, height, 0),
            )
        axes.set_title(label, fontsize=9)
        axes.axis("off")
    figure.suptitle(title, fontsize=9)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})  # no version: same bytes anywhere
    return buffer.getvalue()


def write_attention_png(
    image_path: PathLike,
    name_or_dir: str,
    out: PathLike,
    img_size: int | None = None,
) -> AttentionMaps:
    """Load the model and image, compute the maps and write the picture to ``out`` atomically."""
    require_plots()
    picture = read_picture(image_path)  # first: a picture that is refused costs no model
    model, description = load_model(name_or_dir, img_size)
    image = model_input(picture, model)
    maps = attention_maps(model, image)
    height, width = model.patch_embed.img_size
    title = f"{description} · {Path(image_path).name} at {height}x{width}"
    png = render_attention_png(image, maps, model, title)
    with atomic_write(out, "wb") as handle:
        handle.write(png)
    return maps
