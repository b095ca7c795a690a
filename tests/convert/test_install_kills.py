"""A writer SIGKILLed at any step of its install leaves the old model or the new one, whole, and the next run
cleans up.

``convert`` (with the atomic exchange, and with the two renames used where the system has none), ``pull`` and
``export`` run in a forked child that is killed before each step that changes the file system, and midway
through removing the previous copy (tests.support.child_writers.py). After each kill the target passes the
model-directory check with the old or the new sha256 (a user's README.md kept), or, between the two renames,
is missing until recovery puts the old model back; the next run installs the new model and leaves nothing
beside it. conftest prints the kills per outcome; ``pytest -s`` prints the step table.
"""

import shutil

import pytest
import torch
from safetensors.torch import save_file

from tests.support import tiny
from tests.support.child_writers import run_killed_at
from tests.support.fuzzing import CASES
from tests.support.hub_fixtures import model_dir, repo_for
from timm_vitscratch import atomic_replace, hub
from timm_vitscratch.convert import convert, export
from timm_vitscratch.files import sha256_file
from timm_vitscratch.model_dir import check_model_directory

pytestmark = pytest.mark.slow  # writers killed at every install step

NOTES = "my notes on this model\n"


def weights_file(path, seed):
    torch.manual_seed(seed)
    save_file(tiny().state_dict(), str(path))
    return path


def state_of(out, old, new, notes=True):
    """ "old" or "new" when ``out`` is that model, whole; "missing" when there is nothing at ``out``."""
    if not out.exists():
        return "missing"
    if out.is_dir():
        check_model_directory(out)
        if notes:
            assert (out / "README.md").read_text() == NOTES
        sha256 = sha256_file(out / "model.safetensors")
    else:
        sha256 = sha256_file(out)
    assert sha256 in (old, new)
    return "old" if sha256 == old else "new"


def kill_at_every_step(name, out, reset, action, check, next_run, exchange=True):
    """Kill ``action``, which writes ``out``, before each of its steps (and midway through each rmtree);
    returns the table rows (step, what was killed, the outcome)."""
    work = out.parent
    reset()
    reference = run_killed_at(work, action, exchange=exchange)
    assert reference.exit_code == 0, reference
    assert check() == "new"
    steps = reference.steps
    rows = []
    for k, step in enumerate(steps, 1):
        for midway in [False, True] if step.startswith("rmtree") else [False]:
            reset()
            run = run_killed_at(work, action, step=k, midway=midway, exchange=exchange)
            assert run.killed and run.steps == steps[:k], run
            state = check()
            if state == "missing":  # between the two renames: the old model waits beside it, whole
                assert not exchange
                atomic_replace.starting_point(out)
                assert check() == "old"
                state = "missing, put back by recovery: old"
            next_run()
            assert check() == "new"
            assert [p.name for p in work.iterdir()] == [out.name], "the next run left something beside OUT"
            rows.append((k, ("midway through " if midway else "before ") + step, state))
            CASES[f"install kills: {name}"][state.split(": ")[-1] + " model"] += 1
    print(f"\n{name}: {len(steps)} steps")
    for k, step, state in rows:
        print(f"  {k}  {step:70s} {state}")
    return rows


@pytest.fixture
def two_sources(tmp_path):
    return weights_file(tmp_path / "old.safetensors", 1), weights_file(tmp_path / "new.safetensors", 2)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_convert_killed_at_every_step_of_its_install(exchange, two_sources, tmp_path):
    old_src, new_src = two_sources
    work = tmp_path / "work"
    out = work / "out"
    convert(new_src, tmp_path / "new-dir")
    new = sha256_file(tmp_path / "new-dir" / "model.safetensors")
    shutil.rmtree(tmp_path / "new-dir")

    def reset():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        convert(old_src, out)
        (out / "README.md").write_text(NOTES)

    reset()
    old = sha256_file(out / "model.safetensors")
    rows = kill_at_every_step(
        f"convert ({'exchange' if exchange else 'two renames'})",
        out,
        reset,
        lambda: convert(new_src, out),
        lambda: state_of(out, old, new),
        lambda: convert(new_src, out),
        exchange=exchange,
    )
    swap = [state for _, step, state in rows if "rename_exchange" in step or step.endswith("-> out")]
    assert swap and all(state.endswith("old") for state in swap)  # before the swap: the old model
    assert rows[-1][2] == "new"  # removing the old copy, even killed midway: the new model


def test_export_killed_at_every_step_of_its_install(two_sources, tmp_path):
    old_src, new_src = two_sources
    model = tmp_path / "model"
    convert(new_src, model)
    work = tmp_path / "work"
    out = work / "out.safetensors"
    export(model, "timm", tmp_path / "new.safetensors")
    new = sha256_file(tmp_path / "new.safetensors")

    def reset():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        shutil.copyfile(old_src, out)

    rows = kill_at_every_step(
        "export",
        out,
        reset,
        lambda: export(model, "timm", out),
        lambda: state_of(out, sha256_file(old_src), new),
        lambda: export(model, "timm", out),
    )
    assert [state for _, _, state in rows] == ["old"]


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_pull_killed_at_every_step_of_its_install(exchange, hub_env, tmp_path, request):
    repo = repo_for(request)
    torch.manual_seed(11)
    hub.push(model_dir(tmp_path / "v1", tiny()), repo)
    first = hub.pull(repo, tmp_path / "first")
    torch.manual_seed(12)
    hub.push(model_dir(tmp_path / "v2", tiny()), repo)
    old, new = sha256_file(first / "model.safetensors"), sha256_file(tmp_path / "v2" / "model.safetensors")
    work = tmp_path / "work"
    out = work / "out"

    def reset():
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        shutil.copytree(first, out)

    rows = kill_at_every_step(
        f"pull ({'exchange' if exchange else 'two renames'})",
        out,
        reset,
        lambda: hub.pull(repo, out, force=True),
        lambda: state_of(out, old, new, notes=False),
        lambda: hub.pull(repo, out, force=True),
        exchange=exchange,
    )
    assert rows[-1][2] == "new"
