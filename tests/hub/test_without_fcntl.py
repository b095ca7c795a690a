"""The writers need no ``fcntl`` (Windows has none): convert, a convert that replaces a model, push, pull and a
pull that replaces a model run in a process where ``import fcntl`` fails. Their locks go through filelock, which
then has no lock to take on this system; the writers go on unserialised, as docs/guarantees.md says."""

import sys

import pytest
from safetensors.torch import save_file

from tests.support import time_limits, tiny
from tests.support.hub_fixtures import repo_for
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import check_model_directory

pytestmark = pytest.mark.slow  # convert, push and pull in a process without fcntl

WITHOUT_FCNTL = """
import sys

sys.modules["fcntl"] = None  # `import fcntl` now raises ImportError, in every module
from timm_vitscratch.cli import main

source, model, out, repo = sys.argv[1:]
for argv in (["convert", source, model], ["convert", source, model], ["push", model, repo, "--license", "apache-2.0"], ["pull", repo, out],
             ["pull", "--force", repo, out]):
    if main(argv) != 0:
        sys.exit(f"vitscratch {' '.join(argv)} failed")
assert sys.modules["fcntl"] is None
"""


def test_convert_push_and_pull_run_where_fcntl_cannot_be_imported(hub_env, tmp_path, request):
    source = tmp_path / "vit.safetensors"
    save_file(tiny().state_dict(), str(source))
    model, out = tmp_path / "model", tmp_path / "out"
    argv = [str(source), str(model), str(out), repo_for(request)]
    result = time_limits.run(
        [sys.executable, "-c", WITHOUT_FCNTL, *argv], env=hub_env, capture_output=True, text=True, quiet_seconds=60
    )
    assert result.returncode == 0, result.stderr
    check_model_directory(out, require_sha256=True)
    assert sha256_file(out / "model.safetensors") == sha256_file(model / "model.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf-home", "model", "out", "vit.safetensors"]
