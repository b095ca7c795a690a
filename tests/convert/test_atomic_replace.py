"""Replacing an output in one step (timm_vitscratch/atomic_replace.py): staging names, recovery that touches only
its own target's staging and only what no living process holds, and writers that notice each other."""

import os
import re
import signal
import time

import pytest

from tests.support.child_writers import run_in_child
from timm_vitscratch import atomic_replace
from timm_vitscratch.atomic_replace import ConcurrentWriteError, identity, install, staged, staging_name, starting_point
from timm_vitscratch.files import atomic_write


def test_staging_names_are_per_process_and_new_each_time(tmp_path):
    names = {staging_name(tmp_path / "a").name for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(f".a.{os.getpid()}-") and n.endswith(".tmp") for n in names)


def test_recovering_one_target_leaves_a_siblings_set_aside_model_alone(tmp_path):
    """Probe f7: a pull into ``a`` recovering must not delete what an interrupted pull into ``a.b`` set aside."""
    siblings = [
        tmp_path / ".a.b.x1y2.old",
        staging_name(tmp_path / "a.b", "old"),
        staging_name(tmp_path / "a.b", "tmp"),
        staging_name(tmp_path / "a.1-deadbeef.tmp", "tmp"),
        tmp_path / ".a.tmp",
    ]
    for path in siblings:
        path.mkdir()
        (path / "model.safetensors").write_text("a.b's previous model")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("{}")
    stale = staging_name(tmp_path / "a", "tmp")  # a's own, left by a killed writer
    stale.mkdir()
    starting_point(tmp_path / "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a"] + [p.name for p in siblings])
    assert all((p / "model.safetensors").read_text() == "a.b's previous model" for p in siblings)


def test_recovery_puts_a_set_aside_model_back_only_when_the_target_is_missing(tmp_path):
    target = tmp_path / "out"
    aside = staging_name(target, "old")
    aside.mkdir()
    (aside / "config.json").write_text("old")
    starting_point(target)
    assert (target / "config.json").read_text() == "old" and not aside.exists()
    aside = staging_name(target, "old")
    aside.mkdir()
    starting_point(target)
    assert not aside.exists() and (target / "config.json").read_text() == "old"


def hold_in_child(target, kind):
    """A child process that stages ``target`` (a directory or a file) and sleeps; returns (pid, staging path)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            with staged(target, directory=kind == "directory") as path:
                os.write(write_end, str(path).encode())
                time.sleep(120)
        finally:
            os._exit(0)
    os.close(write_end)
    path = os.read(read_end, 4096).decode()
    os.close(read_end)
    return pid, path


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_recovery_never_removes_a_living_writers_staging_and_removes_it_once_the_writer_is_killed(kind, tmp_path):
    target = tmp_path / "out"
    pid, path = hold_in_child(target, kind)
    try:
        starting_point(target)
        with staged(target, directory=kind == "directory"):
            pass  # another writer of the same target starts and ends
        assert os.path.exists(path), "a living writer's staging was removed"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    starting_point(target)
    assert not os.path.exists(path) and list(tmp_path.iterdir()) == []


def test_atomic_write_refuses_to_replace_what_another_writer_wrote_meanwhile(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(
        ConcurrentWriteError, match=re.escape("out.bin was written by another process while this one ran")
    ):
        with atomic_write(target) as first:
            first.write(b"first")
            with atomic_write(target) as second:  # a second writer starts after the first and ends before it
                second.write(b"second")
    assert target.read_bytes() == b"second" and os.listdir(tmp_path) == ["out.bin"]
    with atomic_write(target) as first:  # the same bytes: nothing to refuse
        first.write(b"same")
        with atomic_write(target) as second:
            second.write(b"same")
    assert target.read_bytes() == b"same" and os.listdir(tmp_path) == ["out.bin"]


def test_install_directory_keeps_the_other_writers_result_and_the_users_files(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "config.json").write_text("old")
    (target / "notes").mkdir()
    (target / "notes" / "a.txt").write_text("mine")
    os.symlink("notes/a.txt", target / "link")
    started = starting_point(target)
    with staged(target, directory=True) as stage:
        (stage / "config.json").write_text("new")
        assert install(stage, target, started, keep_other_files=True)
    assert (target / "config.json").read_text() == "new" and (target / "notes" / "a.txt").read_text() == "mine"
    assert os.readlink(target / "link") == "notes/a.txt" and os.listdir(tmp_path) == ["out"]
    with staged(target, directory=True) as stage:  # started before the install above: it lost the race
        (stage / "config.json").write_text("third")
        with pytest.raises(ConcurrentWriteError, match="written by another process"):
            install(stage, target, started)
        (stage / "config.json").write_text("new")
        assert not install(stage, target, started)  # the other installed the same: nothing to do
    assert (target / "config.json").read_text() == "new" and os.listdir(tmp_path) == ["out"]


def test_the_exchange_is_one_atomic_step_here(tmp_path):
    """Linux (where CI runs) has renameat2: the two-rename path is the exception, tested by the kill tests."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ids = identity(a), identity(b)
    assert atomic_replace.rename_exchange(a, b)
    assert (identity(b), identity(a)) == ids


@pytest.mark.parametrize("umask", [0o027, 0o002])
def test_outputs_get_the_modes_the_umask_gives_and_the_umask_is_never_changed(umask, tmp_path):
    """Files and directories are created so that the OS applies the umask (as ``open`` and ``mkdir`` do): the
    process umask is never set to read it, which would race with other threads. Run in a child, whose umask
    is its own."""

    def write_with_umask_fixed():
        os.umask(umask)

        def changed(mask):
            raise AssertionError(f"the umask was set to {mask:o} during a write")

        os.umask = changed
        with atomic_write(tmp_path / "file.bin") as handle:
            handle.write(b"x")
        target = tmp_path / "dir"
        started = starting_point(target)
        with staged(target, directory=True) as stage:
            with atomic_write(stage / "config.json", "w") as handle:
                handle.write("{}")
            install(stage, target, started)
        modes = [os.stat(p).st_mode & 0o777 for p in (tmp_path / "file.bin", target, target / "config.json")]
        return " ".join(f"{m:o}" for m in modes)

    code, output = run_in_child(write_with_umask_fixed)
    assert code == 0, output
    assert output.split() == [f"{0o666 & ~umask:o}", f"{0o777 & ~umask:o}", f"{0o666 & ~umask:o}"]
