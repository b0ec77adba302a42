"""The docs' benchmark tables are made from the benches' JSON (scripts/bench_tables.py): the committed page
is what the committed results make, each table beside when, on what code and on what machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tables():
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_tables

    yield bench_tables
    sys.path.remove(str(ROOT / "scripts"))


def run(phase: str, repeat: int, p50: float, p99: float) -> dict:
    return {
        "n": 100, "phase": phase, "qps": 50.0, "pods_per_job": 2, "complete": 100, "p50": p50, "p90": p99,
        "p99": p99, "jobs_per_second": 20.0, "requests_per_job": 5.0, "requests": {},
        "bench_creates_subtracted": 100, "objects_created_per_job": 3, "repeat": repeat,
        "cpu_ms_per_job": {"controller": 10.0},
    }  # fmt: skip


PAYLOAD = {
    "command": ".venv/bin/python bench/operator_bench.py --n 100 --qps 50",
    "date": "2026-11-29 05:00 UTC",
    "commit": "abc1234",
    "machine": {"cpus": 2, "cpu_model": "Some CPU", "memory_gib": 23.5},
    "results": [run("operator/existing", 0, 1.0, 2.0), run("job-controller", 0, 2.0, 5.0)],
}


def test_the_committed_page_is_what_the_committed_results_make(tables):
    page = tables.PAGE.read_text()
    assert tables.BLOCK.search(page), "docs/benchmarks.md has no generated table"
    assert tables.render_page(page) == page, "run `make generate` (scripts/bench_tables.py)"


def test_a_table_says_when_on_what_code_and_machine_and_shows_the_ratio(tables, tmp_path):
    (tmp_path / "race.json").write_text(json.dumps(PAYLOAD))
    page = "intro\n<!-- bench-table: race.json -->\nstale\n<!-- end bench-table -->\nafter\n"
    made = tables.render_page(page, tmp_path)
    assert made.startswith(
        "intro\n<!-- bench-table: race.json -->\nMeasured 2026-11-29 05:00 UTC, on commit "
    )
    assert "abc1234, on 2 CPUs (Some CPU), 23.5 GiB, by:" in made
    assert "    .venv/bin/python bench/operator_bench.py --n 100 --qps 50" in made
    assert "| 50 | 100 | operator/existing | job-controller | 0.50 | 0.40 |" in made
    assert "stale" not in made and made.endswith("<!-- end bench-table -->\nafter\n")
    assert tables.render_page(made, tmp_path) == made  # made again, unchanged


def test_a_missing_file_or_an_unknown_bench_is_said(tables, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"gone\.json"):
        tables.render_page("<!-- bench-table: gone.json -->\n<!-- end bench-table -->", tmp_path)
    (tmp_path / "other.json").write_text(json.dumps({**PAYLOAD, "command": "python bench/other.py"}))
    with pytest.raises(ValueError, match=r"bench/other\.py"):
        tables.render_page("<!-- bench-table: other.json -->\n<!-- end bench-table -->", tmp_path)
