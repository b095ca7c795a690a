"""A SigLIP 2 NaFlex row (timm ``NaFlexVit``'s module tree) exports to transformers' ``Siglip2VisionModel`` with its
``Siglip2ImageProcessor``: the folder loads whole through ``AutoModel``, ``AutoImageProcessor`` and ``pipeline``, and on
the processor's patches (images of any shape at the exported patch budget, padded into one batch) transformers gives
our outputs and timm's ``NaFlexVit``'s: patch flattening (row, column, channel), the table resized per image
bilinearly with antialiasing, the padding masked, the MAP head over each image's valid tokens."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import timm
import torch
import transformers
from PIL import Image
from safetensors import safe_open
from timm.data.naflex_transforms import get_image_size_for_seq
from transformers.models.siglip2.image_processing_siglip2 import get_image_size_for_max_num_patches

from tests.support.eva_originals import randomized
from timm_vitscratch.convert import export
from timm_vitscratch.errors import ConversionError
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # transformers' model, processor and pipeline on exported folders

TOL = 1e-5
#: a tiny NaFlex row: an 8x8 table (a 64-patch budget), two blocks, the MAP head
TINY = dict(depth=2, embed_dim=64, num_heads=4, img_size=128, num_classes=0)
#: (width, height) of images that resize to grids wider, taller, equal to and smaller than the table's
SIZES = [(90, 70), (300, 40), (20, 200), (128, 128), (10, 10), (64, 256)]


def _images(seed: int = 1) -> list[Image.Image]:
    generator = torch.Generator().manual_seed(seed)
    return [Image.fromarray((torch.rand(h, w, 3, generator=generator) * 255).to(torch.uint8).numpy()) for w, h in SIZES]


def _exported(tmp: Path, **overrides) -> tuple[torch.nn.Module, Path]:
    ours = randomized(timm.create_model("scratch_siglip2_b16_naflex", **{**TINY, **overrides}))
    save_model_directory(ours, tmp / "ours", license="apache-2.0")
    export(tmp / "ours", "transformers", tmp / "hf")
    return ours, tmp / "hf"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return _exported(tmp_path_factory.mktemp("naflex"))


def naflex_batch(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The processor's output as a NaFlex batch: the same patches, each one's (row, column) in its image's grid
    (``spatial_shapes``, row by row as the processor cuts them), valid where ``pixel_attention_mask`` says."""
    valid = inputs["pixel_attention_mask"].bool()
    coord = torch.zeros(*valid.shape, 2, dtype=torch.long)
    for i, (rows, cols) in enumerate(inputs["spatial_shapes"].tolist()):
        row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        coord[i, : rows * cols] = torch.stack([row.flatten(), col.flatten()], dim=-1)
    return dict(patches=inputs["pixel_values"], patch_coord=coord, patch_valid=valid)


def test_exported_folder_is_a_whole_siglip2_model(exported):
    ours, hf = exported
    config = json.loads((hf / "config.json").read_text())
    assert config["model_type"] == "siglip2_vision_model" and config["num_patches"] == 64
    with safe_open(str(hf / "model.safetensors"), "pt") as f:
        written = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    reference = transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig.from_pretrained(hf))
    assert written == {k: tuple(v.shape) for k, v in reference.state_dict().items()}  # every tensor, no other
    processor = transformers.AutoImageProcessor.from_pretrained(hf)
    assert type(processor).__name__ == "Siglip2ImageProcessor"
    assert (processor.patch_size, processor.max_num_patches) == (16, 64)
    assert list(processor.image_mean) == list(ours.pretrained_cfg["mean"])
    assert list(processor.image_std) == list(ours.pretrained_cfg["std"])
    assert type(transformers.AutoModel.from_pretrained(hf)).__name__ == "Siglip2VisionModel"


