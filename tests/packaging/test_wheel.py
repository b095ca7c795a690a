"""The wheel holds what users import: the zoo, conversion, the Hub client, inspection and the CLI.

Test machinery (the local Hub-protocol server, fault injection) and the examples stay in the
repository; the installed ``vitscratch`` offers only user commands.
"""

import ast
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.convert.test_license_files import LICENSE_SHA256
from tests.support.environments import PROJECT, env, run_python, site_packages

pytestmark = pytest.mark.slow  # builds the wheel and a venv

USER_COMMANDS = {"list", "summary", "attention", "convert", "export", "push", "pull", "export-checkpoint", "train"}
TEST_MACHINERY = (
    "ThreadingHTTPServer",
    "BaseHTTPRequestHandler",
    "http.server",
    "Fault",
    "local_hub",
    "local Hub",
    "local test",
    "tests.support",
    "examples.",
)


def _python_sources(wheel_path):
    with zipfile.ZipFile(wheel_path) as wheel:
        return {name: wheel.read(name).decode() for name in wheel.namelist() if name.endswith(".py")}


def test_wheel_has_the_user_packages_and_nothing_else(built_wheel):
    packages = {name.rsplit("/", 1)[0] for name in _python_sources(built_wheel) if "/" in name}
    assert packages == {
        "timm_vitscratch",
        "timm_vitscratch/gate",
        "timm_vitscratch/layouts",
        "timm_vitscratch/models",
        "timm_vitscratch/convert",
        "timm_vitscratch/hub",
        "timm_vitscratch/inspect",
        "timm_vitscratch/train",
    }


def test_no_server_or_fault_injection_code_and_no_message_about_test_machinery(built_wheel):
    for name, source in _python_sources(built_wheel).items():
        ast.parse(source)  # every shipped module is valid Python
        found = [marker for marker in TEST_MACHINERY if marker in source]
        assert not found, f"{name} mentions test machinery: {found}"


def test_the_wheel_ships_the_license_texts_and_the_installed_package_reads_them(built_wheel, wheel_venv, tmp_path):
    """Weights under the DINOv3 License carry its text: the installed package must hold it, byte for byte."""
    texts = sorted((PROJECT / "timm_vitscratch" / "license_texts").glob("*.md"))
    assert [t.name for t in texts] == ["dinov3-license.md", "fair-noncommercial-research-license.md"]
    with zipfile.ZipFile(built_wheel) as wheel:
        for text in texts:
            assert wheel.read(f"timm_vitscratch/license_texts/{text.name}") == text.read_bytes()
    code = (
        "import hashlib, json, timm_vitscratch\n"
        "from timm_vitscratch.licenses import TRAVELLING\n"
        "print(json.dumps({'package': timm_vitscratch.__file__, "
        "'sha256': {k: hashlib.sha256(v.read()).hexdigest() for k, v in TRAVELLING.items()}}))"
    )
    report = json.loads(run_python(wheel_venv, code, tmp_path))
    assert Path(report["package"]).is_relative_to(site_packages(wheel_venv.parents[1]))  # the wheel's copy
    assert report["sha256"] == LICENSE_SHA256


def test_installed_cli_lists_only_user_commands(wheel_venv, tmp_path):
    script = wheel_venv.parent / "vitscratch"
    result = subprocess.run([str(script), "--help"], cwd=tmp_path, env=env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(listed) == USER_COMMANDS
    # the installed script parses without torch or timm: -X importtime lists every module it imported
    timed = subprocess.run(
        [str(wheel_venv), "-X", "importtime", str(script), "convert", "--help"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
    )
    imported = {line.split("|")[-1].strip() for line in timed.stderr.splitlines() if line.startswith("import time:")}
    assert timed.returncode == 0 and "timm_vitscratch_cli" in imported
    assert not imported & {"torch", "timm", "timm_vitscratch"}, sorted(imported & {"torch", "timm", "timm_vitscratch"})


def test_wheel_requires_what_the_package_imports_and_offers_the_extras(built_wheel: Path) -> None:
    """The wheel's metadata states pyproject.toml's dependencies and extras (tests/packaging/test_dependencies.py
    checks those against the imports): no plotting, YAML or progress-bar library among the runtime ones."""
    from tests.packaging.test_dependencies import _names, _project

    with zipfile.ZipFile(built_wheel) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        lines = wheel.read(name).decode().splitlines()
    requires = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    runtime = _names([r for r in requires if "extra ==" not in r])
    assert runtime == _names(_project()["dependencies"])
    assert not runtime & {"matplotlib", "pillow", "pyyaml", "tqdm"}
    extras = {line.split(":", 1)[1].strip() for line in lines if line.startswith("Provides-Extra:")}
    assert extras == {"plots", "transformers", "examples", "dev"}
