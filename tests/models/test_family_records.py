"""Each family fact is written once, in its record (models/variants.py), and everything else reads it from there:
the registered names, timm's names, the tags, the entry points timm's registry holds, and conversion's facts."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import timm
import torch

import timm_vitscratch  # registers the models
from timm_vitscratch.choices import SOURCES
from timm_vitscratch.convert import dinov3 as convert_dinov3
from timm_vitscratch.convert import eva as convert_eva
from timm_vitscratch.models import pretrained, variants
from timm_vitscratch.models.pretrained import TIMM_TAGS, TORCHVISION_TAGS, TRANSFORMERS_REPOS
from timm_vitscratch.models.variants import ARCHITECTURES, DINOV3, EVA02, FAMILIES, FAMILY_OF, PE, TIMM_NAMES

PACKAGE = Path(timm_vitscratch.__file__).parent


def test_every_registered_name_belongs_to_exactly_one_family():
    names = [row.name for family in FAMILIES for row in family.rows]
    assert len(names) == len(set(names))
    # the zoo's module: tests register small option models (scratch_test_*) and tags of their own elsewhere
    registered = set(timm.list_models("scratch_*", module="variants"))
    assert set(names) == set(ARCHITECTURES) == registered == set(FAMILY_OF)
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)


def test_every_family_maps_each_row_to_a_timm_model():
    for family in FAMILIES:
        assert set(family.timm_names) == set(family.names), family.name
        missing = [theirs for theirs in family.timm_names.values() if not timm.models.is_model(theirs)]
        assert not missing, f"{family.name}: timm has no {missing}"
    assert TIMM_NAMES == {k: v for f in FAMILIES if f.counted_against == "timm" for k, v in f.timm_names.items()}


def test_tags_are_generated_from_the_rows_not_listed():
    assert TIMM_TAGS == {ours: theirs for family in FAMILIES for ours, theirs in family.timm_tags.items()}
    listed = set(timm.list_pretrained())
    assert not [theirs for theirs in TIMM_TAGS.values() if theirs not in listed]
    source = inspect.getsource(pretrained)
    named = sorted({row.timm for f in FAMILIES for row in f.rows if row.timm and f"{row.timm}." in source})
    assert not named, f"pretrained.py lists timm tags the rows already hold: {named}"


def test_tag_sources_and_layouts_are_ones_the_package_has():
    for family in FAMILIES:
        assert set(family.layouts) <= set(SOURCES), family.name
        assert set(family.tag_sources) <= {"timm", "torchvision", "transformers"}, family.name
    for source, tags in (("torchvision", TORCHVISION_TAGS), ("transformers", TRANSFORMERS_REPOS)):
        for tag in tags:
            assert source in FAMILY_OF[tag.split(".")[0]].tag_sources, tag


def test_pe_reference_grid_is_the_patch_grid_and_written_nowhere():
    for row in PE.rows:
        assert "ref_feat_shape" not in row.args, row.name
        arch = ARCHITECTURES[row.name]
        assert arch["ref_feat_shape"] == (arch["img_size"] // arch["patch_size"],) * 2, row.name


def test_conversion_reads_its_family_facts_from_the_records():
    assert convert_dinov3.LICENSE == DINOV3.licence
    assert convert_eva.LICENSES == {"pe": PE.licence, "eva02": EVA02.licence}
    assert convert_dinov3.IMG_SIZE == DINOV3.options["img_size"]
    # one map of our options to timm's Eva arguments: EVA02's and PE's, and DINOv3's a part of it
    assert convert_eva.EVA_ARGS is EVA02.timm_args is PE.timm_args is variants.EVA_ARGS
    assert convert_dinov3.EVA_ARGS is DINOV3.timm_args
    assert DINOV3.timm_args.items() <= variants.EVA_ARGS.items()
    for module in (convert_dinov3, convert_eva):  # no family fact read back from one sample variant
        assert 'ARCHITECTURES["scratch_' not in inspect.getsource(module), module.__name__


def test_entry_points_are_generated_and_filed_as_timm_expects():
    source = inspect.getsource(variants)
    assert "@register_model" not in source and "def scratch_" not in source
    assert set(timm.list_models(module="variants")) == set(ARCHITECTURES)
    for name in ARCHITECTURES:
        entry = timm.models.model_entrypoint(name)
        assert entry is getattr(variants, name)
        assert (entry.__name__, entry.__qualname__, entry.__module__) == (name, name, variants.__name__)
        assert entry.__doc__ and FAMILY_OF[name].title in entry.__doc__
        assert pickle.loads(pickle.dumps(entry)) is entry
    assert timm.get_pretrained_cfg("scratch_vit_b16.tv_in1k").architecture == "scratch_vit_b16"


def test_a_built_model_pickles():
    model = timm.create_model("scratch_vit_ti16", img_size=32, patch_size=8, depth=1, num_classes=3).eval()
    copy = pickle.loads(pickle.dumps(model))
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), copy(x))
    assert copy.pretrained_cfg["architecture"] == "scratch_vit_ti16"


def test_models_package_asks_nothing_of_the_network():
    """Hub fetching lives in weight_sources.py (below the models) and hub/ (injected): models/ imports neither
    huggingface_hub's HTTP client nor its download functions."""
    for path in sorted((PACKAGE / "models").glob("*.py")):
        text = path.read_text()
        for word in ("httpx", "get_session", "hf_hub_download", "try_to_load_from_cache", "is_offline_mode"):
            assert word not in text, f"{path.name} uses {word}"
