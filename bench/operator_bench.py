"""The operator against Kubernetes' own Job controller, on one control plane, in one run.

    .venv/bin/python bench/operator_bench.py --qps 0 50 --n 100 1000 --json bench/results/operator.json

One test bed (the sandbox: real kube-apiserver 1.20, etcd, kube-controller-manager; simulated GKE) per
client-side limit Q (`--qps`). For each N, three phases run one after the other, each in a fresh namespace:

  operator/existing  N TPUJobs, policy existing: no GKE call at all
  operator/create    N TPUJobs, policy create, the simulated GKE provisions instantly (0 s)
  job-controller     N batch/v1 Jobs, parallelism = completions = pods per TPUJob, handled by the real
                     kube-controller-manager's Job controller (its default --concurrent-job-syncs 5)

Equal footing: both controllers get the same client-side request limit, Q requests a second with a burst
of 2 Q (`--burst` to change it): kube-controller-manager through --kube-api-qps / --kube-api-burst, the
operator through TPUJOB_API_QPS / TPUJOB_API_BURST. Q = 0 means no limit: the operator's limiter off, and
kube-controller-manager at 10000 / 10000 (client-go reads a QPS of 0 as its default of 5, not as no limit).

What is measured, identically for both controllers:
- create -> all pods created, per job: from just before the bench sends the job's create request to the
  moment a pod watch in this process has seen the job's last pod (ADDED). p50/p90/p99 over the N jobs.
- jobs per second: N / (first create sent -> last job's pods all seen).
- API requests per job: the API server's own `apiserver_request_total`, scraped before the creates and
  after the phase has settled (no counted request for 3 s), restricted to the resources the controller
  reads or writes (operator: tpujobs, tpujobs/status, pods, services, events; Job controller: jobs,
  jobs/status, pods, events), minus the bench's own N creates, divided by N. Every verb counts (POST,
  PATCH, PUT, GET, LIST, WATCH); the breakdown is in the JSON. 1.20's counter has no user label, so the
  phases run alone: nothing else touches those resources meanwhile (the bench's pod watch is opened
  before and closed after the window; the simulated GKE's node registrations are `nodes`, not counted),
  except Events other components post (the endpoints controller's): event POSTs beyond the Events the
  controller under test left in the phase's namespace are subtracted, and reported in the JSON.
- the operator's peak RSS (VmHWM) and CPU seconds (utime + stime) from /proc, read when the phase settled.
  One fresh operator process per phase, so each figure is for N live TPUJobs.

The scheduler and the simulated kubelet are stopped for the whole run: the metric is pods *created*, and
scheduling and the kubelet are the same code for both controllers (on 2 cores they would only add noise).
So no nodes are pre-registered for policy existing: the operator never reads nodes, and an unscheduled
pod looks the same to both controllers. Each job is one TPU slice of `--tpu` (default v5p 2x2x2: 2
hosts, so 2 pods per job); the Jobs' pod template is the operator's own rendered pod (same image, env,
labels, resources), so both sides create the same pods.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from prometheus_client.parser import text_string_to_metric_families

from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.reconciler import EVENT_COMPONENT
from tpujob.render import Cluster
from tpujob.render import plan as render
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

WARM_UP = "warm-up"  # the job each operator phase runs first, outside the counted window
OPERATOR_RESOURCES = {(c.GROUP, c.PLURAL), ("", "pods"), ("", "services"), ("", "events")}
JOB_CONTROLLER_RESOURCES = {("batch", "jobs"), ("", "pods"), ("", "events")}
SETTLE_SECONDS = 3.0
SETTLE_TIMEOUT = 90.0
CREATE_THREADS = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")
# policy create last: its cleanup (thousands of simulated nodes) is the heaviest.
PHASES = ("operator/existing", "job-controller", "operator/create")


# --- the API server's request counter -------------------------------------------------------------


RequestKey = tuple[str, str, str, str]  # verb, group, resource, subresource


def scrape_requests(api: k8s.ApiClient) -> Counter[RequestKey]:
    """apiserver_request_total summed over codes, scopes and versions."""
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    counts: Counter[RequestKey] = Counter()
    for family in text_string_to_metric_families(response.data.decode()):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            key = (labels["verb"], labels["group"], labels["resource"], labels.get("subresource", ""))
            counts[key] += int(sample.value)
    return counts


def counted(delta: Counter[RequestKey], resources: set[tuple[str, str]]) -> dict[str, int]:
    """`VERB group/resource[/subresource]` -> requests, for the controller's resources only."""
    out: dict[str, int] = {}
    for (verb, group, resource, subresource), value in sorted(delta.items()):
        if value and (group, resource) in resources:
            name = f"{verb} {group or 'core'}/{resource}{'/' + subresource if subresource else ''}"
            out[name] = value
    return out


