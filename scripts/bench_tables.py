"""The benchmark result tables of the docs, made from the JSON the benches wrote (bench/results/), so a
figure in the docs is one a bench printed, with when, on what code and on what machine it was measured.

docs/benchmarks.md marks each generated table with the file it is made from:

    <!-- bench-table: bench/results/race-q50.json -->
    ... (generated) ...
    <!-- end bench-table -->

`python scripts/bench_tables.py` rewrites what is between the marks (`make generate` runs it);
`--check` exits 1 when the page differs from what the files make (tests/unit/test_bench_tables.py checks
the same). Each file is rendered by its bench's own report code, chosen by the command that wrote it."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
BLOCK = re.compile(
    r"(<!-- bench-table: (?P<source>\S+) -->\n)(?P<body>.*?)(<!-- end bench-table -->)", re.DOTALL
)


def race_tables(payload: dict[str, Any]) -> str:
    """bench/operator_bench.py's summary, ratio and per-run tables (bench/race_report.py)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import race_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    results = [race_report.PhaseResult(**r) for r in payload["results"]]
    return "\n\n".join(
        [
            "Median (min-max) over the repeats:",
            race_report.summary_table(results),
            "Ratios, repeat by repeat, median (min-max):",
            race_report.ratio_table(results),
        ]
    )


def start_estimate_tables(payload: dict[str, Any]) -> str:
    """bench/start_estimate_bench.py's table: each queued job's predicted start against its actual one."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import start_estimate_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text: str = start_estimate_report.table(payload)
    return text


def scale_tables(payload: dict[str, Any]) -> str:
    """bench/scale_bench.py's table: N live jobs, the burst, a resync round, idle, a restart."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import scale_report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text: str = scale_report.table([scale_report.ScaleResult(**r) for r in payload["results"]])
    return text


# The bench that wrote a file (its command's script) -> how its tables read.
RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "bench/operator_bench.py": race_tables,
    "bench/start_estimate_bench.py": start_estimate_tables,
    "bench/scale_bench.py": scale_tables,
}


def provenance_line(payload: dict[str, Any]) -> str:
    machine = payload.get("machine") or {}
    described = f"{machine.get('cpus', '?')} CPUs"
    if machine.get("cpu_model"):
        described += f" ({machine['cpu_model']})"
    if machine.get("memory_gib"):
        described += f", {machine['memory_gib']} GiB"
    return (
        f"Measured {payload.get('date', 'on an unrecorded date')}, on commit "
        f"{payload.get('commit', 'unrecorded')}, on {described}, by:"
    )


def render_block(payload: dict[str, Any]) -> str:
    command = payload["command"]
    script = next((word for word in command.split() if word.endswith(".py")), "")
    renderer = RENDERERS.get(script)
    if renderer is None:
        raise ValueError(f"no table renderer for {script or command!r}: add one to RENDERERS")
    return f"{provenance_line(payload)}\n\n    {command}\n\n{renderer(payload)}\n\n"


def render_page(text: str, root: Path = ROOT) -> str:
    """`text` with each marked block made again from its file."""

    def block(match: re.Match[str]) -> str:
        source = root / match["source"]
        if not source.is_file():
            raise FileNotFoundError(f"{match['source']} (named by a bench-table mark) does not exist")
        return match.group(1) + render_block(json.loads(source.read_text())) + match.group(4)

    return BLOCK.sub(block, text)


def main(argv: list[str]) -> int:
    text = PAGE.read_text()
    made = render_page(text)
    if "--check" in argv:
        if made != text:
            print(
                f"{PAGE.relative_to(ROOT)} differs from bench/results: run `make generate`", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
