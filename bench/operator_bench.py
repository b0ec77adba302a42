"""The operator against Kubernetes' own Job controller and against the direct floor, on one control plane.

    .venv/bin/python bench/operator_bench.py --qps 0 50 --n 100 1000 --json bench/results/operator.json

One test bed (the sandbox: real kube-apiserver 1.20, etcd, kube-controller-manager; simulated GKE) per
client-side limit Q (`--qps`). For each N, the phases run one after the other, `--repeats` times over,
alternating (existing, job-controller, direct, create, existing, ...), each in a fresh namespace:

  operator/existing  N TPUJobs, policy existing: no GKE call at all
  job-controller     N batch/v1 Jobs, parallelism = completions = pods per TPUJob, handled by the real
                     kube-controller-manager's Job controller (its default --concurrent-job-syncs 5)
  direct             the floor: the bench itself creates each job's headless Service and pods, the bodies
                     the operator renders, from DIRECT_WORKERS threads under the same limit
  operator/create    N TPUJobs, policy create, the simulated GKE provisions instantly (0 s)

Equal footing: every controller gets the same client-side request limit, Q requests a second with a burst
of 2 Q (`--burst` to change it): kube-controller-manager through --kube-api-qps / --kube-api-burst, the
operator through TPUJOB_API_QPS / TPUJOB_API_BURST, `direct` through the operator's own RequestLimiter.
Q = 0 means no limit: the limiters off, and kube-controller-manager at 10000 / 10000 (client-go reads a
QPS of 0 as its default of 5, not as no limit).

What is measured, identically for every controller:
- create -> all pods created, per job: from just before the bench sends the job's create request (for
  `direct`: hands the job to its threads) to the moment a pod watch in this process has seen the job's
  last pod (ADDED). p50/p90/p99 over the N jobs; jobs per second: N / (first create -> last job done).
- API requests per job: the API server's own `apiserver_request_total`, scraped before the creates and
  after the phase has settled (no counted request for 3 s), restricted to the resources the controller
  reads or writes, minus the bench's own N creates, divided by N; every verb counts. 1.20's counter has
  no user label, so the phases run alone, and other components' requests are subtracted: Events beyond
  the controller's own, and their requests to TPUJobs, named by the API server's audit log (on unless
  `--no-audit`: the garbage collector GETs a TPUJob owner it has not seen yet). Mind that 1.20 labels a
  GET of one custom resource LIST: the operator's `LIST tpujobs` are its GETs of a job before creating.
- CPU ms per job of kube-apiserver, etcd, kube-controller-manager and the controller under test over the
  same window, from /proc (`direct`: its threads' own CPU time); the operator's peak RSS (VmHWM). One
  fresh operator process per phase, so each figure is for N live TPUJobs.

The scheduler and the simulated kubelet are stopped for the whole run: the metric is pods *created*, and
scheduling and the kubelet are the same code for every controller (on 2 cores they would only add noise).
Each job is one TPU slice of `--tpu` (default v5p 2x2x2: 2 hosts, so 2 pods per job); every controller
creates the operator's own rendered pod (same image, env, labels, resources).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the race_* modules, beside this file

from kubernetes import client as k8s
from race_measure import (
    ApiServerProfile,
    PodWatch,
    add_crd_server_argument,
    audit_counts,
    command_line,
    controller_manager_flags,
    counted,
    cpu_of,
    create_namespace,
    delete_namespace,
    limits,
    open_watches,
    others_in_audit,
    owner_of,
    percentile,
    proc_figures,
    settle,
    start_profiler,
    write_json,
)
from race_objects import direct_job_of, direct_objects, job_manifest, pods_per_job, tpujob_manifest
from race_report import PhaseResult, report

from tpujob.api import constants as c
from tpujob.ratelimit import RequestLimiter
from tpujob.reconciler import EVENT_COMPONENT
from tpujob_sandbox import (
    ControlPlane,
    OperatorProcess,
    Sandbox,
    Timeout,
    find_binaries,
    free_port,
    install_crd,
    operator_kubeconfig,
    start_sandbox,
    stop_process,
    wait_for,
)
from tpujob_sandbox.bed import OPERATOR_USER

WARM_UP = "warm-up"  # the job each operator phase runs first, outside the counted window
OPERATOR_RESOURCES = {
    (c.GROUP, c.PLURAL),
    ("", "pods"),
    ("", "services"),
    ("", "events"),
    ("networking.k8s.io", "networkpolicies"),
}
JOB_CONTROLLER_RESOURCES = {("batch", "jobs"), ("", "pods"), ("", "events")}
DIRECT_RESOURCES = {("", "pods"), ("", "services")}
CREATE_THREADS = 8
DIRECT_WORKERS = 16  # the operator's default TPUJOB_WORKERS: the threads its passes' requests run on
# policy create last: its cleanup (thousands of simulated nodes) is the heaviest.
PHASES = ("operator/existing", "job-controller", "direct", "operator/create")


class Direct:
    """The floor: each job's Service and pods POSTed by this process, every request taking a token from
    the operator's own limiter first. `cpu` sums its threads' CPU time."""

    def __init__(self, api: k8s.ApiClient, tpu: tuple[str, str], qps: float, burst: int) -> None:
        config = copy.copy(api.configuration)
        config.connection_pool_maxsize = DIRECT_WORKERS  # a connection per thread, as the operator has
        self.core = k8s.CoreV1Api(k8s.ApiClient(config))
        self.tpu = tpu
        self.limiter = RequestLimiter(qps, burst)
        self.pool = concurrent.futures.ThreadPoolExecutor(DIRECT_WORKERS, thread_name_prefix="direct")
        self.cpu = 0.0
        self._lock = threading.Lock()

    def submit(self, namespace: str, name: str) -> None:
        self.pool.submit(self._create, namespace, name)

    def _create(self, namespace: str, name: str) -> None:
        started = time.thread_time()
        for body in direct_objects(name, namespace, self.tpu):
            self.limiter.acquire()
            if body["kind"] == "Service":
                self.core.create_namespaced_service(namespace, body)
            else:
                self.core.create_namespaced_pod(namespace, body)
        with self._lock:
            self.cpu += time.thread_time() - started

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class Bench:
    def __init__(
        self,
        bed: Sandbox,
        folder: Path,
        tpu: tuple[str, str],
        qps: float = 0,
        burst: int = 1,
        profile: Path | None = None,
        operator_env: dict[str, str] | None = None,
    ) -> None:
        self.bed = bed
        self.profile = profile
        self.apiserver_profile_seconds = 20
        self.qps, self.burst = qps, burst
        self.api = bed.api_client
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.batch = k8s.BatchV1Api(self.api)
        self.folder = folder
        self.tpu = tpu
        self.pods = pods_per_job(tpu)
        self.extra_env = operator_env or {}
        self.audit_log: Path | None = getattr(bed.control_plane, "audit_log", None)
        install_crd(bed)
        self.kubeconfig = operator_kubeconfig(bed, folder / "operator.kubeconfig")
        # The garbage collector and quota monitors find a new resource at their next discovery (30 s);
        # until then the collector GETs each TPUJob owner it meets. Start when it watches TPUJobs.
        wait_for(
            lambda: open_watches(self.api, c.GROUP, c.PLURAL, bed.control_plane) > 0,
            timeout=120,
            what="kube-controller-manager to watch TPUJobs",
            interval=1.0,
        )

    def operator_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "TPUJOB_GKE_ENDPOINT": self.bed.gke.endpoint,
            "TPUJOB_GKE_PROJECT": self.bed.gke.project,
            "TPUJOB_GKE_LOCATION": self.bed.gke.location,
            "TPUJOB_GKE_CLUSTER": self.bed.gke.cluster,
            "TPUJOB_GKE_ZONE": self.bed.default_zone,
            "TPUJOB_METRICS_PORT": str(free_port()),
            "TPUJOB_HEALTH_PORT": str(free_port()),
            "TPUJOB_API_QPS": f"{self.qps:g}",
            "TPUJOB_API_BURST": str(self.burst),
            **self.extra_env,
        }

    def run(self, n: int, phase: str, timeout: float, repeat: int = 0) -> PhaseResult:
        namespace = f"bench-{phase.replace('/', '-')}-{n}-r{repeat}"
        create_namespace(self.core, namespace)
        operator = direct = None
        started = time.monotonic()
        try:
            if phase.startswith("operator/"):
                operator = OperatorProcess(self.operator_env(), self.folder / f"{namespace}.log").start()
                self._warm_up(namespace, phase.split("/")[1])
            elif phase == "direct":
                direct = Direct(self.api, self.tpu, self.qps, self.burst)
            result = self._measure(n, phase, namespace, operator, direct, timeout)
            result.repeat = repeat
        finally:
            if phase == "operator/create":
                # The pods never ran: GKE's per-node drain (a pod list per node) is not needed, and with
                # thousands of nodes it would load the API server long after the phase.
                self.bed.gke.remove_all_pools(drain=False)
            delete_namespace(self.core, namespace, timeout=max(120.0, n * 0.5))
            if operator:
                operator.stop()
        result.wall_seconds = round(time.monotonic() - started, 1)
        return result

    def _warm_up(self, namespace: str, policy: str) -> None:
        """One job through, so the operator's watches are open before the clock starts."""
        self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, tpujob_manifest(WARM_UP, namespace, self.tpu, policy)
        )
        wait_for(
            lambda: len(self.core.list_namespaced_pod(namespace).items) >= self.pods,
            timeout=120,
            what="the warm-up job's pods",
            interval=0.2,
        )

    def _event_reasons(self, namespace: str) -> dict[str, int]:
        """`component/reason` -> Events in the namespace (after the counted window), repeats included; not
        the warm-up job's, posted before the window."""
        reasons: Counter[str] = Counter()
        for event in self.core.list_namespaced_event(namespace).items:
            if event.involved_object.name == WARM_UP:
                continue
            source = event.reporting_component or (event.source.component if event.source else "") or "?"
            reasons[f"{source}/{event.reason}"] += event.count or 1
        return dict(sorted(reasons.items()))

    def _create(self, phase: str, namespace: str, name: str, direct: Direct | None) -> float:
        sent = time.monotonic()
        if direct is not None:
            direct.submit(namespace, name)
        elif phase == "job-controller":
            self.batch.create_namespaced_job(namespace, job_manifest(name, namespace, self.tpu, self.pods))
        else:
            policy = phase.split("/")[1]
            manifest = tpujob_manifest(name, namespace, self.tpu, policy)
            self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, manifest)
        return sent

    def _processes(self, operator: OperatorProcess | None) -> dict[str, int]:
        pids = {k: v for k, v in self.bed.control_plane.pids.items() if k != "kube-scheduler"}
        if operator and operator.process:
            pids["controller"] = operator.process.pid
        return pids

    def _measure(
        self,
        n: int,
        phase: str,
        namespace: str,
        operator: OperatorProcess | None,
        direct: Direct | None,
        timeout: float,
    ) -> PhaseResult:
        resources = {"job-controller": JOB_CONTROLLER_RESOURCES, "direct": DIRECT_RESOURCES}.get(
            phase, OPERATOR_RESOURCES
        )
        pods = PodWatch(self.api, namespace, direct_job_of if direct else owner_of).start()
        profiler = apiserver_profile = None
        try:
            before = settle(self.api, resources)
            window_start, cpu_before = time.time(), cpu_of(self._processes(operator))
            if self.profile and operator and operator.process:
                profiler = start_profiler(operator.process.pid, self.profile / f"{namespace}.txt")
            if self.profile:
                output = self.profile / f"{namespace}.apiserver.pprof"
                apiserver_profile = ApiServerProfile(self.api, self.apiserver_profile_seconds, output)
            names = [f"j{i:05d}" for i in range(n)]
            with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
                times = pool.map(lambda name: self._create(phase, namespace, name, direct), names)
                sent = dict(zip(names, times, strict=True))
            try:
                wait_for(
                    lambda: len(set(pods.complete_at(self.pods)) & set(names)) == n,
                    timeout=timeout,
                    what=f"{n * self.pods} pods",
                    interval=0.2,
                )
            except Timeout as error:
                print(f"  ({error})", file=sys.stderr)
            if direct:
                direct.close()
            after = settle(self.api, resources)
            cpu_after, window_end = cpu_of(self._processes(operator)), time.time()
            if profiler:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(timeout=60)
            if apiserver_profile:
                apiserver_profile.wait()
            figures = proc_figures(operator.process.pid) if operator and operator.process else None
            events = self._event_reasons(namespace)
        finally:
            pods.stop()
        done = pods.complete_at(self.pods)
        latencies = [done[name] - sent[name] for name in names if name in done]
        requests = counted(after - before, resources)
        bench_creates = 0 if direct else n
        # Event POSTs beyond the Events the controller left in the phase's namespace came from other
        # components (apiserver_request_total has no user label).
        component = EVENT_COMPONENT if phase.startswith("operator") else "job-controller"
        own_events = sum(count for key, count in events.items() if key.split("/")[0] == component)
        other_events = max(0, requests.get("POST core/events", 0) - own_events)
        audit = self._audit(window_start, window_end)
        other_tpujob = others_in_audit(audit, {OPERATOR_USER}) if phase.startswith("operator") else 0
        total = sum(requests.values()) - bench_creates - other_events - other_tpujob
        span = max(done[name] for name in names if name in done) - min(sent.values()) if latencies else 0
        cpu = {name: cpu_after[name] - cpu_before[name] for name in cpu_after}
        if direct:
            cpu["controller"] = direct.cpu
        elif phase == "job-controller":
            cpu["controller"] = cpu["kube-controller-manager"]
        # Pods, + the headless Service (operator, direct), + the GKE node pool (policy create: not an API
        # server object, but what the finalizer write is for).
        objects = self.pods + {"operator/existing": 1, "direct": 1, "operator/create": 2}.get(phase, 0)
        result = PhaseResult(
            n=n,
            phase=phase,
            qps=self.qps,
            pods_per_job=self.pods,
            complete=len(latencies),
            p50=round(percentile(latencies, 50), 3) if latencies else None,
            p90=round(percentile(latencies, 90), 3) if latencies else None,
            p99=round(percentile(latencies, 99), 3) if latencies else None,
            jobs_per_second=round(len(latencies) / span, 1) if span else None,
            requests_per_job=round(total / n, 2),
            requests=requests,
            bench_creates_subtracted=bench_creates,
            objects_created_per_job=objects,
            other_components_events_subtracted=other_events,
            other_components_tpujob_requests_subtracted=other_tpujob,
            audit=audit,
            cpu_ms_per_job={name: round(seconds * 1000 / n, 2) for name, seconds in cpu.items()},
            events=events,
        )
        create_key = {"operator/existing": f"POST {c.GROUP}/{c.PLURAL}", "job-controller": "POST batch/jobs"}
        if requests.get(create_key.get(phase, "POST core/pods"), 0) < n:
            result.notes.append(f"fewer than {n} creates counted")
        if figures:
            result.rss_peak_mib, result.rss_settled_mib = round(figures[0], 1), round(figures[1], 1)
            result.cpu_seconds = round(figures[2], 2)
        return result

    def _audit(self, start: float, end: float) -> dict[str, int]:
        if self.audit_log is None or not self.audit_log.exists():
            return {}
        return audit_counts(self.audit_log.read_text().splitlines(), start, end)


