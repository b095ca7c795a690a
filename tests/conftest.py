import os

import pytest
import torch

from tests.support import session_report, sweep

pytest_plugins = ["tests.support.hub_fixtures"]

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # pytest-xdist workers share the cores: torch's default (a thread per core in each) would oversubscribe them
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


#: the test files that take longest, run first: pytest-xdist (``--dist loadfile``) hands whole files to the workers in
#: the order collected, so a long file collected last would leave one worker running it alone at the end
LONGEST_FIRST = (
    "tests/timm_suite/test_timm_model_tests.py",
    "tests/docs/test_doc_blocks.py",
    "tests/docs/test_doc_snippets.py",
    "tests/packaging/test_benchmark.py",
)


def pytest_report_header(config):
    """Which size of the suite this run is (tests/support/sweep.py)."""
    if sweep.FULL_SWEEP:
        return f"full sweep ({sweep.FULL_SWEEP_ENV}=1): every zoo row, fuzz case and timm-suite model"
    return (
        f"representative subset: {len(sweep.REPRESENTATIVE_ROWS)} zoo rows in the per-row sweeps, a quarter of the fuzz "
        f"cases; make test FULL=1 ({sweep.FULL_SWEEP_ENV}=1) runs the full sweep"
    )


def pytest_collection_modifyitems(items):
    """The files of :data:`LONGEST_FIRST` first, in that order; every other file after, as collected (a stable
    sort: the tests of one file keep their order)."""
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_sessionfinish(session):
    """Hand this process's end-of-run report to the controller (xdist worker), or keep it to print."""
    parts = session_report.own_parts()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["session_report"] = parts
    else:
        session_report.merge(parts)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: known only where pytest-xdist is installed
def pytest_testnodedown(node, error):
    parts = getattr(node, "workeroutput", {}).get("session_report")
    if parts:  # a worker that crashed before its session finished hands over nothing
        session_report.merge(parts)


def pytest_terminal_summary(terminalreporter):
    """timm's test table and how many fuzz cases ran (tests/support/fuzzing.py counts them), by loader and outcome."""
    session_report.write(terminalreporter)
