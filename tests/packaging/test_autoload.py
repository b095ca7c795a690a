"""Zero-import registration: a process that only imports timm sees the scratch_* models.

The hook logic is tested in this process on throwaway packages; the real thing is tested in fresh
virtual environments that get the package the way users get it (a wheel built from this tree by
the project's build backend, installed by pip; or ``pip install -e``) and whose processes never
import us. torch and timm come from this environment through a path-only ``.pth`` so that nothing
is downloaded or reinstalled.
"""

import importlib
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import timm_vitscratch_autoload as autoload
from tests.support import tiny
from tests.support.environments import env, run_python, site_packages
from timm_vitscratch import ARCHITECTURES
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import WEIGHTS_NAME, model_config, write_config

pytestmark = pytest.mark.slow  # builds wheel and editable venvs

PTH_NAME = "timm_vitscratch_autoload.pth"
SCRATCH_COUNT = len(ARCHITECTURES)


# ---------------------------------------------------------------- the hook, on throwaway packages


@pytest.fixture
def fake_packages(tmp_path, monkeypatch):
    """Write small packages into a sys.path dir; undo every import and hook afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    meta_path = list(sys.meta_path)
    before = set(sys.modules)

    def write(files):
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        importlib.invalidate_caches()

    yield write
    sys.meta_path[:] = meta_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


TARGET_PKG = {
    # imports its own submodule half-way, as timm does; DONE is set only at the very end
    "tgt_pkg/__init__.py": """
        from . import sub
        DONE = True
    """,
    "tgt_pkg/sub.py": """
        import tgt_pkg  # the partially imported parent: must not trigger the plugin
        STARTED = True
    """,
}


@pytest.mark.filterwarnings("error")
def test_hook_imports_plugin_once_target_has_finished(fake_packages, monkeypatch):
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    fake_packages(
        {
            **TARGET_PKG,
            "plugin_mod.py": """
        import tgt_pkg
        tgt_pkg.plugin_saw = tgt_pkg.DONE  # AttributeError if imported before the target finished
    """,
        }
    )
    autoload.install("tgt_pkg", "plugin_mod")
    hook = autoload.installed_hook("tgt_pkg")
    assert hook is not None and sys.meta_path[0] is hook

    import tgt_pkg

    assert tgt_pkg.plugin_saw is True and "plugin_mod" in sys.modules
    assert autoload.installed_hook("tgt_pkg") is None  # removed itself
    # the target keeps its real loader: nothing outside sees the wrapper
    assert type(tgt_pkg.__loader__) is type(tgt_pkg.__spec__.loader) is importlib.machinery.SourceFileLoader
    assert tgt_pkg.__loader__ is tgt_pkg.__spec__.loader


@pytest.mark.filterwarnings("error")
def test_explicit_plugin_import_first_runs_it_once(fake_packages, monkeypatch):
    """`import timm_vitscratch` before timm: the hook fires inside our own import and is a no-op."""
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    fake_packages(
        {
            **TARGET_PKG,
            "plugin_mod.py": """
        import tgt_pkg
        tgt_pkg.__dict__.setdefault("runs", []).append("plugin")
    """,
        }
    )
    autoload.install("tgt_pkg", "plugin_mod")
    import plugin_mod  # noqa: F401
    import tgt_pkg

    assert tgt_pkg.runs == ["plugin"]
    assert autoload.installed_hook("tgt_pkg") is None


def test_broken_plugin_warns_and_target_still_imports(fake_packages, monkeypatch):
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    fake_packages({**TARGET_PKG, "plugin_mod.py": "raise RuntimeError('plugin is broken')\n"})
    autoload.install("tgt_pkg", "plugin_mod")
    with pytest.warns(
        RuntimeWarning,
        match=r"plugin_mod is installed but could not register.*plugin is broken"
        rf".*{autoload.DISABLE_ENV}=1",
    ):
        import tgt_pkg
    assert tgt_pkg.DONE


@pytest.mark.filterwarnings("error")
def test_failed_target_import_leaves_hook_armed(fake_packages, monkeypatch):
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    fake_packages(
        {
            "tgt_pkg/__init__.py": "raise ImportError('no torch here')\n",
            "plugin_mod.py": "raise AssertionError('must not run')\n",
        }
    )
    autoload.install("tgt_pkg", "plugin_mod")
    with pytest.raises(ImportError, match="no torch here"):
        import tgt_pkg  # noqa: F401
    assert autoload.installed_hook("tgt_pkg") is not None and "plugin_mod" not in sys.modules


@pytest.mark.filterwarnings("error")
def test_install_after_target_imports_plugin_at_once(fake_packages, monkeypatch):
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    fake_packages({**TARGET_PKG, "plugin_mod.py": "import tgt_pkg\n"})
    import tgt_pkg  # noqa: F401

    autoload.install("tgt_pkg", "plugin_mod")
    assert "plugin_mod" in sys.modules and autoload.installed_hook("tgt_pkg") is None


@pytest.mark.parametrize("value, disabled", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_opt_out_variable(fake_packages, monkeypatch, value, disabled):
    monkeypatch.setenv(autoload.DISABLE_ENV, value)
    fake_packages(TARGET_PKG)
    autoload.install("tgt_pkg", "plugin_mod")
    assert autoload.disabled() is disabled
    assert (autoload.installed_hook("tgt_pkg") is None) is disabled


# ---------------------------------------------------------------- fresh environments (tests/packaging/conftest.py)


def test_wheel_carries_the_pth_at_its_root(built_wheel):
    with zipfile.ZipFile(built_wheel) as wheel:
        names = wheel.namelist()
        record = wheel.read(next(n for n in names if n.endswith(".dist-info/RECORD"))).decode()
        pth = wheel.read(PTH_NAME).decode()
    assert "timm_vitscratch_autoload.py" in names and "timm_vitscratch/models/variants.py" in names
    assert f"\n{PTH_NAME},sha256=" in f"\n{record}"  # pip uninstall removes it
    assert pth.startswith("import ") and pth.count("\n") == 1  # one line that `site` executes
    assert autoload.DISABLE_ENV in pth and "__import__('timm_vitscratch_autoload').install()" in pth


BARE_IMPORT = """
import json, sys, warnings
assert "timm_vitscratch" not in sys.modules
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import timm
    model = timm.create_model("scratch_vit_ti16")
    import timm_vitscratch  # explicit import after the automatic one: a no-op
