"""NaFlex coordinates are bounded by the batch itself: an image of n valid patches spans at most n rows and n
columns, and its grid at most the position table's resample bound (16,384 cells). Every batch timm's
``Patchify`` and ``NaFlexCollator`` make stays inside (cut short or not); a coordinate past it is refused
naming the field, the image and the bound, whatever its value (up to int64's largest)."""

import pytest
import torch

from tests.support import tiny
from tests.support.naflex_batches import MIXED_SIZES, images, naflex_batch
from timm_vitscratch.choices import MAX_PATCHES
from timm_vitscratch.errors import NaFlexBatchError


@pytest.fixture(scope="module")
def model():
    return tiny(num_classes=3).eval()


def batch_of(layouts: list[list[tuple[int, int]]], seq: int | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch holding, per image, valid patches at the given (row, column) coordinates, padded to ``seq``."""
    generator = torch.Generator().manual_seed(seed)
    seq = seq or max(len(coords) for coords in layouts)
    batch = {
        "patches": torch.randn(len(layouts), seq, 192, generator=generator),
        "patch_coord": torch.zeros(len(layouts), seq, 2, dtype=torch.long),
        "patch_valid": torch.zeros(len(layouts), seq, dtype=torch.bool),
    }
    for image, coords in enumerate(layouts):
        batch["patch_coord"][image, : len(coords)] = torch.tensor(coords)
        batch["patch_valid"][image, : len(coords)] = True
    return batch


def alone(batch: dict[str, torch.Tensor], image: int) -> dict[str, torch.Tensor]:
    """One image of a batch as a batch of its own, its valid patches only (no padding)."""
    keep = batch["patch_valid"][image]
    return {key: batch[key][image][keep][None] for key in ("patches", "patch_coord", "patch_valid")}


def assert_each_image_equals_itself_alone(model, batch):
    with torch.no_grad():
        logits = model(batch)
        for image in range(logits.shape[0]):
            assert torch.allclose(logits[image], model(alone(batch, image))[0], atol=1e-5), image


def _error(model, batch) -> NaFlexBatchError:
    with pytest.raises(NaFlexBatchError) as caught, torch.no_grad():
        model(batch)
    return caught.value


def test_an_image_may_span_as_many_rows_or_columns_as_it_has_valid_patches(model):
    strip = [(0, column) for column in range(6)]
    column = [(row, 0) for row in range(6)]
    corners = [(0, 0), (0, 3), (3, 0), (3, 3)]  # 4 valid patches at the corners of a 4 x 4 grid
    diagonal = [(i, i) for i in range(5)]
    assert_each_image_equals_itself_alone(model, batch_of([strip, column, corners, diagonal, [(0, 0)]], seq=8))


@pytest.mark.parametrize("max_seq_len", [1, 5, 7, 13])
def test_images_the_collator_cut_short_stay_within_the_bound(model, max_seq_len):
    # timm's collator keeps the first max_seq_len patches (row-major): the grid is then a few rows of the image
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=max_seq_len)
    assert_each_image_equals_itself_alone(model, batch)


def test_the_coordinates_of_padding_are_never_read(model):
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=40)
    hostile = dict(batch, patch_coord=batch["patch_coord"].clone())
    hostile["patch_coord"][~batch["patch_valid"]] = torch.tensor([2**63 - 1, -(2**63)])
    with torch.no_grad():
        assert torch.equal(model(hostile), model(batch))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("value", [16, 3000, 10**5, 2**31, 2**63 - 1])
def test_a_coordinate_past_the_images_own_patches_is_refused(model, axis, value):
    batch = batch_of([[(i // 4, i % 4) for i in range(16)]] * 2)
    batch["patch_coord"][1, 3, axis] = value
    error = _error(model, batch)
    name = ("row", "column")[axis]
    assert error.field == "patch_coord"
    assert f"image 1: a valid patch at {name} {value:,} is past the bound 15" in str(error)
    assert "an image of 16 valid patches spans at most 16 rows and 16 columns" in str(error)


def test_one_valid_patch_is_one_cell(model):
    assert_each_image_equals_itself_alone(model, batch_of([[(0, 0)]], seq=4))
    error = _error(model, batch_of([[(0, 1)]], seq=4))
    assert "column 1 is past the bound 0 (an image of 1 valid patch spans at most 1 rows" in str(error)


def test_a_grid_past_the_resample_bound_is_refused(model):
    side = int(MAX_PATCHES**0.5)  # 128: a 128 x 128 grid is the largest square the table is resampled to
    assert_each_image_equals_itself_alone(model, batch_of([[(i, i) for i in range(side)], [(0, 0), (1, 1)]]))
    error = _error(model, batch_of([[(0, 0)], [(i, i) for i in range(side + 1)]]))
    assert error.field == "patch_coord"
    assert f"image 1: its grid of {side + 1} x {side + 1} = {(side + 1) ** 2:,} patch cells" in str(error)
    assert f"resample bound of {MAX_PATCHES:,} cells" in str(error)


def test_sincos_and_tableless_models_keep_the_same_bounds():
    for options in (dict(pos_embed="sincos"), dict(pos_embed="none")):
        model = tiny(num_classes=3, **options).eval()
        assert_each_image_equals_itself_alone(model, batch_of([[(0, i) for i in range(7)], [(2, 2), (0, 0), (1, 0)]]))
        assert _error(model, batch_of([[(0, 7)] + [(0, i) for i in range(6)]])).field == "patch_coord"


def test_a_nan_stays_in_its_own_image(model):
    batch = naflex_batch(images(MIXED_SIZES), patch_size=8, max_seq_len=40)
    batch["patches"][2, 0, 0] = float("nan")
    batch["patches"][~batch["patch_valid"]] = float("nan")  # padding: never read
    with torch.no_grad():
        logits = model(batch)
    finite = logits.isfinite().all(dim=1)
    assert finite.tolist() == [image != 2 for image in range(len(MIXED_SIZES))]
