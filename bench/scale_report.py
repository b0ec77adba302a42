"""The scale bench's figures and report (bench/scale_bench.py), apart from the bench so that
scripts/bench_tables.py renders a saved result without the test bed's imports."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ScaleResult:
    n: int
    qps: float
    resync_seconds: float
    tpu: str
    pods_per_job: int
    created: int = 0
    create_seconds: float | None = None  # first create sent -> last create answered
    pods_complete: int = 0  # jobs with all their pods seen
    pods_seconds: float | None = None  # first create sent -> every job's pods seen
    jobs_per_second: float | None = None  # jobs with their pods / pods_seconds
    pods_p50_seconds: float | None = None  # each job's create sent -> its pods seen
    pods_p95_seconds: float | None = None
    # CPU seconds of each process from the first create to every job's pods seen (the bench: this process,
    # its create threads and pod watch), and all of them as a share of the machine's cores over that span.
    burst_cpu_seconds: dict[str, float] = field(default_factory=dict)
    burst_machine_busy_percent: float | None = None
    statuses_written: int = 0
    statuses_seconds: float | None = None  # first create sent -> every job's status has a phase
    phases: dict[str, int] = field(default_factory=dict)
    round_seconds: float | None = None
    round_jobs: int | None = None
    round_in_time: bool | None = None  # round_jobs >= N and round_seconds <= resync_seconds
    round_passes: int | None = None  # reconcile passes counted while that round ran (all causes)
    round_pass_mean_seconds: float | None = None
    rss_peak_mib: float | None = None
    rss_mib: float | None = None
    cpu_seconds: float | None = None
    idle_cpu_percent: float | None = None  # the operator's CPU over IDLE_INTERVALS resync intervals, steady
    # A second operator process started after the first stops, among the N live jobs: until every job had a
    # pass from it (its reconcile count reaches N), its peak RSS then, and the API requests (all but WATCH,
    # every client: an upper bound of its own) per job meanwhile.
    restart_seconds: float | None = None
    restart_rss_peak_mib: float | None = None
    restart_requests_per_job: float | None = None
    # Those requests by kind, "VERB resource[/subresource]": count (the most frequent first); and the new
    # operator's own, named by the API server's audit log (the operator's service account), per job too.
    restart_requests: dict[str, int] = field(default_factory=dict)
    restart_operator_requests: dict[str, int] = field(default_factory=dict)
    restart_operator_requests_per_job: float | None = None
    apiserver_rss_peak_mib: float | None = None
    apiserver_rss_mib: float | None = None
    etcd_rss_mib: float | None = None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: list[ScaleResult]) -> str:
    lines = [
        "| N | Q | resync s | created | create s | all pods s | jobs/s | pods p50 / p95 s | all statuses s "
        "| round s | round jobs | round in time | idle CPU % | RSS peak / now MiB | CPU s "
        "| restart: all passed s / peak MiB / operator's req per job (all clients') "
        "| API server RSS peak / now MiB | etcd RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        in_time = "-" if r.round_in_time is None else ("yes" if r.round_in_time else "NO")
        lines.append(
            f"| {r.n} | {r.qps:g} | {r.resync_seconds:g} | {r.created} | {_fmt(r.create_seconds)} "
            f"| {_fmt(r.pods_seconds)} | {_fmt(r.jobs_per_second)} "
            f"| {_fmt(r.pods_p50_seconds)} / {_fmt(r.pods_p95_seconds)} | {_fmt(r.statuses_seconds)} "
            f"| {_fmt(r.round_seconds, 2)} | {'-' if r.round_jobs is None else r.round_jobs} | {in_time} "
            f"| {_fmt(r.idle_cpu_percent)} | {_fmt(r.rss_peak_mib, 0)} / {_fmt(r.rss_mib, 0)} "
            f"| {_fmt(r.cpu_seconds)} | {_fmt(r.restart_seconds)} / {_fmt(r.restart_rss_peak_mib, 0)} "
            f"/ {_fmt(r.restart_operator_requests_per_job, 3)} ({_fmt(r.restart_requests_per_job, 3)}) "
            f"| {_fmt(r.apiserver_rss_peak_mib, 0)} / {_fmt(r.apiserver_rss_mib, 0)} "
            f"| {_fmt(r.etcd_rss_mib, 0)} |"
        )
    notes = [f"- N={r.n}: {note}" for r in results for note in r.notes]
    notes += [
        f"- N={r.n}: restart requests, the operator's {r.restart_operator_requests}; all clients' "
        f"{r.restart_requests}"
        for r in results
        if r.restart_requests or r.restart_operator_requests
    ]
    notes += [
        f"- N={r.n}: CPU s from the first create to every job's pods {r.burst_cpu_seconds}, "
        f"{_fmt(r.burst_machine_busy_percent)}% of the machine's cores"
        for r in results
        if r.burst_cpu_seconds
    ]
    phases = [f"- N={r.n}: phases {r.phases}" for r in results if r.phases]
    return "\n".join(lines + (["", *phases] if phases else []) + (["", *notes] if notes else []))