def test_transformers_gives_ours_and_timm_naflexvit_outputs_on_a_mixed_batch(exported):
    ours, hf = exported
    timm_model = timm.create_model(
        "naflexvit_base_patch16_siglip", **{**TINY, "img_size": None}, pos_embed_grid_size=(8, 8)
    ).eval()
    timm_model.load_state_dict(ours.state_dict(), strict=True)
    processor = transformers.AutoImageProcessor.from_pretrained(hf)
    model = transformers.AutoModel.from_pretrained(hf).eval()
    inputs = processor(images=_images(), return_tensors="pt")
    # grids taller, wider, equal to and smaller than the 8x8 table, padded to 64 patches
    assert inputs["spatial_shapes"].tolist() == [[7, 9], [3, 21], [21, 3], [8, 8], [8, 8], [16, 4]]
    batch = naflex_batch(inputs)
    valid = batch["patch_valid"]
    with torch.no_grad():
        out = model(**inputs)
        features = ours.forward_features(batch)
        pooled = ours.forward_head(features)
        theirs = timm_model.forward_features(batch["patches"], batch["patch_coord"], valid)
        theirs = theirs["patches"] if isinstance(theirs, dict) else theirs
        theirs_pooled = timm_model.forward_head(theirs, patch_valid=valid)
    diffs = {
        "tokens, ours": (features["patches"][valid] - out.last_hidden_state[valid]).abs().max().item(),
        "tokens, timm NaFlexVit": (theirs[valid] - out.last_hidden_state[valid]).abs().max().item(),
        "pooled, ours": (pooled - out.pooler_output).abs().max().item(),
        "pooled, timm NaFlexVit": (theirs_pooled - out.pooler_output).abs().max().item(),
    }
    print("max-abs-diff against transformers' Siglip2VisionModel:", diffs)
    assert max(diffs.values()) <= TOL, diffs
    spread = out.pooler_output.std().item()
    assert spread > 100 * TOL  # outputs that tell the weights apart


def test_pipeline_and_plain_images_give_our_tokens(exported):
    ours, hf = exported
    processor = transformers.AutoImageProcessor.from_pretrained(hf)
    model = transformers.AutoModel.from_pretrained(hf).eval()
    extractor = transformers.pipeline("image-feature-extraction", model=str(hf))
    for image in _images(seed=2)[:3]:
        features = torch.tensor(extractor(image))  # last_hidden_state, padded to the budget
        inputs = processor(images=image, return_tensors="pt")
        rows, cols = inputs["spatial_shapes"][0].tolist()
        # the same patches as an image: ours through its plain-image path (dynamic_img_size)
        pixels = inputs["pixel_values"][0, : rows * cols].reshape(rows, cols, 16, 16, 3)
        pixels = pixels.permute(4, 0, 2, 1, 3).reshape(1, 3, rows * 16, cols * 16)
        with torch.no_grad():
            assert torch.equal(features, model(**inputs).last_hidden_state)
            tokens = ours.forward_features(pixels)
        assert (features[0, : rows * cols] - tokens[0]).abs().max().item() <= TOL


def test_the_processor_resizes_as_timms_naflex_transform():
    """The exported processor's size for a patch budget is the one timm's NaFlex transforms pick."""
    for (height, width), budget in itertools.product(
        itertools.product([1, 7, 20, 70, 128, 300, 1024], [1, 16, 90, 255, 640]), [64, 256, 576]
    ):
        ours = tuple(get_image_size_for_seq((height, width), 16, budget)[1])
        assert ours == get_image_size_for_max_num_patches(height, width, 16, budget), (height, width, budget)


def test_a_channels_first_row_exports_reordered(tmp_path):
    ours, hf = _exported(tmp_path, patchify_channels_last=False)
    processor = transformers.AutoImageProcessor.from_pretrained(hf)
    model = transformers.AutoModel.from_pretrained(hf).eval()
    inputs = processor(images=_images()[:3], return_tensors="pt")
    batch = naflex_batch(inputs)
    shape = batch["patches"].shape
    # ours reads (channel, row, column) flattened patches: the same pixels in its order
    batch["patches"] = batch["patches"].reshape(*shape[:2], 16, 16, 3).permute(0, 1, 4, 2, 3).reshape(shape)
    valid = batch["patch_valid"]
    with torch.no_grad():
        out = model(**inputs)
        features = ours.forward_features(batch)
    assert (features["patches"][valid] - out.last_hidden_state[valid]).abs().max().item() <= TOL
    assert (ours.forward_head(features) - out.pooler_output).abs().max().item() <= TOL


def test_a_row_resampling_otherwise_than_transformers_is_refused(tmp_path):
    ours = timm.create_model("scratch_siglip2_b16_naflex", **TINY, pos_embed_interp_mode="bicubic")
    save_model_directory(ours, tmp_path / "ours", license="apache-2.0")
    with pytest.raises(ConversionError, match=r"pos_embed_interp_mode='bicubic'.*bilinearly"):
        export(tmp_path / "ours", "transformers", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
