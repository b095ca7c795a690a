"""Concurrent writers of one target end with one complete result and a clear error for the other.

Two processes write the same target: two converts, a convert and a pull, or two pulls into one directory;
two exports to one file. Each is held just before its install until both are there, so the two truly overlap,
then released one after the other or both at once. Every combination runs (writer pair x the same or different
content x no target or an old one there x the order of release; 30 cases): afterwards the target is one writer's result,
whole; the other writer either found the same files installed (and ended quietly) or ended with "... was written
by another process while this one ran"; nothing is left beside the target. conftest prints the case count.
"""

import itertools
import os
import select
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.support import time_limits, tiny
from tests.support.fuzz_plan import PLAN
from tests.support.fuzzing import CASES
from tests.support.hub_fixtures import model_dir, repo_for
from timm_vitscratch import files, hub
from timm_vitscratch.convert import convert, converter, export
from timm_vitscratch.hub import client

pytestmark = pytest.mark.slow  # concurrent writer processes

PAIRS = [("convert", "convert"), ("convert", "pull"), ("pull", "pull"), ("export", "export")]
ORDERS = ["first A", "first B", "together"]
CONCURRENT = "was written by another process while this one ran"


class Writer:
    """A forked child that prepares its write, waits at the install for the go, installs and reports."""

    def __init__(self, kind, write):
        self.go_read, self.go_write = os.pipe()
        self.report_read, report_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 3
            try:
                os.close(self.go_write)
                os.close(self.report_read)
                torch.set_num_threads(1)
                module, name = {
                    "convert": (converter, "install"),
                    "pull": (client, "install"),
                    "export": (files, "install"),
                }[kind]
                install = getattr(module, name)

                def held_at_the_install(staged, target, *args, **kwargs):
                    # the write's own target: a licence file an export puts beside it installs unheld
                    if not Path(target).name.endswith(".LICENSE.md"):
                        os.write(report_write, b"ready\n")
                        os.read(self.go_read, 1)
                    return install(staged, target, *args, **kwargs)

                setattr(module, name, held_at_the_install)
                try:
                    write()
                    os.write(report_write, b"ok\n")
                except (ValueError, OSError) as err:
                    os.write(report_write, f"error: {err}\n".encode())
                code = 0
            finally:
                os._exit(code)
        os.close(self.go_read)
        os.close(report_write)
        self.lines = []

    def wait_for(self, what, timeout=120):
        while len(self.lines) < (1 if what == "ready" else 2):
            ready, _, _ = select.select([self.report_read], [], [], timeout)
            chunk = os.read(self.report_read, 4096).decode() if ready else ""
            assert chunk, f"writer {self.pid} said nothing (lines so far: {self.lines})"
            self.lines += chunk.splitlines()
        return self.lines[-1]

    def release(self):
        os.write(self.go_write, b"g")

    def finish(self):
        result = self.wait_for("result")
        self.close()
        return result

    def close(self):
        """Reap the child (killed if it is still there) and close the pipes; returns its exit code."""
        if self.pid is None:
            return
        if len(self.lines) < 2:
            os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + time_limits.limit(12)[0]  # a child that said its result then hangs
        while (found := os.waitpid(self.pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if found[0] == 0:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            raise AssertionError(f"writer {self.pid} did not exit after its result (lines: {self.lines})")
        status = found[1]
        self.pid = None
        os.close(self.go_write)
        os.close(self.report_read)
        assert os.waitstatus_to_exitcode(status) == 0, self.lines


def snapshot(path):
    if path.is_dir():
        return {p.name: p.read_bytes() for p in path.iterdir()}
    return path.read_bytes() if path.exists() else None


@pytest.fixture
def sources(hub_env, tmp_path, request):
    """Two models as converts, pulls and exports write them, and what each writer leaves at the target."""
    made = {}
    for index, seed in enumerate((1, 2)):
        torch.manual_seed(seed)
        model = tiny()
        weights = tmp_path / f"weights-{index}.safetensors"
        save_file(model.state_dict(), str(weights))
        directory = model_dir(tmp_path / f"model-{index}", model)
        repo = repo_for(request, f"-{index}")
        hub.push(directory, repo)
        made[index] = {"convert": weights, "pull": repo, "export": directory}
    return made


def write(kind, source, target):
    if kind == "convert":
        return lambda: convert(source, target)
    if kind == "pull":
        return lambda: hub.pull(source, target, force=True)
    return lambda: export(source, "timm", target)


def test_two_writers_of_one_target_end_with_one_result_and_a_clear_error(sources, tmp_path):
    work = tmp_path / "work"
    expected = {}  # (kind, content) -> what that writer alone leaves at the target
    for kind, index in itertools.product(("convert", "pull", "export"), (0, 1)):
        target = tmp_path / "alone" / f"{kind}-{index}" / ("out.safetensors" if kind == "export" else "out")
        target.parent.mkdir(parents=True)
        write(kind, sources[index][kind], target)()
        expected[kind, index] = snapshot(target)
    cases = [
        (pair, same, existing, order)
        for pair, same, existing, order in itertools.product(PAIRS, (True, False), (False, True), ORDERS)
        if not (same and pair[0] != pair[1])  # a convert and a pull never write the same files
        and not (order == "first B" and pair[0] == pair[1])
    ]  # the same as "first A" for two of a kind
    name = "concurrent writers of one target (convert, pull, export)"
    CASES[name].clear()
    for (kind_a, kind_b), same, existing, order in cases:
        case = (
            f"{kind_a} + {kind_b}, {'same' if same else 'different'} content, "
            f"{'over an old one' if existing else 'new target'}, {order}"
        )
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        target = work / ("out.safetensors" if kind_a == "export" else "out")
        if existing and kind_a == "export":
            target.write_bytes(b"an old export")
        elif existing:
            convert(sources[1]["convert"], target)
            (target / "old-notes.txt").write_text("old")
        contents = (0, 0) if same else (0, 1)
        writers = [
            Writer(kind, write(kind, sources[index][kind], target))
            for kind, index in zip((kind_a, kind_b), contents, strict=False)
        ]
        try:
            for writer in writers:
                assert writer.wait_for("ready") == "ready", (case, writer.lines)
            if order == "together":
                for writer in writers:
                    writer.release()
                results = [writer.finish() for writer in writers]
            else:
                first, second = writers if order == "first A" else writers[::-1]
                first.release()
                results = [first.finish()]
                second.release()
                results.append(second.finish())
                if order == "first B":
                    results.reverse()
        finally:
            for writer in writers:
                writer.close()
        winners = [i for i, result in enumerate(results) if result == "ok"]
        assert winners, (case, results)
        if same:
            assert results == ["ok", "ok"], (case, results)
        else:
            assert len(winners) == 1, (case, results)
            loser = results[1 - winners[0]]
            assert loser.startswith("error: ") and f"{target} {CONCURRENT}" in loser, (case, loser)
        if order != "together" and not same:
            assert winners[0] == (0 if order == "first A" else 1), (case, results)
        winner = winners[0]
        result = snapshot(target)
        wanted = (
            dict(expected[(kind_a, kind_b)[winner], contents[winner]])
            if target.is_dir()
            else expected[(kind_a, kind_b)[winner], contents[winner]]
        )
        if existing and kind_a == "convert" and (kind_a, kind_b)[winner] == "convert":
            wanted["old-notes.txt"] = b"old"  # a convert keeps the other files of the directory it replaces
        assert result == wanted, case
        # an export puts its weights' licence beside the file it writes (one SPDX line here): nothing else
        beside = [f"{target.name}.LICENSE.md"] if kind_a == "export" else []
        assert sorted(p.name for p in work.iterdir()) == sorted([target.name, *beside]), (
            case,
            "left beside the target",
        )
        CASES[name]["both installed the same" if same else "one installed, one refused"] += 1
    assert sum(CASES[name].values()) == len(cases) == PLAN[name]
