"""A transformers export is whole: its image processor is written beside the model, so transformers'
``AutoImageProcessor`` and ``pipeline('image-feature-extraction')`` work on the folder, with the outputs of the
model the weights came from on the processor's pixels.

A classic (fixed-size) SigLIP row is written as a ``SiglipVisionModel`` with a ``SiglipImageProcessor`` holding
timm's eval transform for it (the short side to ``floor(size / crop_pct)``, the centre cut; or, ``squash``, straight
to the size): the pipeline gives timm's own model's outputs through timm's own transform, on square and non-square
images alike. With transformers' PIL backend the pixels are timm's exactly; its default (torchvision) backend
resizes tensors with another bicubic kernel than PIL's, a level or two of 255 apart, which the model carries on.
"""

from __future__ import annotations

import pytest
import timm
import torch
import transformers
from PIL import Image, ImageFilter

from tests.support.eva_originals import randomized
from timm_vitscratch.convert import convert, export
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # transformers' pipeline over three exported families

TOL = 1e-4
#: our row (one block deep) -> the transformers processor class its export carries
ROWS = {
    "scratch_dinov3_s16": (dict(depth=1), "DINOv3ViTImageProcessor"),
    "scratch_dinov2_s14": (dict(depth=1, img_size=56), "BitImageProcessor"),
    "scratch_siglip_b16": (dict(depth=1, img_size=64), "SiglipImageProcessor"),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_exported_folder_works_with_auto_image_processor_and_pipeline(tmp_path, name):
    kwargs, processor_class = ROWS[name]
    ours = randomized(timm.create_model(name, **kwargs))
    save_model_directory(ours, tmp_path / "ours", license="apache-2.0")
    export(tmp_path / "ours", "transformers", tmp_path / "hf")
    assert (tmp_path / "hf" / "preprocessor_config.json").is_file()

    processor = transformers.AutoImageProcessor.from_pretrained(tmp_path / "hf")
    assert type(processor).__name__ == processor_class
    assert list(processor.image_mean) == list(ours.pretrained_cfg["mean"])
    image = Image.new("RGB", (90, 70), (200, 120, 40))
    image.paste((20, 200, 90), (10, 10, 50, 40))
    extractor = transformers.pipeline("image-feature-extraction", model=str(tmp_path / "hf"))
    features = torch.tensor(extractor(image))  # last_hidden_state, batch of one

    model = transformers.AutoModel.from_pretrained(tmp_path / "hf").eval()
    inputs = processor(images=image, return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(features, model(**inputs).last_hidden_state, atol=TOL)
        if "pixel_values" in inputs and inputs["pixel_values"].dim() == 4:  # an image batch: ours on the same pixels
            tokens = ours.forward_features(inputs["pixel_values"])
            assert features.shape == tokens.shape and (features - tokens).abs().max() <= TOL


# --- a classic SigLIP row against timm's own model and transform ------------------------------------------------
#: a SigLIP B/16 at its real size (224: timm resizes to 248, then cuts 224), narrow and two blocks deep
SIGLIP = dict(depth=2, embed_dim=64, num_heads=4, num_classes=0)
#: (width, height): square at and above the size, and non-square both ways (each long side over the resized short
#: side's crop by a multiple of 4 pixels or 4k + 1, 4k + 2, where transformers and torchvision cut at one offset)
SIZES = [(224, 224), (400, 400), (90, 70), (300, 40), (333, 500)]


def _picture(width: int, height: int, seed: int) -> Image.Image:
    """A smooth picture (blurred blocks of colour), as photographs are: not per-pixel noise."""
    generator = torch.Generator().manual_seed(seed)
    blocks = (torch.rand(height // 8 + 1, width // 8 + 1, 3, generator=generator) * 255).to(torch.uint8)
    image = Image.fromarray(blocks.numpy()).resize((width, height), Image.NEAREST)
    return image.filter(ImageFilter.GaussianBlur(2))


@pytest.fixture(scope="module", params=["center", "squash"])
def siglip_export(request, tmp_path_factory):
    """Our row and timm's ``vit_base_patch16_siglip_224`` with the same weights and pretrained_cfg (the row's own:
    crop_pct 0.9, ``center``; or 1.0, ``squash``), and the folder exported from ours."""
    tmp = tmp_path_factory.mktemp(f"siglip_{request.param}")
    cfg = {} if request.param == "center" else dict(pretrained_cfg_overlay=dict(crop_pct=1.0, crop_mode="squash"))
    ours = randomized(timm.create_model("scratch_siglip_b16", **SIGLIP, **cfg))
    reference = timm.create_model("vit_base_patch16_siglip_224", **SIGLIP, **cfg).eval()
    reference.load_state_dict(ours.state_dict(), strict=True)
    save_model_directory(ours, tmp / "ours", license="apache-2.0")
    export(tmp / "ours", "transformers", tmp / "hf")
    return ours, reference, tmp


def test_classic_siglip_exports_as_siglip_vision_model_with_timms_transform(siglip_export):
    _, reference, tmp = siglip_export
    config = transformers.AutoConfig.from_pretrained(tmp / "hf")
    assert (config.model_type, config.image_size, config.patch_size) == ("siglip_vision_model", 224, 16)
    assert type(transformers.AutoModel.from_pretrained(tmp / "hf")).__name__ == "SiglipVisionModel"
    processor = transformers.AutoImageProcessor.from_pretrained(tmp / "hf")
    assert type(processor).__name__ == "SiglipImageProcessor"
    data = timm.data.resolve_data_config({}, model=reference)
    assert (list(processor.image_mean), list(processor.image_std)) == (list(data["mean"]), list(data["std"]))
    assert processor.resample == 3 and data["interpolation"] == "bicubic"  # PIL.Image.BICUBIC
    if data["crop_mode"] == "squash":
        assert not processor.do_center_crop and (processor.size.height, processor.size.width) == (224, 224)
    else:
        assert data["crop_pct"] == 0.9 and processor.do_center_crop and processor.size.shortest_edge == 248
        assert (processor.crop_size.height, processor.crop_size.width) == (224, 224)


def test_pipeline_gives_timms_outputs_on_square_and_non_square_images(siglip_export):
    """timm's model through timm's transform, against transformers' pipeline on the exported folder: the same to
    float precision with the PIL backend; within the torchvision backend's resize (its pixels a level or two apart)
    with the default one. On the same pixels, transformers' model is ours and timm's to the bit."""
    ours, reference, tmp = siglip_export
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=reference))
    model = transformers.AutoModel.from_pretrained(tmp / "hf").eval()
    pipelines = {
        backend: transformers.pipeline(
            "image-feature-extraction",
            model=str(tmp / "hf"),
            image_processor=transformers.AutoImageProcessor.from_pretrained(tmp / "hf", backend=backend),
        )
        for backend in ("pil", "torchvision")
    }
    pipelines["default"] = transformers.pipeline("image-feature-extraction", model=str(tmp / "hf"))
    found: dict[str, float] = {}
    for seed, (width, height) in enumerate(SIZES):
        image = _picture(width, height, seed)
        pixels = transform(image).unsqueeze(0)
        with torch.no_grad():
            timms = reference.forward_features(pixels)
            theirs = model(pixel_values=pixels).last_hidden_state
            assert torch.equal(theirs, timms) and torch.equal(ours.forward_features(pixels), timms)
        for backend, extractor in pipelines.items():
            found[f"{backend} {width}x{height}"] = (torch.tensor(extractor(image)) - timms).abs().max().item()
        processed = pipelines["torchvision"].image_processor(images=image, return_tensors="pt")["pixel_values"]
        assert (processed - pixels).abs().max().item() <= 2.5 * 2 / 255  # two levels of 255, normalised by 0.5
    print("max-abs-diff of the pipeline's last_hidden_state against timm's:", found)
    assert max(v for k, v in found.items() if k.startswith("pil")) <= 1e-5
    assert max(found.values()) <= 0.1  # the torchvision backend's bicubic is not PIL's


def test_the_exported_folder_converts_back_to_the_row(siglip_export, capsys):
    """transformers -> ours (``convert --from transformers``): the same model and the same timm transform."""
    from timm_vitscratch.cli import main

    ours, reference, tmp = siglip_export
    assert main(["convert", "--from", "transformers", str(tmp / "hf"), str(tmp / "cli"), "--verify", "--strict"]) == 0
    assert "verify: max-abs-diff" in capsys.readouterr().out
    result = convert(tmp / "hf", tmp / "back", verify=True, strict=True)
    assert result.model_name == "scratch_siglip_b16" and result.verification.confirmed
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    for directory in ("cli", "back"):
        back = timm.create_model(f"local-dir:{tmp / directory}", pretrained=True).eval()
        with torch.no_grad():
            assert torch.equal(back(x), ours(x))
        theirs, mine = (timm.data.resolve_data_config({}, model=m) for m in (back, reference))
        assert {k: tuple(v) if isinstance(v, list) else v for k, v in theirs.items()} == mine
