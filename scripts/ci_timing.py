"""Where a CI run's time went, printed at the end of .ci/run so the next regression is seen where it starts:
the set-up (the venv), each `make prepare` step (its "[prepare] <step>: ok in N s" lines in the log),
pytest's total, the ten slowest test files (the sum of their tests' durations, setup and teardown
included, in the JUnit report `make test` writes) and the ten that used the most CPU (the sum of their tests'
`cpu_seconds` property, tests/cpu_usage.py): on two cores the suite is bound by CPU, so that is what a file
costs it.

    .venv/bin/python scripts/ci_timing.py --setup 112 --total 1790 --log build/test.log build/junit.xml

With --write-durations FILE it also writes each test file's summed duration as JSON (`make durations`:
tests/durations.json, from which tests/ordering.py runs the longest files first).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SLOWEST = 10
CPU_PROPERTY = "cpu_seconds"  # tests/cpu_usage.py PROPERTY
PREPARE_LINE = re.compile(r"^\[prepare\] (?P<said>.+)$")  # "<step>: ok in N s", and "done in N s" last


@dataclass
class Report:
    """What the JUnit report says: pytest's total, its counts, and each test file's summed durations."""

    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    files: dict[str, float] = field(default_factory=dict)
    tests: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)


def test_file(classname: str) -> str:
    """tests.e2e.test_x (or tests.e2e.test_x.TestGroup) -> tests/e2e/test_x.py."""
    parts = classname.split(".")
    for end, part in enumerate(parts):
        if part.startswith("test_") or part.endswith("_test"):
            return "/".join(parts[: end + 1]) + ".py"
    return "/".join(parts) + ".py"


def read_junit(path: Path) -> Report:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    report = Report()
    files: collections.defaultdict[str, float] = collections.defaultdict(float)
    tests: collections.Counter[str] = collections.Counter()
    cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
    counts: collections.Counter[str] = collections.Counter()
    for suite in suites:
        report.seconds += float(suite.get("time", 0))
        for key in ("tests", "failures", "errors", "skipped"):
            counts[key] += int(suite.get(key, 0))
        for case in suite.iter("testcase"):
            name = test_file(case.get("classname", ""))
            files[name] += float(case.get("time", 0))
            tests[name] += 1
            for prop in case.iter("property"):
                if prop.get("name") == CPU_PROPERTY:
                    cpu[name] += float(prop.get("value", 0))
    report.counts, report.files, report.tests, report.cpu = dict(counts), dict(files), dict(tests), dict(cpu)
    return report


def prepare_lines(log: str) -> list[str]:
    """What prepare said of each step, in the order the log has it (its "done in N s" last)."""
    return [m["said"] for line in log.splitlines() if (m := PREPARE_LINE.match(line.strip()))]


def summary(report: Report | None, prepare: list[str], setup: float | None, total: float | None) -> str:
    lines = ["", "=== timing ==="]
    if setup is not None:
        lines.append(f"setup (make venv): {setup:.0f} s")
    lines += [f"prepare {said}" for said in prepare]
    if not prepare:
        lines.append("prepare: no [prepare] lines in the log (make test failed before it?)")
    if report is None:
        lines.append("pytest: no JUnit report (make test failed before pytest?)")
    else:
        c = report.counts
        lines.append(
            f"pytest: {report.seconds:.0f} s ({c.get('tests', 0)} tests, {c.get('failures', 0)} failed, "
            f"{c.get('errors', 0)} errors, {c.get('skipped', 0)} skipped)"
        )
        slowest = sorted(report.files.items(), key=lambda item: (-item[1], item[0]))[:SLOWEST]
        lines.append(f"the {len(slowest)} slowest test files (the sum of their tests' durations):")
        lines += [f"  {seconds:7.0f} s  {name} ({report.tests[name]} tests)" for name, seconds in slowest]
        if report.cpu:
            costliest = sorted(report.cpu.items(), key=lambda item: (-item[1], item[0]))[:SLOWEST]
            used = sum(report.cpu.values())
            lines.append(
                f"the {len(costliest)} test files that used the most CPU (of {used:.0f} s in all; "
                "the test bed's and trainers' included):"
            )
            lines += [
                f"  {seconds:7.0f} s  {name} ({report.tests[name]} tests)" for name, seconds in costliest
            ]
    if total is not None:
        lines.append(f"make test in all: {total:.0f} s")
    return "\n".join(lines)


def write_durations(report: Report, path: Path) -> None:
    """Each test file's seconds, rounded to the second, sorted by name (a diff shows what moved)."""
    rounded = {name: round(seconds) for name, seconds in sorted(report.files.items())}
    path.write_text(json.dumps(rounded, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="the JUnit report (build/junit.xml)")
    parser.add_argument("--log", type=Path, help="make test's output, for the [prepare] lines")
    parser.add_argument("--setup", type=float, help="seconds the set-up (make venv) took")
    parser.add_argument("--total", type=float, help="seconds make test took")
    parser.add_argument("--write-durations", type=Path, help="write each file's seconds here as JSON")
    args = parser.parse_args(argv)
    report = read_junit(args.junit) if args.junit.is_file() else None
    if args.write_durations:
        if report is None:
            parser.error(f"{args.junit}: no JUnit report to take durations from (run `make test` first)")
        write_durations(report, args.write_durations)
    log = args.log.read_text(errors="replace") if args.log and args.log.is_file() else ""
    print(summary(report, prepare_lines(log), args.setup, args.total))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
