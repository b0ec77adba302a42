"""Where kube-apiserver's CPU went in a phase of bench/operator_bench.py, from the pprof profile it takes with
`--profile` (`<namespace>.apiserver.pprof`), in ms per job:

    .venv/bin/python bench/apiserver_report.py --n 1000 bench/results/profile/*.apiserver.pprof

Reads the profiles with `go tool pprof` (Go's own reader; Debian: `apt install golang-go`). Each area is
the CPU of the samples with a frame matching its pattern (the request handlers are disjoint: a request is
a create, a patch, an update, or a get, list or watch); "other" is the rest: TLS and HTTP serving, the
filters before a handler, the watch cache, etcd's client.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

AREAS = (
    ("creates (POST)", r"handlers\.createHandler"),
    ("patches (PATCH)", r"handlers\.(PatchResource|\(\*patcher\))"),
    ("  of which custom resource status", r"customresource\.\(\*StatusREST\)\.Update"),
    ("updates (PUT)", r"handlers\.UpdateResource"),
    ("gets, lists, watches", r"handlers\.(ListResource|GetResource)"),
    ("  of which serving watches", r"handlers\.serveWatch"),
    ("Go's garbage collector", r"runtime\.gcBgMarkWorker"),
)
NESTED = "  of which"
SECONDS = re.compile(r"([\d.]+)(ms|s)\b")


def _seconds(text: str) -> float:
    match = SECONDS.match(text)
    if not match:
        return 0.0
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000 if unit == "ms" else value


def total_seconds(profile: Path) -> float:
    out = _pprof(profile)
    match = re.search(r"Total samples = ([\d.]+m?s)", out)
    return _seconds(match.group(1)) if match else 0.0


def focused_seconds(profile: Path, pattern: str) -> float:
    """CPU of the samples with a frame matching `pattern`: the largest cumulative figure pprof lists."""
    out = _pprof(profile, "-cum", "-nodecount=1", f"-focus={pattern}")
    rows = [line.split() for line in out.splitlines() if line.strip() and line.split()[0][0].isdigit()]
    return max((_seconds(row[3]) for row in rows if len(row) > 3), default=0.0)


def _pprof(profile: Path, *flags: str) -> str:
    command = ["go", "tool", "pprof", "-top", *flags, str(profile)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def report(profiles: list[Path], n: int) -> str:
    figures = {}
    for profile in profiles:
        total = total_seconds(profile)
        areas = {name: focused_seconds(profile, pattern) for name, pattern in AREAS}
        counted = sum(seconds for name, seconds in areas.items() if not name.startswith(NESTED))
        phase = profile.name.removesuffix(".apiserver.pprof")
        figures[phase] = {**areas, "other": total - counted, "total": total}
    names = list(figures)
    lines = [f"| kube-apiserver CPU, ms per job (N = {n}) | " + " | ".join(names) + " |"]
    lines.append("|---|" + "---|" * len(names))
    for area in [name for name, _ in AREAS] + ["other", "total"]:
        cells = " | ".join(f"{figures[name][area] * 1000 / n:.2f}" for name in names)
        lines.append(f"| {area} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--n", type=int, required=True, help="jobs in each profiled phase")
    args = parser.parse_args(argv)
    if shutil.which("go") is None:
        print("go not found: apt install golang-go", file=sys.stderr)
        return 2
    print(report(args.profiles, args.n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
