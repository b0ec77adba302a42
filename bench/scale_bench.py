"""The operator with many live TPUJobs at once: does one resync round still give every job a pass in time?

    .venv/bin/python bench/scale_bench.py --n 10000 --json bench/results/scale.json

One fresh test bed per N (`--n`; the sandbox as bench/operator_bench.py sets it up: real kube-apiserver 1.20,
etcd, kube-controller-manager, simulated GKE; the scheduler and the simulated kubelet stopped), one
operator, cluster-wide, with TPUJOB_RESYNC_SECONDS = `--resync` (default 30, the operator's default) and
TPUJOB_API_QPS = `--qps` (default 0: no client-side limit). The bench then:

1. creates N TPUJobs (policy existing, one single-host slice each: `--tpu`, default v5e 2x2 = 1 pod) from
   8 threads, as operator_bench does; a create that fails is counted, and after 20 failures the bench
   stops creating and reports at which count the first one failed and why;
2. waits (bounded, `--timeout`) until a pod watch has seen every job's pods (and reports each process' CPU
   seconds meanwhile: kube-apiserver, etcd, kube-controller-manager, the operator, the bench itself, and
   their sum as a share of the machine's cores), and then until every job's
   status has a phase (listed in pages of 500; a policy-existing job whose pods are unscheduled shows
   Starting);
3. from that moment T, waits for the first resync round that *began* after T to end (the operator's
   tpujob_resync_round_end_timestamp_seconds minus tpujob_resync_round_seconds >= T), and reads
   tpujob_resync_round_seconds / tpujob_resync_round_jobs from its /metrics: the time one round took to
   give every job a pass, in the steady state (every job already has its pods and status);
4. reads the operator's peak RSS (VmHWM), RSS now and CPU seconds from /proc, and the API server's and
   etcd's RSS;
5. the operator's CPU over two resync intervals with nothing changing (idle, as a % of a core);
6. with `--restart`: stops the operator and starts a new process, and times it until it has given every job
   a pass (its reconcile count reaches N), with its peak RSS and the API requests per job meanwhile: the
   new operator's own, by kind, named by the API server's audit log (on with `--restart`: every request of
   the operator's service account, Metadata level), and all clients' (all verbs but WATCH; other
   controllers may still be catching up with the burst: kube-controller-manager's EndpointSlice
   controller writes a slice per Service at its own 20 requests a second).

Per job, the latency from its create sent to its pods seen (p50, p95), and jobs/s: jobs / the time from the
first create to the last job's pods.

A round covers all N in time when its job count is at least N and its duration at most the resync
interval: then no job waits more than two intervals for a look. Every wait is bounded; a wait that times
out, an operator or API server that exits, or failed creates are reported in the row's notes with the
count reached, rather than hanging.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # operator_bench and race_*, beside this file

from kubernetes import client as k8s
from operator_bench import CREATE_THREADS, Bench
from prometheus_client.parser import text_string_to_metric_families
from race_measure import (
    PodWatch,
    add_crd_server_argument,
    audit_kinds,
    cpu_of,
    create_namespace,
    limits,
    percentile,
    proc_figures,
    scrape_requests,
    write_json,
)
from race_objects import tpujob_manifest
from scale_report import ScaleResult, table

from tpujob.api import constants as c
from tpujob_sandbox import (
    ControlPlane,
    OperatorProcess,
    Sandbox,
    find_binaries,
    start_sandbox,
    stop_process,
)
from tpujob_sandbox.bed import OPERATOR_USER

MEMORY_REPORT_ENV = "TPUJOB_MEMORY_REPORT"  # tpujob.memreport.ENV
NAMESPACE = "scale"
PAGE = 500
MAX_CREATE_ERRORS = 20
IDLE_INTERVALS = 2
GAUGES = (
    "tpujob_resync_round_seconds",
    "tpujob_resync_round_jobs",
    "tpujob_resync_round_end_timestamp_seconds",
    "tpujob_reconcile_duration_seconds_count",
    "tpujob_reconcile_duration_seconds_sum",
)


def scrape(port: int) -> dict[str, float]:
    """The resync and reconcile figures from the operator's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in GAUGES and not sample.labels:
                found[sample.name] = sample.value
    return found


