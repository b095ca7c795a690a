"""Make docs/attention_example.png: a picture drawn here, seen by scratch_vit_ti16 with RANDOM weights.

Run from the repository root: ``python docs/make_attention_example.py``. The weights are untrained
(seed 0), so the maps show the method and the layout of the picture, not what a trained ViT looks at.
"""
from pathlib import Path

from PIL import Image, ImageDraw

from timm_vitscratch.inspect.attention_maps import write_attention_png

DOCS = Path(__file__).resolve().parent


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


if __name__ == "__main__":
    scene = DOCS / "example_scene.png"
    draw_scene(scene)
    write_attention_png(scene, "scratch_vit_ti16", DOCS / "attention_example.png")
    scene.unlink()
    print(f"wrote {DOCS / 'attention_example.png'}")