print(json.dumps({
    "plugin_file": timm_vitscratch.__file__,
    "model_class": type(model).__module__ + "." + type(model).__name__,
    "scratch_models": len(timm.list_models("scratch_*")),
    "warnings": [str(w.message) for w in caught],
    "meta_path": [type(f).__name__ for f in sys.meta_path],
    "timm_loader": type(timm.__loader__).__name__,
}))
"""


def _check_bare_import(report: dict) -> None:
    assert report["model_class"] == "timm_vitscratch.models.vision_transformer.VisionTransformer"
    assert report["scratch_models"] == SCRATCH_COUNT
    assert not [w for w in report["warnings"] if "Overwriting" in w or "timm_vitscratch" in w], report["warnings"]
    assert "PostImportHook" not in report["meta_path"]  # it removed itself
    assert report["timm_loader"] == "SourceFileLoader"


def test_regular_install_bare_import_timm_sees_models(wheel_venv, tmp_path):
    report = json.loads(run_python(wheel_venv, BARE_IMPORT, tmp_path))
    _check_bare_import(report)
    assert Path(report["plugin_file"]).is_relative_to(site_packages(wheel_venv.parents[1]))  # the wheel's copy


def test_editable_install_bare_import_timm_sees_models(editable_venv, tmp_path):
    report = json.loads(run_python(editable_venv, BARE_IMPORT, tmp_path))
    _check_bare_import(report)
    assert Path(report["plugin_file"]).is_relative_to(editable_venv.parents[2] / "src")  # the source tree


@pytest.mark.parametrize("venv", ["wheel_venv", "editable_venv"])
def test_startup_imports_neither_torch_nor_timm(venv, request, tmp_path):
    python = request.getfixturevalue(venv)
    result = subprocess.run(
        [str(python), "-X", "importtime", "-c", "pass"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        check=True,
    )
    # "import time: self [us] | cumulative | name": our module must be there, importing nothing itself
    rows = {
        cols[2].strip(): (cols[0].split(":")[1].strip(), cols[1].strip())
        for cols in (line.split("|") for line in result.stderr.splitlines() if line.startswith("import time:"))
    }
    self_us, cumulative_us = rows["timm_vitscratch_autoload"]  # the .pth ran
    assert self_us == cumulative_us
    assert not {"torch", "timm", "timm_vitscratch"} & set(rows)
    out = run_python(
        python, "import sys; print(*sorted(sys.modules)); print(*[type(f).__name__ for f in sys.meta_path])", tmp_path
    )
    modules, finders = (line.split() for line in out.splitlines())
    assert not [m for m in modules if m.split(".")[0] in ("torch", "timm", "timm_vitscratch")]
    assert finders[0] == "PostImportHook"  # armed for the first `import timm`


def test_explicit_import_first_registers_once(wheel_venv, tmp_path):
    out = run_python(
        wheel_venv,
        """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import timm_vitscratch  # reaches `import timm`, which fires the hook inside our own import
    import timm