def settle(api: k8s.ApiClient, resources: set[tuple[str, str]]) -> Counter[RequestKey]:
    """Scrape until the controller's request counts stay unchanged for SETTLE_SECONDS (bounded)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last = scrape_requests(api)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = scrape_requests(api)
        if counted(now - last, resources):
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= SETTLE_SECONDS:
            return now
    print(f"  (still making requests after {SETTLE_TIMEOUT:.0f} s; counted as is)", file=sys.stderr)
    return last


# --- the pod watch: the same clock for both controllers -------------------------------------------


def owner_of(pod: dict[str, Any]) -> str | None:
    """The job a pod counts for as soon as it exists: its owner (the TPUJob or the Job)."""
    owners = pod["metadata"].get("ownerReferences") or []
    return owners[0]["name"] if owners else None


class PodWatch:
    """When each pod in a namespace was first seen counting for a job (`job_of`: the job's name, or None
    while the pod does not count yet; default: its owner, from its first event), grouped by that job."""

    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        job_of: Callable[[dict[str, Any]], str | None] = owner_of,
    ) -> None:
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.job_of = job_of
        self.first_seen: dict[str, float] = {}
        self.job: dict[str, str] = {}
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"podwatch-{namespace}", daemon=True)
        self._ready = threading.Event()
        self._stopping = threading.Event()

    def start(self) -> PodWatch:
        self._thread.start()
        if not self._ready.wait(30):
            raise Timeout("the pod watch did not open")
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._response is not None:
            with contextlib.suppress(Exception):  # closing a finished stream
                self._response.shutdown()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        version = self.core.list_namespaced_pod(self.namespace).metadata.resource_version
        while not self._stopping.is_set():
            self._response = self.core.list_namespaced_pod(
                self.namespace,
                watch=True,
                resource_version=version,
                timeout_seconds=900,
                _preload_content=False,
            )
            self._ready.set()
            try:
                for line in watch.watch.iter_resp_lines(self._response):
                    seen = time.monotonic()
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        return
                    version = event["object"]["metadata"]["resourceVersion"]
                    self.record(event["object"], seen)
            except Exception:  # shut down by stop(), or the stream ended: reopen
                if self._stopping.is_set():
                    return

    def record(self, pod: dict[str, Any], seen: float) -> None:
        name = pod["metadata"]["name"]
        job = self.job_of(pod)
        with self._lock:
            if name not in self.first_seen and job is not None:
                self.first_seen[name] = seen
                self.job[name] = job

    def complete_at(self, pods_per_job: int) -> dict[str, float]:
        """Job name -> when its last pod was first seen, for jobs with all their pods."""
        with self._lock:
            by_job: dict[str, list[float]] = {}
            for pod, seen in self.first_seen.items():
                by_job.setdefault(self.job[pod], []).append(seen)
        return {job: max(times) for job, times in by_job.items() if len(times) >= pods_per_job}


# --- the objects --------------------------------------------------------------------------------


def tpujob_manifest(name: str, namespace: str, tpu: tuple[str, str], policy: str) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tpu": {"type": tpu[0], "topology": tpu[1]},
            "nodePool": {"policy": policy},
            "trainer": {"image": "tpujob-trainer:bench", "args": ["--steps", "10"]},
        },
    }


def job_manifest(name: str, namespace: str, tpu: tuple[str, str], pods: int) -> dict[str, Any]:
    """A batch/v1 Job whose pod template is the operator's own rendered pod (worker 0) for the same job."""
    job = parse_tpujob(tpujob_manifest(name, namespace, tpu, "existing"))
    pod = render.pod(job, Cluster(), 0, 0)
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k != c.LABEL_MANAGED_BY}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def pods_per_job(tpu: tuple[str, str]) -> int:
    return render.slice_shape(parse_tpujob(tpujob_manifest("x", "x", tpu, "existing"))).hosts


# --- one phase ----------------------------------------------------------------------------------


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
    # Events other components posted meanwhile (the endpoints controller's, about the headless Services):
    # in `requests`, not in requests_per_job.
    other_components_events_subtracted: int = 0
    rss_peak_mib: float | None = None
    rss_settled_mib: float | None = None
    cpu_seconds: float | None = None
    wall_seconds: float = 0.0
    events: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def create_namespace(core: k8s.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})

    def account_ready() -> bool:
        found = core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
        return bool(found and found[0].secrets)

    wait_for(account_ready, timeout=60, what=f"the default service account of {name}")