def log(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Broken(Exception):
    """A part of the test bed died: the phase stops there."""


class ScaleRun:
    def __init__(self, bed: Sandbox, bench: Bench, args: argparse.Namespace, n: int) -> None:
        self.bed, self.bench, self.args, self.n = bed, bench, args, n
        self.custom = k8s.CustomObjectsApi(bed.api_client)
        env = bench.operator_env()
        env["TPUJOB_RESYNC_SECONDS"] = f"{args.resync:g}"
        if args.memory_report:
            env[MEMORY_REPORT_ENV] = str(args.memory_report.resolve() / f"n{n}")
        self.metrics_port = int(env["TPUJOB_METRICS_PORT"])
        self.operator = OperatorProcess(env, bench.folder / f"operator-{n}.log")
        self.result = ScaleResult(n, bench.qps, args.resync, args.tpu, bench.pods)
        self.timeout = args.timeout or 300.0 + n / 10

    # --- liveness and bounded waits --------------------------------------------------------------

    def check_alive(self) -> None:
        process = self.operator.process
        if process is not None and process.poll() is not None:
            raise Broken(f"the operator exited with code {process.returncode}")
        for name in ("kube-apiserver", "etcd"):
            part = self.bed.control_plane.processes.get(name)
            if part is not None and part.poll() is not None:
                raise Broken(f"{name} exited with code {part.returncode}")

    def wait(self, what: str, progress: Callable[[], tuple[bool, str]], timeout: float, every: float) -> bool:
        """Poll `progress` (done?, how far) until done or `timeout`; a timeout is noted, not raised."""
        deadline = time.monotonic() + timeout
        last_print = time.monotonic()
        while True:
            self.check_alive()
            try:
                done, how_far = progress()
            except Exception as error:  # an API server under load: try again until the deadline
                done, how_far = False, f"(poll failed: {error!r:.200})"
            if done:
                return True
            now = time.monotonic()
            if now >= deadline:
                self.result.notes.append(f"timed out after {timeout:.0f} s waiting for {what}: {how_far}")
                log(self.result.notes[-1])
                return False
            if now - last_print >= 15:
                log(f"{what}: {how_far}")
                last_print = now
            time.sleep(every)

    # --- the steps ---------------------------------------------------------------------------------

    def run(self) -> ScaleResult:
        started = time.monotonic()
        pods: PodWatch | None = None
        try:
            create_namespace(self.bench.core, NAMESPACE)
            self.operator.start()
            self.wait("the operator's /metrics", self._metrics_up, 120, 0.5)
            self._memory_report(0)
            pods = PodWatch(self.bed.api_client, NAMESPACE).start()
            cpu_before, burst_started = self._cpu(), time.monotonic()
            names, sent = self._create_all()
            self._memory_report(1)  # amid the burst: what a peak is made of
            first_sent = min(sent.values(), default=time.monotonic())
            pods_seen = bool(names) and self._wait_pods(pods, names, sent)
            if pods_seen:
                self._burst_cpu(cpu_before, time.monotonic() - burst_started)
            steady = pods_seen and self._wait_statuses(first_sent) and self._wait_round()
            if steady:
                self._idle_cpu()
                self._memory_report(2)
                if self.args.restart:
                    self._restart()
        except Broken as error:
            self.result.notes.append(f"broke: {error}")
            log(f"broke: {error}")
        finally:
            if pods is not None:
                pods.stop()
            self._figures()
            self.operator.stop()
        self.result.wall_seconds = round(time.monotonic() - started, 1)
        return self.result

    def _metrics_up(self) -> tuple[bool, str]:
        return "tpujob_resync_round_seconds" in scrape(self.metrics_port), "not yet"

    def _create_all(self) -> tuple[list[str], dict[str, float]]:
        """The jobs created, and when each create was sent (monotonic)."""
        names = [f"j{i:05d}" for i in range(self.n)]
        lock = threading.Lock()
        stop = threading.Event()
        created: list[str] = []
        errors: list[str] = []
        sent: dict[str, float] = {}

        def create(name: str) -> None:
            if stop.is_set():
                return
            manifest = tpujob_manifest(name, NAMESPACE, self.bench.tpu, "existing")
            sent[name] = time.monotonic()
            try:
                self.custom.create_namespaced_custom_object(
                    c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, manifest, _request_timeout=60
                )
            except Exception as error:
                with lock:
                    errors.append(f"{name} (after {len(created)} created): {error!r:.300}")
                    if len(errors) >= MAX_CREATE_ERRORS:
                        stop.set()
                return
            with lock:
                created.append(name)
                if len(created) % 1000 == 0:
                    log(f"created {len(created)}")

        first_sent = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(create, names))
        self.result.create_seconds = round(time.monotonic() - first_sent, 1)
        self.result.created = len(created)
        log(f"created {len(created)} of {self.n} in {self.result.create_seconds} s")
        if errors:
            self.result.notes.append(f"{len(errors)} creates failed; first: {errors[0]}")
            if stop.is_set():
                self.result.notes.append(f"stopped creating after {MAX_CREATE_ERRORS} failures")
        return sorted(created), {name: sent[name] for name in created}

    def _wait_pods(self, pods: PodWatch, names: list[str], sent: dict[str, float]) -> bool:
        wanted = set(names)
        first_sent = min(sent.values())

        def progress() -> tuple[bool, str]:
            complete = len(set(pods.complete_at(self.bench.pods)) & wanted)
            self.result.pods_complete = complete
            return complete == len(wanted), f"{complete} of {len(wanted)} jobs have their pods"

        done = self.wait("every job's pods", progress, self.timeout, 0.5)
        if done:
            complete = pods.complete_at(self.bench.pods)
            last = max(complete[name] for name in names)
            self.result.pods_seconds = round(last - first_sent, 1)
            self.result.jobs_per_second = round(len(names) / (last - first_sent), 1)
            latencies = [complete[name] - sent[name] for name in names]
            self.result.pods_p50_seconds = round(percentile(latencies, 50), 1)
            self.result.pods_p95_seconds = round(percentile(latencies, 95), 1)
            log(f"every job's pods seen {self.result.pods_seconds} s after the first create")
        return done

    def _cpu(self) -> dict[str, float]:
        pids = {name: pid for name, pid in self.bed.control_plane.pids.items() if name != "kube-scheduler"}
        if self.operator.process:
            pids["operator"] = self.operator.process.pid
        return {**cpu_of(pids), "bench": time.process_time()}

    def _burst_cpu(self, before: dict[str, float], seconds: float) -> None:
        """Where the machine's CPU went while the jobs got their pods (`seconds`: the window's wall time,
        from just before the first create to the pod watch seeing every job's pods, give or take a poll)."""
        after = self._cpu()
        spent = {name: round(after[name] - before[name], 1) for name in after}
        self.result.burst_cpu_seconds = dict(sorted(spent.items(), key=lambda item: -item[1]))
        busy = sum(spent.values()) / (seconds * (os.cpu_count() or 1)) * 100
        self.result.burst_machine_busy_percent = round(busy, 1)
        log(f"CPU s from the first create to every job's pods: {self.result.burst_cpu_seconds}")

    def _phases(self) -> Counter[str]:
        phases: Counter[str] = Counter()
        token = None
        while True:
            page = self.custom.list_namespaced_custom_object(
                c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, limit=PAGE, _continue=token, _request_timeout=60
            )
            for item in page["items"]:
                phases[(item.get("status") or {}).get("phase") or ""] += 1
            token = page["metadata"].get("continue")
            if not token:
                return phases

    def _wait_statuses(self, first_sent: float) -> bool:
        def progress() -> tuple[bool, str]:
            phases = self._phases()
            self.result.phases = dict(sorted(phases.items()))
            written = sum(count for phase, count in phases.items() if phase)
            self.result.statuses_written = written
            return written >= self.result.created, f"{written} of {self.result.created} statuses: {phases}"

        done = self.wait("every job's status", progress, self.timeout, 2.0)
        if done:
            self.result.statuses_seconds = round(time.monotonic() - first_sent, 1)
            log(f"every status written {self.result.statuses_seconds} s after the first create")
        return done

    def _wait_round(self) -> bool:
        """The first resync round begun after every status was written that gave every job a pass (a round
        skips jobs passed within the interval: the first ones after a burst may skip many)."""
        moment = time.time()
        at_moment = scrape(self.metrics_port)
        seen: dict[str, float] = {}

        def progress() -> tuple[bool, str]:
            nonlocal seen
            seen = scrape(self.metrics_port)
            end = seen.get("tpujob_resync_round_end_timestamp_seconds", 0.0)
            began = end - seen.get("tpujob_resync_round_seconds", 0.0)
            jobs = seen.get("tpujob_resync_round_jobs", 0.0)
            return (
                end > 0 and began >= moment and jobs >= self.result.created,
                f"last round ended {time.time() - end:.0f} s ago, {jobs:.0f} jobs" if end else "no round yet",
            )

        # A full round starts within two intervals plus the end of the round under way; allow that round
        # as long again as the interval, and more with many jobs.
        timeout = 4 * self.args.resync + max(300.0, self.n * 0.1)
        if not self.wait("a full resync round begun after every status was written", progress, timeout, 1.0):
            return False
        self.result.round_seconds = round(seen["tpujob_resync_round_seconds"], 2)
        self.result.round_jobs = int(seen["tpujob_resync_round_jobs"])
        self.result.round_in_time = (
            self.result.round_jobs >= self.result.created and self.result.round_seconds <= self.args.resync
        )
        # Reconcile passes between the moment and the round's end: mostly the round's own (no other
        # cause while nothing changes), so a rough pass rate.
        passes = seen.get("tpujob_reconcile_duration_seconds_count", 0) - at_moment.get(
            "tpujob_reconcile_duration_seconds_count", 0
        )
        spent = seen.get("tpujob_reconcile_duration_seconds_sum", 0) - at_moment.get(
            "tpujob_reconcile_duration_seconds_sum", 0
        )
        self.result.round_passes = int(passes)
        self.result.round_pass_mean_seconds = round(spent / passes, 4) if passes else None
        log(f"resync round: {self.result.round_seconds} s for {self.result.round_jobs} jobs")
        return True

    def _idle_cpu(self) -> None:
        """The operator's CPU while nothing changes, over IDLE_INTERVALS resync intervals (whole rounds)."""
        process = self.operator.process
        assert process is not None
        before, started = proc_figures(process.pid)[2], time.monotonic()
        deadline = started + IDLE_INTERVALS * self.args.resync
        while time.monotonic() < deadline:
            self.check_alive()
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))  # a fixed window, not a wait
        spent = proc_figures(process.pid)[2] - before
        self.result.idle_cpu_percent = round(100 * spent / (time.monotonic() - started), 1)
        log(f"idle: {self.result.idle_cpu_percent} % of a core")

    def _memory_report(self, k: int) -> None:
        """With --memory-report: the operator's k-th report (tpujob/memreport.py), waited for."""
        if not self.args.memory_report:
            return
        process = self.operator.process
        assert process is not None
        written = self.args.memory_report / f"n{self.n}.{k}.txt"
        process.send_signal(signal.SIGUSR2)
        self.wait(f"memory report {written}", lambda: (written.exists(), "not yet"), 300, 1.0)

    def _restart(self) -> None:
        """Stop the operator, start a new process, and wait until it has given every job a pass."""
        self._figures()  # the first process' figures, before it goes
        self.operator.stop()
        before = scrape_requests(self.bed.api_client)
        started, started_wall = time.monotonic(), time.time()
        self.operator.start()

        def progress() -> tuple[bool, str]:
            passes = 0.0
            with contextlib.suppress(OSError):
                passes = scrape(self.metrics_port).get("tpujob_reconcile_duration_seconds_count", 0.0)
            return passes >= self.result.created, f"{passes:.0f} passes of {self.result.created}"

        if not self.wait("every job's pass by the new operator", progress, self.timeout, 0.2):
            return
        self.result.restart_seconds = round(time.monotonic() - started, 1)
        made = scrape_requests(self.bed.api_client)
        made.subtract(before)
        by_kind = {
            f"{verb} {resource}{'/' + sub if sub else ''}": count
            for (verb, _group, resource, sub), count in made.most_common()
            if verb != "WATCH" and count > 0
        }
        self.result.restart_requests = by_kind
        self.result.restart_requests_per_job = round(sum(by_kind.values()) / self.result.created, 3)
        audit_log = self.bed.control_plane.audit_log
        if audit_log.exists():
            own = audit_kinds(audit_log.read_text().splitlines(), started_wall, time.time(), OPERATOR_USER)
            self.result.restart_operator_requests = own
            self.result.restart_operator_requests_per_job = round(sum(own.values()) / self.result.created, 3)
        process = self.operator.process
        assert process is not None
        self.result.restart_rss_peak_mib = round(proc_figures(process.pid)[0], 1)
        log(
            f"restart: every job passed in {self.result.restart_seconds} s, "
            f"{self.result.restart_requests_per_job} requests/job, "
            f"peak {self.result.restart_rss_peak_mib} MiB; requests {by_kind}; "
            f"the operator's {self.result.restart_operator_requests}"
        )

    def _figures(self) -> None:
        process = self.operator.process
        if process is not None and process.poll() is None and self.result.rss_peak_mib is None:
            peak, now, cpu = proc_figures(process.pid)
            self.result.rss_peak_mib, self.result.rss_mib = round(peak, 1), round(now, 1)
            self.result.cpu_seconds = round(cpu, 1)
        apiserver = self.bed.control_plane.processes.get("kube-apiserver")
        if apiserver is not None and apiserver.poll() is None:
            peak, now, _ = proc_figures(apiserver.pid)
            self.result.apiserver_rss_peak_mib, self.result.apiserver_rss_mib = round(peak), round(now)
        etcd = self.bed.control_plane.processes.get("etcd")
        if etcd is not None and etcd.poll() is None:
            self.result.etcd_rss_mib = round(proc_figures(etcd.pid)[1])


