"""A bad NaFlex batch gets a NaFlexBatchError (a ValueError) naming the field and the expected shape."""

import pytest
import torch

from tests.support import tiny
from tests.support.naflex_batches import images, naflex_batch
from timm_vitscratch.errors import NaFlexBatchError


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
