"""A bad NaFlex batch gets a NaFlexBatchError (a ValueError) naming the field and the expected shape."""

from dataclasses import replace

import pytest
import torch

from tests.support import tiny
from tests.support.naflex_batches import images, naflex_batch
from timm_vitscratch.errors import NaFlexBatchError
from timm_vitscratch.gate.naflex_batch import read_naflex_batch


@pytest.fixture(scope="module")
def model():
    return tiny(num_classes=3).eval()


@pytest.fixture
def batch():
    return naflex_batch(images([(16, 24), (8, 32)]), patch_size=8, max_seq_len=8)


def _error(model, *args, **kwargs) -> NaFlexBatchError:
    with pytest.raises(NaFlexBatchError) as caught, torch.no_grad():
        model(*args, **kwargs)
    assert isinstance(caught.value, ValueError)
    return caught.value


@pytest.mark.parametrize("key", ["patches", "patch_coord", "patch_valid"])
def test_missing_key_names_it_and_what_a_batch_holds(model, batch, key):
    del batch[key]
    error = _error(model, batch)
    assert error.field == key
    assert "missing" in str(error) and "(batch, N, 192)" in str(error) and "'patch_coord' (batch, N, 2)" in str(error)


def test_missing_validity_with_positional_patches(model, batch):
    error = _error(model, batch["patches"], patch_coord=batch["patch_coord"])
    assert error.field == "patch_valid" and "(batch, N) bool" in str(error)


def test_an_image_without_a_valid_patch(model, batch):
    batch["patch_valid"][1] = False
    error = _error(model, batch)
    assert error.field == "patch_valid"
    assert "image 1 of the batch has no valid patch" in str(error) and "(batch, N)" in str(error)


def test_negative_coordinates(model, batch):
    batch["patch_coord"][0, 2, 1] = -1
    error = _error(model, batch)
    assert error.field == "patch_coord" and "negative" in str(error) and ">= 0" in str(error)


def test_non_integer_coordinates(model, batch):
    batch["patch_coord"] = batch["patch_coord"].float() + 0.5
    error = _error(model, batch)
    assert error.field == "patch_coord" and "integer" in str(error) and "torch.float32" in str(error)


def test_coordinates_of_the_wrong_shape(model, batch):
    batch["patch_coord"] = batch["patch_coord"][:, :, :1]
    error = _error(model, batch)
    assert error.field == "patch_coord" and "(batch, N, 2) = (2, 8, 2)" in str(error) and "(2, 8, 1)" in str(error)


def test_validity_of_the_wrong_shape_or_type(model, batch):
    error = _error(model, dict(batch, patch_valid=batch["patch_valid"][:, :5]))
    assert error.field == "patch_valid" and "(batch, N) = (2, 8)" in str(error) and "(2, 5)" in str(error)
    error = _error(model, dict(batch, patch_valid=batch["patch_valid"].float()))
    assert error.field == "patch_valid" and "bool" in str(error)


def test_patch_dimension_that_does_not_match_the_model(model):
    other = naflex_batch(images([(32, 32)]), patch_size=16, max_seq_len=8)  # 16*16*3 = 768 per patch
    error = _error(model, other)
    assert error.field == "patches"
    assert "(batch, N, P*P*C) = (batch, N, 192)" in str(error) and "(1, 8, 768)" in str(error)
    assert "patch size (8, 8) and 3 channels" in str(error)
    error = _error(model, dict(other, patches=other["patches"][..., :7].reshape(1, 8, 7)))
    assert error.field == "patches"


def test_unflattened_patches_with_the_wrong_channel_count(model):
    other = naflex_batch(images([(32, 32)], channels=1), patch_size=8, max_seq_len=16, flatten=False)
    error = _error(model, other)
    assert error.field == "patches" and "(batch, N, Ph, Pw, C) with C = 3" in str(error)


def test_attention_mask_of_the_wrong_shape(model, batch):
    error = _error(model, dict(batch, attn_mask=torch.zeros(2, 1, 8, 8)))
    assert error.field == "attn_mask" and "(batch, 1, prefix + N, prefix + N) = (2, 1, 9, 9)" in str(error)


def test_not_a_tensor(model, batch):
    error = _error(model, dict(batch, patches=batch["patches"].tolist()))
    assert error.field == "patches" and "expected a tensor, got list" in str(error)


def test_a_batch_of_no_images(model, batch):
    error = _error(model, {key: value[:0] for key, value in batch.items() if key != "seq_len"})
    assert error.field == "patches" and "0 images" in str(error) and "at least one" in str(error)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_patches_of_another_float_dtype_than_the_weights(model, batch, dtype):
    error = _error(model, dict(batch, patches=batch["patches"].to(dtype)))
    assert error.field == "patches" and str(dtype) in str(error) and "expected torch.float32" in str(error)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool, torch.complex64])
def test_patches_that_are_not_floating_point(model, batch, dtype):
    error = _error(model, dict(batch, patches=batch["patches"].to(dtype)))
    assert error.field == "patches" and str(dtype) in str(error) and "floating-point" in str(error)


def test_patches_of_a_lower_precision_run_under_autocast(model, batch):
    with torch.no_grad():
        expected = model(batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model(dict(batch, patches=batch["patches"].bfloat16()))
    assert got.shape == expected.shape and (got.float() - expected).abs().max() < 0.2


@pytest.mark.parametrize("side", [0, 65, 1000])
def test_a_patch_side_of_zero_or_past_the_bound(model, side):
    batch = naflex_batch(images([(16, 16)]), patch_size=8, max_seq_len=4, flatten=False)
    patches = torch.zeros(1, 4, side, 8, 3)
    error = _error(model, dict(batch, patches=patches))
    assert (
        error.field == "patches" and f"patch side of {side} pixels" in str(error) and "expected 1 to 64" in str(error)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool, torch.uint64, torch.uint32])
def test_coordinates_of_a_dtype_that_is_not_a_plain_integer(model, batch, dtype):
    error = _error(model, dict(batch, patch_coord=batch["patch_coord"].to(dtype)))
    assert error.field == "patch_coord" and "integer" in str(error) and str(dtype) in str(error)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.int8, torch.uint8])
def test_coordinates_of_a_narrower_integer_dtype_are_read(model, batch, dtype):
    with torch.no_grad():
        assert torch.equal(model(dict(batch, patch_coord=batch["patch_coord"].to(dtype))), model(batch))


def test_an_attention_mask_of_another_dtype(model, batch):
    from timm.models.naflexvit import create_attention_mask

    mask = create_attention_mask(batch["patch_valid"], num_prefix_tokens=1, dtype=torch.float64)
    error = _error(model, dict(batch, attn_mask=mask))
    assert error.field == "attn_mask" and "torch.float64" in str(error) and "bool" in str(error)
    error = _error(model, dict(batch, attn_mask=mask.tolist()))
    assert error.field == "attn_mask" and "expected a tensor" in str(error)


def test_entries_on_another_device_than_the_model():
    # the gate sees the model as numbers: a model on another device than the batch is one device field
    batch = naflex_batch(images([(16, 24)]), patch_size=8, max_seq_len=8)
    spec = replace(tiny().naflex_spec(), device=torch.device("meta"))
    with pytest.raises(NaFlexBatchError) as caught:
        read_naflex_batch(spec, batch)
    assert caught.value.field == "patches" and "is on cpu" in str(caught.value) and "meta" in str(caught.value)
