"""The order `make test` hands out test files in (tests/ordering.py): longest first, unknown first of all."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scripts.ci_timing import main

from tests.ordering import longest_first, read_durations


@dataclass(frozen=True)
class Item:
    nodeid: str


def ids(items: list[Item]) -> list[str]:
    return [item.nodeid for item in items]


def test_files_go_longest_first_and_each_keeps_its_tests_together_in_order():
    items = [Item(x) for x in ("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "d.py::t1")]
    durations = {"a.py": 5, "b.py": 300, "c.py": 40, "d.py": 40}
    assert ids(longest_first(items, durations)) == [
        "b.py::t1",
        "c.py::t1",
        "c.py::t2",
        "d.py::t1",  # as long as c.py: collected after it
        "a.py::t1",
        "a.py::t2",
    ]


def test_a_file_without_a_duration_goes_first_as_it_may_be_long():
    items = [Item("old.py::t"), Item("new.py::t")]
    assert ids(longest_first(items, {"old.py": 100})) == ["new.py::t", "old.py::t"]


def test_durations_come_from_a_junit_report_and_a_missing_or_bad_file_gives_none(tmp_path: Path):
    (tmp_path / "junit.xml").write_text(
        '<testsuite tests="2" time="9"><testcase classname="tests.e2e.test_a" name="x" time="6.4"/>'
        '<testcase classname="tests.e2e.test_a" name="y" time="2.5"/></testsuite>'
    )
    written = tmp_path / "durations.json"
    assert main([str(tmp_path / "junit.xml"), "--write-durations", str(written)]) == 0
    assert json.loads(written.read_text()) == {"tests/e2e/test_a.py": 9}
    assert read_durations(written) == {"tests/e2e/test_a.py": 9.0}
    assert read_durations(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2")
    assert read_durations(tmp_path / "bad.json") == {}
