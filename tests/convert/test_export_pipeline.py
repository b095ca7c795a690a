"""A transformers export is whole: its image processor is written beside the model, so transformers'
``AutoImageProcessor`` and ``pipeline('image-feature-extraction')`` work on the folder, with the outputs of the
model the weights came from on the processor's pixels."""

from __future__ import annotations

import pytest
import timm
import torch
import transformers
from PIL import Image

from tests.support.eva_originals import randomized
from timm_vitscratch.convert import export
from timm_vitscratch.model_dir import save_model_directory

pytestmark = pytest.mark.slow  # transformers' pipeline over three exported families

TOL = 1e-4
#: our row (one block deep) -> the transformers processor class its export carries
ROWS = {
    "scratch_dinov3_s16": (dict(depth=1), "DINOv3ViTImageProcessor"),
    "scratch_dinov2_s14": (dict(depth=1, img_size=56), "BitImageProcessor"),
    "scratch_siglip_b16": (dict(depth=1, img_size=64), "Siglip2ImageProcessor"),
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
