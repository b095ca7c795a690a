import os

import pytest
import torch

from tests.support import session_report

pytest_plugins = ["tests.support.hub_fixtures"]

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # pytest-xdist workers share the cores: torch's default (a thread per core in each) would oversubscribe them
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


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
