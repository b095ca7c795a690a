"""Make docs/attention_example.png: a picture drawn here, seen by scratch_vit_ti16 with RANDOM weights.

Run from the repository root: ``python docs/make_attention_example.py``. The weights are untrained,
so the maps show the method and the layout of the picture, not what a trained ViT looks at.

The output is deterministic: the weights are drawn here from a seeded generator (not by the model's
init, which may change), the PNG carries no software version, and the file is rewritten only when
its bytes would change.
"""

import sys
from pathlib import Path

import timm
import torch
from PIL import Image, ImageDraw

from timm_vitscratch.files import atomic_write
from timm_vitscratch.inspect.attention_maps import attention_maps, load_image, render_attention_png

DOCS = Path(__file__).resolve().parent
OUT = DOCS / "attention_example.png"
MODEL = "scratch_vit_ti16"
SEED = 0


def draw_scene(path: Path) -> None:
    """A 224x224 sky, ground, a sun and a red house: simple shapes with clear edges."""
    image = Image.new("RGB", (224, 224), (135, 190, 235))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 150, 224, 224), fill=(70, 140, 60))
    draw.ellipse((150, 20, 200, 70), fill=(250, 210, 40))
    draw.rectangle((40, 100, 120, 170), fill=(190, 40, 40))
    draw.polygon([(30, 100), (80, 55), (130, 100)], fill=(110, 60, 40))
    draw.rectangle((70, 130, 90, 170), fill=(60, 40, 30))
    image.save(path)


def random_model() -> torch.nn.Module:
    """The model with every parameter drawn from one seeded generator (norm scales near 1, the rest small)."""
    model = timm.create_model(MODEL).eval()
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1 + 0.1 * noise if param.dim() == 1 and name.endswith("weight") else 0.02 * noise)
    return model


def render_example(scene: Path) -> bytes:
    model = random_model()
    image = load_image(scene, model)
    title = f"{MODEL}, RANDOM weights (untrained, seed {SEED}) · {scene.name} at 224x224"
    return render_attention_png(image, attention_maps(model, image), model, title)


def main() -> int:
    scene = DOCS / "example_scene.png"
    draw_scene(scene)
    try:
        png = render_example(scene)
    finally:
        scene.unlink()
    if OUT.exists() and OUT.read_bytes() == png:
        print(f"{OUT} is up to date")
        return 0
    with atomic_write(OUT, "wb") as handle:
        handle.write(png)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
