"""Fresh virtual environments for packaging tests: the project as users install it, torch and timm borrowed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import timm_vitscratch_autoload as autoload

PROJECT = Path(__file__).resolve().parents[2]


def copy_project(dest: Path) -> Path:
    """The project's sources without build outputs, virtual environments or VCS data."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {
            name
            for name in names
            if name.startswith(".")
            or name in {"build", "dist", "__pycache__"}
            or name.endswith(".egg-info")
            or Path(directory, name, "pyvenv.cfg").exists()
        }
        return skipped

    shutil.copytree(PROJECT, dest, ignore=ignore)
    return dest


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def new_venv(path: Path) -> Path:
    """An empty venv (no pip, no setuptools); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def expose_this_environment(venv: Path) -> None:
    """Path-only .pth: torch, timm, pip... of this environment become importable in ``venv``.

    Path lines only extend sys.path: the .pth files in those dirs (including this environment's
    own install of the plugin) are not run, and the venv's own site-packages comes first.
    """
    dirs = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    (site_packages(venv) / "_deps_from_test_env.pth").write_text("\n".join(dirs) + "\n")


def env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", autoload.DISABLE_ENV)}
    env.update(extra)
    return env


def run_python(python: Path, code: str, cwd: Path, **extra_env: str) -> str:
    """Run ``code`` in a fresh process (cwd outside the project, so the tree itself is not on sys.path)."""
    result = subprocess.run([str(python), "-c", code], cwd=cwd, env=env(**extra_env), capture_output=True, text=True)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout
