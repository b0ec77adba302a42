"""The timing summary .ci/run prints (scripts/ci_timing.py) on a tiny JUnit report, as pytest writes one."""

from __future__ import annotations

from pathlib import Path

from scripts.ci_timing import main

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4" time="30.5">
<testcase classname="tests.e2e.test_slow" name="test_a" time="12.0">
<properties><property name="cpu_seconds" value="3.25"/></properties></testcase>
<testcase classname="tests.e2e.test_slow.TestGroup" name="test_b" time="8.5">
<properties><property name="cpu_seconds" value="1.5"/></properties></testcase>
<testcase classname="tests.unit.test_quick" name="test_c" time="0.25"><failure message="x"/>
<properties><property name="cpu_seconds" value="9.0"/></properties></testcase>
<testcase classname="tests.unit.test_quick" name="test_d" time="0"><skipped message="no CRDs"/></testcase>
</testsuite></testsuites>
"""

LOG = """lint ok
[prepare] control plane 1.36: ok in 498 s
[prepare] helm: unavailable here, left to its tests: offline
[prepare] done in 615 s
=== 3 passed in 30.50s ===
"""


def test_the_summary_names_setup_each_prepare_step_pytest_and_the_slowest_and_costliest_files(
    tmp_path: Path, capsys
):
    (tmp_path / "junit.xml").write_text(JUNIT)
    (tmp_path / "test.log").write_text(LOG)
    assert main([str(tmp_path / "junit.xml"), "--log", str(tmp_path / "test.log"), "--setup", "112",
                 "--total", "1790"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[lines.index("=== timing ===") :] == [
        "=== timing ===",
        "setup (make venv): 112 s",
        "prepare control plane 1.36: ok in 498 s",
        "prepare helm: unavailable here, left to its tests: offline",
        "prepare done in 615 s",
        "pytest: 30 s (4 tests, 1 failed, 0 errors, 1 skipped)",
        "the 2 slowest test files (the sum of their tests' durations):",
        "       20 s  tests/e2e/test_slow.py (2 tests)",
        "        0 s  tests/unit/test_quick.py (2 tests)",
        "the 2 test files that used the most CPU (of 14 s in all; the test bed's and trainers' included):",
        "        9 s  tests/unit/test_quick.py (2 tests)",
        "        5 s  tests/e2e/test_slow.py (2 tests)",
        "make test in all: 1790 s",
    ]


def test_without_a_report_the_summary_says_so(tmp_path: Path, capsys):
    assert main([str(tmp_path / "missing.xml")]) == 0
    out = capsys.readouterr().out
    assert "pytest: no JUnit report (make test failed before pytest?)" in out
    assert "prepare: no [prepare] lines in the log" in out
