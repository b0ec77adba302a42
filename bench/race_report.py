"""bench/operator_bench.py's figures: one phase's result, and the markdown tables made from repeated,
alternating runs (the median and the min-max spread of each figure and of each ratio)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

OPERATOR_PHASES = ("operator/existing", "operator/create")
BASES = ("job-controller", "direct")  # what the ratios are taken against
# The CPU columns, in table order: the controller under test first.
PROCESSES = ("controller", "kube-apiserver", "etcd", "kube-controller-manager")


@dataclass
class PhaseResult:
    n: int
    phase: str
    qps: float
    pods_per_job: int
    complete: int
    p50: float | None
    p90: float | None
    p99: float | None
    jobs_per_second: float | None
    requests_per_job: float
    requests: dict[str, int]
    bench_creates_subtracted: int
    objects_created_per_job: int
    repeat: int = 0
    # Requests of other components in `requests`, not in requests_per_job: Events they posted (the
    # endpoints controller's, about the headless Services), and, from the audit log, their requests to
    # TPUJobs (the garbage collector's GETs of owners it has not seen yet).
    other_components_events_subtracted: int = 0
    other_components_tpujob_requests_subtracted: int = 0
    audit: dict[str, int] = field(default_factory=dict)  # `user verb` -> TPUJob requests in the window
    # CPU ms per job of each process over the counted window; `controller` is the one under test (the
    # operator, kube-controller-manager, or the bench's own creating threads for `direct`).
    cpu_ms_per_job: dict[str, float] = field(default_factory=dict)
    rss_peak_mib: float | None = None
    rss_settled_mib: float | None = None
    cpu_seconds: float | None = None
    wall_seconds: float = 0.0
    events: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def spread(values: list[float], digits: int = 2) -> str:
    """`median (min-max)`, or the one value; `-` for none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def ratios(
    results: list[PhaseResult], phase: str, base: str, figure: Callable[[PhaseResult], float | None]
) -> list[float]:
    """figure(phase) / figure(base) per repeat, over the repeats where both ran and gave a figure."""
    by_repeat = {(r.phase, r.repeat): r for r in results}
    out = []
    for (name, repeat), result in sorted(by_repeat.items()):
        other = by_repeat.get((base, repeat))
        if name != phase or other is None:
            continue
        a, b = figure(result), figure(other)
        if a is not None and b:
            out.append(a / b)
    return out


def groups(results: list[PhaseResult]) -> dict[tuple[float, int], list[PhaseResult]]:
    """(Q, N) -> its phases' results, in run order."""
    out: dict[tuple[float, int], list[PhaseResult]] = {}
    for r in results:
        out.setdefault((r.qps, r.n), []).append(r)
    return out


def runs_table(results: list[PhaseResult]) -> str:
    """Every run, as it ran."""
    lines = [
        "| Q | N | # | controller | pods | p50 s | p99 s | jobs/s | API req/job | RSS peak MiB "
        "| CPU ms/job: controller / apiserver / etcd / kcm |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cpu = " / ".join(_fmt(r.cpu_ms_per_job.get(p), 1) for p in PROCESSES)
        lines.append(
            f"| {r.qps:g} | {r.n} | {r.repeat + 1} | {r.phase} | {r.complete * r.pods_per_job} "
            f"| {_fmt(r.p50)} | {_fmt(r.p99)} | {_fmt(r.jobs_per_second, 1)} | {_fmt(r.requests_per_job, 2)} "
            f"| {_fmt(r.rss_peak_mib, 0)} | {cpu} |"
        )
    return "\n".join(lines)


def _values(rows: list[PhaseResult], figure: Callable[[PhaseResult], float | None]) -> list[float]:
    return [v for v in map(figure, rows) if v is not None]


def summary_table(results: list[PhaseResult]) -> str:
    """Per controller, the median (min-max) over its repeats."""
    lines = [
        "| Q | N | controller | runs | p50 s | p99 s | jobs/s | API req/job | RSS peak MiB "
        "| CPU ms/job controller | apiserver | etcd | kcm |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (qps, n), rows in groups(results).items():
        for phase in dict.fromkeys(r.phase for r in rows):
            mine = [r for r in rows if r.phase == phase]
            cpu = [spread([r.cpu_ms_per_job[p] for r in mine if p in r.cpu_ms_per_job], 1) for p in PROCESSES]
            lines.append(
                f"| {qps:g} | {n} | {phase} | {len(mine)} | {spread(_values(mine, lambda r: r.p50))} "
                f"| {spread(_values(mine, lambda r: r.p99))} "
                f"| {spread(_values(mine, lambda r: r.jobs_per_second), 1)} "
                f"| {spread(_values(mine, lambda r: r.requests_per_job))} "
                f"| {spread(_values(mine, lambda r: r.rss_peak_mib), 0)} | {' | '.join(cpu)} |"
            )
    return "\n".join(lines)


def ratio_table(results: list[PhaseResult]) -> str:
    """Each controller against the Job controller and against the direct floor, repeat by repeat (the
    runs of one repeat ran back to back): the median (min-max) of the ratios."""
    lines = [
        "| Q | N | controller | against | p50 | p99 | jobs/s | API req/job |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (qps, n), rows in groups(results).items():
        phases = list(dict.fromkeys(r.phase for r in rows))
        for phase in [p for p in phases if p not in BASES] + ["job-controller"]:
            for base in BASES:
                if base == phase or base not in phases or phase not in phases:
                    continue
                cells = [
                    spread(ratios(rows, phase, base, figure))
                    for figure in (
                        lambda r: r.p50,
                        lambda r: r.p99,
                        lambda r: r.jobs_per_second,
                        lambda r: r.requests_per_job,
                    )
                ]
                lines.append(f"| {qps:g} | {n} | {phase} | {base} | {' | '.join(cells)} |")
    return "\n".join(lines)


def report(results: list[PhaseResult], command: str) -> str:
    """The markdown for the README: the command, the summary, the ratios, then every run."""
    return "\n\n".join(
        [
            f"`{command}`",
            "Median (min-max) over the repeats:",
            summary_table(results),
            "Ratios, repeat by repeat, median (min-max):",
            ratio_table(results),
            "Every run:",
            runs_table(results),
        ]
    )