def parse_env(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000], help="jobs per phase")
    parser.add_argument(
        "--qps",
        type=float,
        nargs="+",
        default=[0, 50],
        help="client-side request limit(s) for every controller, requests/s; 0: no limit",
    )
    parser.add_argument("--burst", type=int, help="their burst; default: 2 x qps")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each phase, alternating")
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the operator with py-spy in each counted window, and kube-apiserver's pprof over its "
        "first 20 s, into this folder",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--markdown", type=Path, help="write the tables here too")
    parser.add_argument("--no-audit", action="store_true", help="no API server audit log of TPUJob requests")
    parser.add_argument("--keep-audit", type=Path, help="copy each test bed's audit log into this folder")
    parser.add_argument("--operator-env", nargs="*", default=[], metavar="KEY=VALUE", help="for the operator")
    add_crd_server_argument(parser)
    parser.add_argument("--tpu", default="v5p:2x2x2", help="TYPE:TOPOLOGY of every job (one slice)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a phase's pods")
    args = parser.parse_args(argv)
    tpu_type, topology = args.tpu.split(":")
    results: list[PhaseResult] = []
    for requested in args.qps:
        qps, burst = limits(requested, args.burst)
        with tempfile.TemporaryDirectory(prefix="tpujob-bench-") as tmp:
            state = Path(tmp) / "sandbox"
            plane = ControlPlane(
                find_binaries(),
                state,
                controller_manager_flags=controller_manager_flags(qps, burst),
                audit=None if args.no_audit else (c.GROUP, c.PLURAL),
                crd_server=args.crd_server == "1.36",
            )
            # Instant GKE for policy create: the operator's own provisioning poll is what remains.
            bed = start_sandbox(state, time_scale=0.0, control_plane=plane.start())
            try:
                # Pods created is the metric: no scheduling, no kubelet (see the module docstring).
                stop_process(bed.control_plane.processes.pop("kube-scheduler"))
                bed.kubelet.stop()
                bench = Bench(
                    bed,
                    Path(tmp),
                    (tpu_type, topology),
                    qps,
                    burst,
                    args.profile,
                    parse_env(args.operator_env),
                )
                for n in args.n:
                    for repeat in range(args.repeats):
                        for phase in args.phases:
                            print(f"Q={qps:g} N={n} #{repeat + 1} {phase} ...", file=sys.stderr, flush=True)
                            result = bench.run(n, phase, args.timeout, repeat)
                            print(f"  {json.dumps(asdict(result))}", file=sys.stderr, flush=True)
                            results.append(result)
            finally:
                bed.stop()
                if args.keep_audit and plane.audit_log.exists():
                    args.keep_audit.mkdir(parents=True, exist_ok=True)
                    shutil.copy(plane.audit_log, args.keep_audit / f"audit-q{qps:g}.log")
    tables = report(results, command_line())
    print(tables)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(tables + "\n")
    write_json(args.json, results, tpu=args.tpu, operator_env=parse_env(args.operator_env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
