"""The start-estimate bench's report (bench/start_estimate_bench.py), apart from the bench so that
scripts/bench_tables.py renders a saved result without the test bed's imports."""

from __future__ import annotations

from typing import Any


def table(report: dict[str, Any]) -> str:
    """The error of the estimates (predicted - actual admission, seconds; positive: it started earlier than
    predicted): in sum, then job by job."""
    ahead = f"{report['settings']['before']:g} s ahead"
    names = {"first": "first estimate made", "before": f"estimate as it stood {ahead}"}
    lines = [
        "| estimate | jobs | median abs error s | worst abs error s | median lead s |",
        "|---|---|---|---|---|",
    ]
    for which, figures in report["summary"].items():
        if which == "bounds":
            continue
        lines.append(
            f"| {names.get(which, which)} | {figures['jobs']} | {figures['median_abs_error_seconds']} | "
            f"{figures['worst_abs_error_seconds']} | {figures['median_lead_seconds']} |"
        )
    bounds = report["summary"].get("bounds")
    if bounds:
        lines.append(
            f"\nJobs shown a latest start (bound) before an estimate: {bounds['jobs']}; admitted after it: "
            f"{bounds['broken']}."
        )
    if report["never_estimated"]:
        lines.append(f"\nNever estimated before their admission: {', '.join(report['never_estimated'])}.")
    lines += [
        "",
        f"| job | length s | first estimate: lead s | error s | {ahead}: lead s | error s |",
        "|---|---|---|---|---|---|",
    ]
    for job in report["jobs"]:
        first, before = job.get("first") or {}, job.get("before") or {}
        lines.append(
            f"| {job['job']} | {job['length_seconds']} | {first.get('lead_seconds', '-')} | "
            f"{first.get('error_seconds', '-')} | {before.get('lead_seconds', '-')} | "
            f"{before.get('error_seconds', '-')} |"
        )
    return "\n".join(lines)
