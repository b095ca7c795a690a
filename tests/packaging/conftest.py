"""Fixtures: the wheel built from this tree, a venv it is installed into, and an editable install."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.environments import copy_project, env, expose_this_environment, new_venv


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = copy_project(work / "src")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--wheel-dir",
            str(work / "dist"),
            str(source),
        ],
        check=True,
        cwd=work,
    )
    return next((work / "dist").glob("timm_vitscratch-*.whl"))


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory, built_wheel) -> Path:
    """A venv where the wheel was installed by pip, before anything else was visible to it."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    python = new_venv(venv)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(built_wheel),
        ],
        check=True,
    )
    expose_this_environment(venv)
    return python


@pytest.fixture(scope="session")
def editable_venv(tmp_path_factory) -> Path:
    """A venv with ``pip install -e`` of a copy of the tree (pip refuses to touch this environment)."""
    work = tmp_path_factory.mktemp("editable")
    source = copy_project(work / "src")
    venv = work / "venv"
    python = new_venv(venv)
    expose_this_environment(venv)  # pip and setuptools run inside the new venv
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-e",
            str(source),
        ],
        check=True,
        cwd=work,
        env=env(),
    )
    return python
