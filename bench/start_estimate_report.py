"""The start-estimate bench's report (bench/start_estimate_bench.py), apart from the bench so that
scripts/bench_tables.py renders a saved result without the test bed's imports."""

from __future__ import annotations

from typing import Any


def table(report: dict[str, Any]) -> str:
    """The error of the estimates (predicted - actual admission, seconds; positive: it started earlier than
    predicted): in sum, then job by job; ≤ marks a latest start (`bound`)."""
    ahead = f"{report['settings']['before']:g} s ahead"
    names = {
        "first": "first shown (~ or ≤)",
        "first_estimate": "first estimate (~)",
        "before": f"as shown {ahead} (~ or ≤)",
    }
    lines = [
        "| estimate | jobs | median abs error s | worst abs error s | median lead s |",
        "|---|---|---|---|---|",
    ]
    for which, figures in report["summary"].items():
        lines.append(
            f"| {names.get(which, which)} | {figures['jobs']} | {figures['median_abs_error_seconds']} | "
            f"{figures['worst_abs_error_seconds']} | {figures['median_lead_seconds']} |"
        )
    if report["never_estimated"]:
        lines.append(f"\nNever estimated before their admission: {', '.join(report['never_estimated'])}.")
    lines += [
        "",
        "| job | length s | first shown: lead s | error s | first estimate: lead s | error s "
        f"| {ahead}: error s |",
        "|---|---|---|---|---|---|---|",
    ]
    for job in report["jobs"]:
        first, estimate, before = (job.get(w) or {} for w in ("first", "first_estimate", "before"))
        lines.append(
            f"| {job['job']} | {job['length_seconds']} | {_lead(first)} | {_error(first)} | "
            f"{_lead(estimate)} | {_error(estimate)} | {_error(before)} |"
        )
    return "\n".join(lines)


def _lead(mark: dict[str, Any]) -> str:
    return str(mark.get("lead_seconds", "-"))


def _error(mark: dict[str, Any]) -> str:
    """The error, marked ≤ for a latest start."""
    if "error_seconds" not in mark:
        return "-"
    return f"{'≤ ' if mark.get('bound') else ''}{mark['error_seconds']}"
