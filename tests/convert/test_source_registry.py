"""A checkpoint source is registered in one place, ``choices.SOURCES``: its layout (``layouts/NAME.py``, what the
loader reads) and its format (``convert/NAME_format.py``, what conversion adds) are found from the name."""

from pathlib import Path

from timm_vitscratch import choices
from timm_vitscratch.convert.formats import FORMATS
from timm_vitscratch.convert.source_format import SourceFormat
from timm_vitscratch.layouts import LAYOUTS

PACKAGE = Path(choices.__file__).parent


def test_each_registered_source_has_its_layout_and_its_format_under_its_name():
    assert tuple(LAYOUTS) == tuple(FORMATS) == choices.SOURCES
    for name in choices.SOURCES:
        layout, fmt = LAYOUTS[name], FORMATS[name]
        assert layout.name == fmt.name == name
        assert type(layout).__module__ == f"timm_vitscratch.layouts.{name}"
        assert type(fmt).__module__ == f"timm_vitscratch.convert.{name}_format"
        assert isinstance(fmt, type(layout)) and isinstance(fmt, SourceFormat), name  # the format extends its layout


def test_no_source_module_is_left_unregistered():
    defines_layout = {p.stem for p in (PACKAGE / "layouts").glob("*.py") if "\nLAYOUT = " in p.read_text()}
    format_files = {p.stem.removesuffix("_format") for p in (PACKAGE / "convert").glob("*_format.py")}
    assert defines_layout == set(choices.SOURCES)
    assert format_files - {"source"} == set(choices.SOURCES)  # source_format.py: what every format shares


def test_the_export_targets_are_the_formats_that_write():
    writes = {name for name, fmt in FORMATS.items() if fmt.export_suffixes or fmt.export_directory}
    overrides = {name for name, fmt in FORMATS.items() if type(fmt).export_map is not SourceFormat.export_map}
    assert set(choices.EXPORT_TARGETS) == writes == overrides