def delete_namespace(core: k8s.CoreV1Api, name: str, timeout: float) -> None:
    core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except k8s.ApiException as error:
            return bool(error.status == 404)
        return False

    try:
        wait_for(gone, timeout=timeout, what=f"namespace {name} to be deleted", interval=1.0)
    except Timeout as error:
        print(f"  ({error}; going on)", file=sys.stderr)


def proc_figures(pid: int) -> tuple[float, float, float]:
    """(peak RSS, RSS now, both in MiB; CPU seconds) of a live process."""
    status = Path(f"/proc/{pid}/status").read_text()

    def kib(key: str) -> int:
        return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(key))

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)
    return kib("VmHWM:") / 1024, kib("VmRSS:") / 1024, cpu


def limits(qps: float, burst: int | None) -> tuple[float, int]:
    """The (QPS, burst) both controllers get for `--qps qps`; 0 is no limit."""
    if qps == 0:
        return 0, 1
    return qps, burst or max(1, round(2 * qps))


def controller_manager_flags(qps: float, burst: int) -> tuple[str, ...]:
    if qps == 0:
        return ("--kube-api-qps=10000", "--kube-api-burst=10000")
    return (f"--kube-api-qps={qps:g}", f"--kube-api-burst={burst}")


def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` until SIGINT, only threads holding the GIL (Python's CPU, not its waits):
    collapsed stacks (one line per stack, with its samples) in `output`, for bench/profile_report.py."""
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", "200"]
    command += ["--format", "raw", "--output", str(output), "--nonblocking", "--gil"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Bench:
    def __init__(
        self,
        bed: Sandbox,
        folder: Path,
        tpu: tuple[str, str],
        qps: float = 0,
        burst: int = 1,
        profile: Path | None = None,
    ) -> None:
        self.bed = bed
        self.profile = profile
        self.qps, self.burst = qps, burst
        self.api = bed.api_client
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.batch = k8s.BatchV1Api(self.api)
        self.folder = folder
        self.tpu = tpu
        self.pods = pods_per_job(tpu)
        install_crd(bed)
        self.kubeconfig = operator_kubeconfig(bed, folder / "operator.kubeconfig")

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
        }

    def run(self, n: int, phase: str, timeout: float) -> PhaseResult:
        namespace = f"bench-{phase.replace('/', '-')}-{n}"
        create_namespace(self.core, namespace)
        operator = None
        started = time.monotonic()
        try:
            if phase.startswith("operator/"):
                operator = OperatorProcess(self.operator_env(), self.folder / f"{namespace}.log").start()
                self._warm_up(namespace, phase.split("/")[1])
                resources = OPERATOR_RESOURCES
            else:
                resources = JOB_CONTROLLER_RESOURCES
            result = self._measure(n, phase, namespace, resources, operator, timeout)
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

    def _create(self, phase: str, namespace: str, name: str) -> float:
        sent = time.monotonic()
        if phase == "job-controller":
            self.batch.create_namespaced_job(namespace, job_manifest(name, namespace, self.tpu, self.pods))
        else:
            policy = phase.split("/")[1]
            manifest = tpujob_manifest(name, namespace, self.tpu, policy)
            self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, manifest)
        return sent

    def _measure(
        self,
        n: int,
        phase: str,
        namespace: str,
        resources: set[tuple[str, str]],
        operator: OperatorProcess | None,
        timeout: float,
    ) -> PhaseResult:
        pods = PodWatch(self.api, namespace).start()
        profiler = None
        try:
            before = settle(self.api, resources)
            if self.profile and operator and operator.process:
                profiler = start_profiler(operator.process.pid, self.profile / f"{namespace}.txt")
            names = [f"j{i:05d}" for i in range(n)]
            with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
                times = pool.map(lambda name: self._create(phase, namespace, name), names)
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
            after = settle(self.api, resources)
            if profiler:
                profiler.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                profiler.wait(timeout=60)
            figures = proc_figures(operator.process.pid) if operator and operator.process else None
            events = self._event_reasons(namespace)
        finally:
            pods.stop()
        done = pods.complete_at(self.pods)
        latencies = [done[name] - sent[name] for name in names if name in done]
        requests = counted(after - before, resources)
        create_key = f"POST {c.GROUP}/{c.PLURAL}" if phase.startswith("operator") else "POST batch/jobs"
        # Event POSTs beyond the Events the controller left in the phase's namespace came from other
        # components (apiserver_request_total has no user label).
        component = EVENT_COMPONENT if phase.startswith("operator") else "job-controller"
        own_events = sum(count for key, count in events.items() if key.split("/")[0] == component)
        others = max(0, requests.get("POST core/events", 0) - own_events)
        total = sum(requests.values()) - n - others
        span = max(done[name] for name in names if name in done) - min(sent.values()) if latencies else 0
        # Pods, + the headless Service (operator), + the GKE node pool (policy create: not an API server
        # object, but what the finalizer write is for).
        objects = self.pods + {"operator/existing": 1, "operator/create": 2}.get(phase, 0)
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
            bench_creates_subtracted=n,
            objects_created_per_job=objects,
            other_components_events_subtracted=others,
            events=events,
        )
        if requests.get(create_key, 0) < n:
            result.notes.append(f"fewer than {n} {create_key} counted")
        if figures:
            result.rss_peak_mib, result.rss_settled_mib = round(figures[0], 1), round(figures[1], 1)
            result.cpu_seconds = round(figures[2], 2)
        return result


# --- the report -----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _rss(r: PhaseResult) -> str:
    return "-" if r.rss_peak_mib is None else f"{r.rss_peak_mib:.0f} / {_fmt(r.rss_settled_mib, 0)}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def table(results: list[PhaseResult]) -> str:
    lines = [
        "| Q | N | controller | pods | p50 s | p90 s | p99 s | jobs/s | API req/job | objects/job "
        "| RSS peak / settled MiB | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.qps:g} | {r.n} | {r.phase} | {r.complete * r.pods_per_job} | {_fmt(r.p50)} "
            f"| {_fmt(r.p90)} | {_fmt(r.p99)} | {_fmt(r.jobs_per_second, 1)} | {_fmt(r.requests_per_job, 1)} "
            f"| {r.objects_created_per_job} | {_rss(r)} | {_fmt(r.cpu_seconds, 1)} |"
        )
    lines += ["", "Ratios operator / Job controller:", ""]
    lines += ["| Q | N | operator | p50 | p99 | jobs/s | API req/job |", "|---|---|---|---|---|---|---|"]
    by_key = {(r.qps, r.n, r.phase): r for r in results}
    for r in results:
        base = by_key.get((r.qps, r.n, "job-controller"))
        if not r.phase.startswith("operator") or base is None:
            continue
        lines.append(
            f"| {r.qps:g} | {r.n} | {r.phase.split('/')[1]} | {_ratio(r.p50, base.p50)} "
            f"| {_ratio(r.p99, base.p99)} "
            f"| {_ratio(r.jobs_per_second, base.jobs_per_second)} "
            f"| {_ratio(r.requests_per_job, base.requests_per_job)} |"
        )
    return "\n".join(lines)


def write_json(path: Path | None, results: list[Any], **facts: Any) -> None:
    """The figures as JSON, with the command that made them and the machine's CPU count (every bench's)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cpus": os.cpu_count()},
        **facts,
        "results": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000], help="jobs per phase")
    parser.add_argument(
        "--qps",
        type=float,
        nargs="+",
        default=[0, 50],
        help="client-side request limit(s) for both controllers, requests/s; 0: no limit",
    )
    parser.add_argument("--burst", type=int, help="their burst; default: 2 x qps")
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the operator with py-spy in each counted window, into this folder",
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--tpu", default="v5p:2x2x2", help="TYPE:TOPOLOGY of every job (one slice)")
    parser.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a phase's pods")
    args = parser.parse_args(argv)
    tpu_type, topology = args.tpu.split(":")
    results: list[PhaseResult] = []
    for requested in args.qps:
        qps, burst = limits(requested, args.burst)
        with tempfile.TemporaryDirectory(prefix="tpujob-bench-") as tmp:
            state = Path(tmp) / "sandbox"
            plane = ControlPlane(
                find_binaries(), state, controller_manager_flags=controller_manager_flags(qps, burst)
            )
            # Instant GKE for policy create: the operator's own provisioning poll is what remains.
            bed = start_sandbox(state, time_scale=0.0, control_plane=plane.start())
            try:
                # Pods created is the metric: no scheduling, no kubelet (see the module docstring).
                stop_process(bed.control_plane.processes.pop("kube-scheduler"))
                bed.kubelet.stop()
                bench = Bench(bed, Path(tmp), (tpu_type, topology), qps, burst, args.profile)
                for n in args.n:
                    for phase in args.phases:
                        print(f"Q={qps:g} N={n} {phase} ...", file=sys.stderr, flush=True)
                        result = bench.run(n, phase, args.timeout)
                        print(f"  {json.dumps(asdict(result))}", file=sys.stderr, flush=True)
                        results.append(result)
            finally:
                bed.stop()
    print(table(results))
    write_json(args.json, results, tpu=args.tpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
