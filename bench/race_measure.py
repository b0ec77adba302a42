"""What bench/operator_bench.py measures, and how: the API server's request counter, its audit log, a pod
watch as the one clock, /proc for CPU and memory, and the namespaces each phase runs in."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from prometheus_client.parser import text_string_to_metric_families

from tpujob_sandbox import Timeout, wait_for

SETTLE_SECONDS = 3.0
SETTLE_TIMEOUT = 90.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
BENCH_USER = "admin"  # the sandbox's admin: the bench's own requests

# --- the API server's request counter -------------------------------------------------------------

RequestKey = tuple[str, str, str, str]  # verb, group, resource, subresource


def _metrics(api: k8s.ApiClient) -> str:
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    return str(response.data.decode())


def scrape_requests(api: k8s.ApiClient) -> Counter[RequestKey]:
    """apiserver_request_total summed over codes, scopes and versions. Mind: 1.20 labels a GET of one
    custom resource (e.g. GET tpujobs/NAME) LIST (kubernetes/kubernetes#95556); the audit log has the true
    verb."""
    counts: Counter[RequestKey] = Counter()
    for family in text_string_to_metric_families(_metrics(api)):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            key = (labels["verb"], labels["group"], labels["resource"], labels.get("subresource", ""))
            counts[key] += int(sample.value)
    return counts


def add_crd_server_argument(parser: Any) -> None:
    """--crd-server, as every bench on the test bed takes it (ControlPlane.crd_server)."""
    parser.add_argument(
        "--crd-server",
        choices=("1.36", "in-process"),
        default="1.36",
        help=(
            "who serves the TPUJobs: 1.36, the test bed's Kubernetes 1.36 CRD server behind kube-apiserver's "
            "aggregator (default); in-process, kube-apiserver 1.20's own CRD server, as GKE's runs inside "
            "kube-apiserver (no hop)"
        ),
    )


def crd_server_metrics(plane: Any) -> str:
    """The 1.36 CRD server's own /metrics (a TPUJob watch through the aggregator is counted there, not in
    kube-apiserver's, whose metrics count only what it serves itself), asked as the front proxy asks."""
    pki = plane.state_dir / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "front-proxy-client.crt", pki / "front-proxy-client.key")
    request = urllib.request.Request(
        f"https://127.0.0.1:{plane.ports.crd_server}/metrics",
        headers={"X-Remote-User": "admin", "X-Remote-Group": "system:masters"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return response.read().decode()  # type: ignore[no-any-return]


def open_watches(api: k8s.ApiClient, group: str, resource: str, plane: Any = None) -> int:
    """Watches of a resource open on the API server that serves it now (apiserver_longrunning_gauge; 1.36
    names it apiserver_longrunning_requests). `plane`: a control plane whose CRD server serves it."""
    serves_crds = plane is not None and getattr(plane, "serves_crds", False)
    text = crd_server_metrics(plane) if serves_crds else _metrics(api)
    for family in text_string_to_metric_families(text):
        if family.name in ("apiserver_longrunning_gauge", "apiserver_longrunning_requests"):
            return int(
                sum(
                    s.value
                    for s in family.samples
                    if s.labels.get("verb") == "WATCH"
                    and s.labels.get("group") == group
                    and s.labels.get("resource") == resource
                )
            )
    return 0


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


# --- the audit log: who made them ------------------------------------------------------------------


def audit_counts(lines: list[str], start: float, end: float) -> dict[str, int]:
    """`user verb` -> completed requests received in [start, end] (Unix seconds), from the API server's
    JSON audit log lines."""
    counts: Counter[str] = Counter()
    for line in lines:
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if start <= received.timestamp() <= end:
            counts[f"{event['user']['username']} {event['verb']}"] += 1
    return dict(sorted(counts.items()))


def audit_kinds(lines: list[str], start: float, end: float, user: str) -> dict[str, int]:
    """`verb resource[/subresource]` -> completed requests of `user` received in [start, end] (Unix
    seconds), from the API server's JSON audit log lines; the most frequent first."""
    counts: Counter[str] = Counter()
    for line in lines:
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event["user"]["username"] != user:
            continue
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if start <= received.timestamp() <= end:
            ref = event.get("objectRef") or {}
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            counts[f"{event['verb']} {ref.get('resource', event['requestURI'])}{sub}"] += 1
    return dict(counts.most_common())


def others_in_audit(counts: dict[str, int], own_users: set[str]) -> int:
    """Audited requests of users other than the controller under test and the bench."""
    return sum(n for key, n in counts.items() if key.rsplit(" ", 1)[0] not in own_users | {BENCH_USER})


# --- the pod watch: the same clock for every controller ---------------------------------------------


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


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


# --- processes --------------------------------------------------------------------------------------


def proc_figures(pid: int) -> tuple[float, float, float]:
    """(peak RSS, RSS now, both in MiB; CPU seconds) of a live process."""
    status = Path(f"/proc/{pid}/status").read_text()

    def kib(key: str) -> int:
        return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(key))

    return kib("VmHWM:") / 1024, kib("VmRSS:") / 1024, cpu_seconds(pid)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (fields 14 and 15 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` until SIGINT, only threads holding the GIL (Python's CPU, not its waits):
    collapsed stacks (one line per stack, with its samples) in `output`, for bench/profile_report.py."""
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--rate", "200"]
    command += ["--format", "raw", "--output", str(output), "--nonblocking", "--gil"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class ApiServerProfile:
    """kube-apiserver's own CPU profile (Go pprof, `--profiling` is on by default) over `seconds`, fetched on
    a thread into `output`; bench/apiserver_report.py reads it."""

    def __init__(self, api: k8s.ApiClient, seconds: int, output: Path) -> None:
        output.parent.mkdir(parents=True, exist_ok=True)
        self.thread = threading.Thread(target=self._fetch, args=(api, seconds, output), daemon=True)
        self.thread.start()

    @staticmethod
    def _fetch(api: k8s.ApiClient, seconds: int, output: Path) -> None:
        response = api.call_api(
            "/debug/pprof/profile",
            "GET",
            query_params=[("seconds", seconds)],
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=seconds + 60,
        )
        output.write_bytes(response.data)

    def wait(self) -> None:
        self.thread.join()


# --- namespaces, limits, output ---------------------------------------------------------------------


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


def limits(qps: float, burst: int | None) -> tuple[float, int]:
    """The (QPS, burst) every controller gets for `--qps qps`; 0 is no limit."""
    if qps == 0:
        return 0, 1
    return qps, burst or max(1, round(2 * qps))


def controller_manager_flags(qps: float, burst: int) -> tuple[str, ...]:
    if qps == 0:
        return ("--kube-api-qps=10000", "--kube-api-burst=10000")
    return (f"--kube-api-qps={qps:g}", f"--kube-api-burst={burst}")


def command_line() -> str:
    return " ".join([".venv/bin/python", *sys.argv])


def provenance() -> dict[str, Any]:
    """When, on what code and on what machine figures were measured: what a table made from them shows
    beside it (scripts/bench_tables.py)."""
    folder = Path(__file__).parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_kib = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        memory_kib = int(Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1])
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": {"cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(memory_kib / 2**20, 1)},
    }


def write_json(path: Path | None, results: list[Any], **facts: Any) -> None:
    """The figures as JSON, with the command that made them, when, on what code and machine (every
    bench's)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": command_line(),
        **provenance(),
        **facts,
        "results": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
