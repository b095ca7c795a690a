"""The end-of-run report adds up what several xdist workers counted, and prints each section once."""

import collections

from tests.support import session_report


class Reporter:
    def __init__(self):
        self.lines = []

    def section(self, title):
        self.lines.append(f"== {title}")

    def write_line(self, line):
        self.lines.append(line)


def test_parts_from_two_workers_add_up(monkeypatch):
    monkeypatch.setitem(session_report.MERGED, "fuzz", collections.defaultdict(collections.Counter))
    monkeypatch.setitem(session_report.MERGED, "sections", [])
    session_report.merge({"fuzz": {"npz": {"error": 3, "ok": 1}}, "sections": [["timm tests (9 s)", "| table |"]]})
    session_report.merge({"fuzz": {"npz": {"error": 2}, "pull": {"error": 8}}, "sections": []})
    reporter = Reporter()
    session_report.write(reporter)
    assert reporter.lines == [
        "== timm tests (9 s)",
        "| table |",
        "== fuzz cases run",
        "npz: 6 (5 error, 1 ok)",
        "pull: 8 (8 error)",
        "total: 14",
    ]


def test_this_process_hands_over_plain_data(monkeypatch):
    from tests.support import fuzzing
    from tests.timm_suite import timm_tests

    monkeypatch.setattr(fuzzing, "CASES", collections.defaultdict(collections.Counter, {"npz": {"ok": 2}}))
    monkeypatch.setattr(timm_tests, "LAST_RUN", {"section": ("title", "table")})
    assert session_report.own_parts() == {"fuzz": {"npz": {"ok": 2}}, "sections": [["title", "table"]]}