# --- the report -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10000], help="live TPUJobs, one test bed each")
    parser.add_argument("--qps", type=float, default=0, help="TPUJOB_API_QPS; 0: no limit (default)")
    parser.add_argument("--burst", type=int, help="TPUJOB_API_BURST; default: 2 x qps")
    parser.add_argument("--resync", type=float, default=30.0, help="TPUJOB_RESYNC_SECONDS (default 30)")
    parser.add_argument(
        "--restart",
        action="store_true",
        help="then stop the operator and time a new one's passes over all jobs",
    )
    parser.add_argument("--tpu", default="v5e:2x2", help="TYPE:TOPOLOGY of every job (one single-host slice)")
    parser.add_argument(
        "--timeout", type=float, help="seconds per wait for pods / statuses; default 300 + N/10"
    )
    add_crd_server_argument(parser)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--memory-report",
        type=Path,
        metavar="DIR",
        help="trace the operator's allocations and write its memory reports here, with no job (n<N>.0.*), "
        "when the creates end (n<N>.1.*, amid the burst) and after the idle window (n<N>.2.*); compare "
        "them with bench/memory_diff.py. RSS runs slower "
        "and higher with it: take RSS figures from runs without",
    )
    args = parser.parse_args(argv)
    if args.memory_report:
        args.memory_report.mkdir(parents=True, exist_ok=True)
    qps, burst = limits(args.qps, args.burst)
    tpu_type, topology = args.tpu.split(":")
    results: list[ScaleResult] = []
    for n in args.n:
        print(f"Q={qps:g} N={n} resync={args.resync:g} s ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="tpujob-scale-") as tmp:
            state = Path(tmp) / "sandbox"
            # With --restart, the API server names the operator's own requests (its service account's,
            # at Metadata level): the restart's figure must not count other controllers' catching up.
            plane = ControlPlane(
                find_binaries(),
                state,
                audit_users=(OPERATOR_USER,) if args.restart else (),
                crd_server=args.crd_server == "1.36",
            )
            bed = start_sandbox(state, time_scale=0.0, control_plane=plane.start())
            try:
                # As operator_bench: no scheduling, no kubelet; the pods stay Pending, unscheduled.
                stop_process(bed.control_plane.processes.pop("kube-scheduler"))
                bed.kubelet.stop()
                bench = Bench(bed, Path(tmp), (tpu_type, topology), qps, burst)
                result = ScaleRun(bed, bench, args, n).run()
            finally:
                bed.stop()
        print(f"  {json.dumps(asdict(result))}", file=sys.stderr, flush=True)
        results.append(result)
    print(table(results))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
