"""The private names of other libraries that the package uses: all in ``timm_vitscratch/private_api.py``,
each still there with the signature we call, and none imported anywhere else in the package."""

import ast
import inspect
from pathlib import Path

import pytest
import timm.models
import timm.models._hub
import timm.models._input

import timm_vitscratch
from timm_vitscratch import private_api

PACKAGE = Path(timm_vitscratch.__file__).parent
SOURCES = [
    *PACKAGE.rglob("*.py"),
    PACKAGE.parent / "timm_vitscratch_cli.py",
    PACKAGE.parent / "timm_vitscratch_autoload.py",
]
LIBRARIES = ("timm", "torch", "torchvision", "huggingface_hub", "setuptools", "safetensors", "transformers")
#: private attributes of timm's models that only private_api.py may write (timm's own record of constructor args)
TIMM_ATTRIBUTES = ("_model_args", "_traits")


def _private_uses(path: Path) -> list[str]:
    """The private modules or names of ``LIBRARIES`` one source file imports, and timm's attributes it touches."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            parts = node.module.split(".")
            if parts[0] in LIBRARIES and (
                any(p.startswith("_") for p in parts) or any(a.name.startswith("_") for a in node.names)
            ):
                found.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [
                f"import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in LIBRARIES and any(p.startswith("_") for p in a.name.split("."))
            ]
        elif isinstance(node, ast.Attribute) and node.attr in TIMM_ATTRIBUTES:
            found.append(f".{node.attr}")
    return found


def test_no_module_but_private_api_uses_a_private_name():
    offenders = {
        str(path.relative_to(PACKAGE.parent)): uses
        for path in SOURCES
        if path.name != "private_api.py" and (uses := _private_uses(path))
    }
    assert offenders == {}, "import these through timm_vitscratch/private_api.py, with the reason there"


def test_the_scan_sees_what_private_api_itself_imports():
    # the scan above is only as good as its parser: it must find the names private_api.py does import
    uses = _private_uses(PACKAGE / "private_api.py")
    assert "from timm.models._hub import generate_readme, save_config_for_hf" in uses
    assert any(u.startswith("from timm.models._input import") for u in uses)


def test_timm_private_helpers_keep_the_signatures_we_call():
    wanted = {
        timm.models._hub.save_config_for_hf: ("model", "config_path", "model_config"),
        timm.models._hub.generate_readme: ("model_card", "model_name"),
        timm.models._input.update_model_args: ("model", "model_args"),
        timm.models._input.update_model_input_size: ("model", "img_size", "model_args"),
    }
    for helper, params in wanted.items():
        assert tuple(inspect.signature(helper).parameters)[: len(params)] == params, helper.__name__


def test_timm_still_exports_none_of_them_publicly():
    # the day timm exports one, import it from timm.models instead and drop it from private_api.py
    for name in ("save_config_for_hf", "generate_readme", "update_model_args", "update_model_input_size"):
        assert not hasattr(timm.models, name), f"timm.models now exports {name}"


def test_recorded_args_reach_timms_public_readers():
    # what private_api records is what timm's public get_model_args / get_model_input_config read back
    with __import__("torch").device("meta"):
        model = timm.create_model("scratch_vit_ti16", num_classes=3)
    private_api.record_model_args(model, reg_tokens=4)
    model.set_input_size(img_size=(112, 112))
    args = timm.models.get_model_args(model)
    assert args["reg_tokens"] == 4 and tuple(args["img_size"]) == (112, 112)
    assert tuple(timm.models.get_model_input_config(model)["input_size"][1:]) == (112, 112)


def test_timm_reads_configs_through_the_name_we_replace(tmp_path):
    # timm's local-dir: / hf-hub: config reads call timm.models._hub.load_cfg_from_json by its module global;
    # importing the package points it at the gate. If timm reads configs another way, this fails.
    import timm_vitscratch  # noqa: F401

    reader = timm.models._hub.load_cfg_from_json
    assert reader.__module__.startswith("timm_vitscratch") and tuple(inspect.signature(reader).parameters) == ("path",)
    source = inspect.getsource(timm.models._hub.load_model_config_from_path)
    assert "load_cfg_from_json(" in source
    source = inspect.getsource(timm.models._hub.load_model_config_from_hf)
    assert "load_cfg_from_json(" in source
    (tmp_path / "config.json").write_text("[" * 40 + "]" * 40)
    with pytest.raises(ValueError, match="deeper than 32 levels"):
        timm.models._hub.load_model_config_from_path(tmp_path)


def test_timm_fetches_hub_configs_through_the_name_we_wrap():
    # timm's hf-hub: config fetch calls timm.models._hub.download_from_hf by its module global, with these
    # arguments; importing the package wraps it (once). If timm fetches configs another way, this fails.
    import timm_vitscratch  # noqa: F401

    wrapper = timm.models._hub.download_from_hf
    assert wrapper.__module__ == "timm_vitscratch.private_api"
    original = wrapper.__wrapped__
    assert original.__module__ == "timm.models._hub"
    assert tuple(inspect.signature(original).parameters) == ("model_id", "filename", "cache_dir")
    assert "download_from_hf(" in inspect.getsource(timm.models._hub.load_model_config_from_hf)
    private_api.fetch_timm_hub_files_with(lambda download, *args: download(*args))
    try:
        assert timm.models._hub.download_from_hf.__wrapped__ is original  # wrapped once, not twice
    finally:
        timm.models._hub.download_from_hf = wrapper