print(json.dumps({"n": len(timm.list_models("scratch_*")), "warnings": [str(w.message) for w in caught],
                  "meta_path": [type(f).__name__ for f in sys.meta_path]}))
""",
        tmp_path,
    )
    report = json.loads(out)
    assert report["n"] == SCRATCH_COUNT
    assert not [w for w in report["warnings"] if "Overwriting" in w or "timm_vitscratch" in w], report["warnings"]
    assert "PostImportHook" not in report["meta_path"]


def test_opt_out_hides_models_until_explicit_import(wheel_venv, tmp_path):
    out = run_python(
        wheel_venv,
        """
import json, sys
hooked = [type(f).__name__ for f in sys.meta_path]
hook_module_loaded = "timm_vitscratch_autoload" in sys.modules
import timm
bare = timm.list_models("scratch_*")
auto_imported = "timm_vitscratch" in sys.modules
import timm_vitscratch
print(json.dumps({"hooked": hooked, "hook_module_loaded": hook_module_loaded, "bare": bare, "auto_imported": auto_imported,
                  "explicit": len(timm.list_models("scratch_*"))}))
""",
        tmp_path,
        **{autoload.DISABLE_ENV: "1"},
    )
    report = json.loads(out)
    assert "PostImportHook" not in report["hooked"] and report["hook_module_loaded"] is False
    assert report["bare"] == [] and report["auto_imported"] is False
    assert report["explicit"] == SCRATCH_COUNT


def _hub_cache_with(model: torch.nn.Module, cache: Path, repo_id: str) -> None:
    """Put a model directory (our format) into a Hugging Face cache as the Hub client lays it out."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    save_file(model.state_dict(), str(snapshot / WEIGHTS_NAME))
    write_config(snapshot, model_config(model, weights_sha256=sha256_file(snapshot / WEIGHTS_NAME)))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def test_hf_hub_model_loads_in_a_process_that_never_imports_us(wheel_venv, tmp_path):
    model = tiny("scratch_vit_ti16", num_classes=7).eval()
    _hub_cache_with(model, tmp_path / "hf" / "hub", "someone/scratch-tiny")
    x = torch.randn(2, 3, 32, 32)
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    run_python(
        wheel_venv,
        """
import sys, torch
from safetensors.torch import load_file, save_file
torch.set_num_threads(1)
import timm
model = timm.create_model("hf-hub:someone/scratch-tiny", pretrained=True).eval()
assert "timm_vitscratch" in type(model).__module__, type(model)
with torch.no_grad():
    save_file({"logits": model(load_file("x.safetensors")["x"])}, "logits.safetensors")
""",
        tmp_path,
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_CACHE=str(tmp_path / "hf" / "hub"),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            expected = model(x)
    finally:
        torch.set_num_threads(threads)
    logits = load_file(str(tmp_path / "logits.safetensors"))["logits"]
    assert logits.shape == (2, 7)
    assert torch.equal(logits, expected)
