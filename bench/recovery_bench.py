"""How long a TPUJob takes to recover from a failure, split into its steps, against the floor.

    .venv/bin/python bench/recovery_bench.py --json bench/results/recovery.json

One test bed (tpujob_sandbox.start_sandbox at the tests' GKE time scale, 0.002: real kube-apiserver 1.20,
scheduler and controller-manager; simulated GKE, kubelet and TPU device plugin) and the operator as the
e2e tests run it (its own process, the test bed's settings: resync 2 s; the restart backoff 0.01 s instead
of 10 s, as it doubles with every counted restart: the figures are the mechanism's, not the backoff
policy's). Each pod runs bench/recovery_worker.py
as a local process: it steps every 0.1 s and logs each step with its attempt.

Jobs: v5p 2x2x4 (4 hosts per slice), 1 slice and 4 slices. Faults, each on slice 1 (slice 0 of the
one-slice job), worker 0, once the job runs and every worker has stepped:
  crash    the trainer exits 1 (the simulated kubelet reports the container's exit): a counted restart;
  reclaim  spot reclaim of the slice (TPU VMs go as a slice: every node of its pool shuts down, pods get
           their grace, the nodes go; GKE brings the VMs back after 60 s of GKE time, 0.12 s here);
  hang     the pod's libtpu reports a Megascale hang; the device plugin sets MegascaleHangDetected on the
           node at its next collection (1 s here).
Strategies: Recreate (every pod recreated: what main does today) and RecreateSlice (only the failed slice's
pods recreated, the others restart their worker in place); a one-slice job has nothing to keep, so only
Recreate is run for it. Hang signals restart the whole job under both.

Marks per run, seconds from the fault (the bench polls the API every 50 ms; steps read from the logs):
  detected    the job's status says Restarting (or a later attempt),
  torn down   no pod the restart replaces is still running or pending,
  created     every worker of the new attempt has a pod (kept pods count),
  running     every such pod is Running (the kubelet's word; the job's status follows),
  first step  every worker has logged a step of the new attempt (its log's own time).
The split is detection, teardown (detected -> torn down), pod creation (torn down -> created, 0 when the
operator created them before the old ones were gone) and start (created or torn down -> first step).
And the operator's own figure, `live`: the restart's status.restartHistory record, from the fault the operator
saw to the new attempt's first step it read from worker 0 (recoverySeconds, what tpujob_recovery_seconds
observes), set beside the bench's `from_detection` (detected -> first step); absent when worker 0 kept its
pod through a RecreateSlice restart (its pod's attempt is the old one).
Median of `--runs` (3) with min-max; RecreateSlice's crash runs `--in-a-row` (10) faults in a row on one
job, the job must be Running after each.

The floor: the same pods (tpujob.render.plan.pod) created from scratch by a bare client on the same nodes,
the operator stopped: from the create requests to all Running and to every worker's first step. For the
whole job and for one slice's pods.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.render import Cluster
from tpujob.render import plan as render
from tpujob_sandbox import OperatorProcess, Sandbox, start_sandbox, wait_for
from tpujob_sandbox.operators import install_crd, operator_env
from tpujob_sandbox.pytest_plugin import TIME_SCALE

WORKER = Path(__file__).resolve().parent / "recovery_worker.py"
IMAGE = "tpujob-jax:recovery-bench"  # a local image: the simulated kubelet runs its command as a process
HOSTS = 4
RECLAIM_RECREATE_GKE_SECONDS = 60.0
POLL_SECONDS = 0.05
MARKS = ("detected", "torn_down", "created", "running", "first_step")


def job_manifest(name: str, namespace: str, slices: int, strategy: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tpu": {"type": "v5p", "topology": "2x2x4", "slices": slices},
            "trainer": {"image": IMAGE, "command": ["python", str(WORKER)]},
            "runPolicy": {"restartStrategy": strategy, "maxRestarts": 100},
        },
    }


@dataclass
class Run:
    job: str
    fault: str
    strategy: str
    marks: dict[str, float] = field(default_factory=dict)

    def split(self) -> dict[str, float]:
        return split(self.marks)


def split(m: dict[str, float]) -> dict[str, float]:
    """Detection, teardown, pod creation and start (to every worker's first step), and the two totals. The
    process steps before the API shows its pod Running (the kubelet reports after it started it), so the
    start runs to the first step, and `to_running` is the API's view."""
    return {
        "detection": m["detected"],
        "teardown": max(m["torn_down"] - m["detected"], 0.0),
        "pod_creation": max(m["created"] - m["torn_down"], 0.0),
        "start": max(m["first_step"] - max(m["created"], m["torn_down"]), 0.0),
        "to_running": m["running"],
        "to_first_step": m["first_step"],
        **(
            {"from_detection": m["first_step"] - m["detected"], "live": m["live"]}
            if m.get("live") is not None
            else {}
        ),
    }


class Bed:
    def __init__(self, sandbox: Sandbox, folder: Path) -> None:
        self.sandbox = sandbox
        self.folder = folder
        self.core = k8s.CoreV1Api(sandbox.api_client)
        self.custom = k8s.CustomObjectsApi(sandbox.api_client)
        install_crd(sandbox)
        self.operator: OperatorProcess | None = None

    def start_operator(self) -> None:
        # The restart backoff as small as the setting allows: a counted crash's backoff doubles with every
        # restart (0.5 s on the test bed would reach 256 s at the 10th), and it is policy, not mechanism.
        env = {**operator_env(self.sandbox, self.folder), "TPUJOB_RESTART_BACKOFF_SECONDS": "0.01"}
        self.operator = OperatorProcess(env, self.folder / "operator.log")
        self.operator.start()

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop()
            self.operator = None

    def delete_job(self, namespace: str, name: str, timeout: float) -> None:
        """The job, its pods and its pools gone (the operator's finalizer gives the pools back)."""
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
        wait_for(
            lambda: (
                not self.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)[
                    "items"
                ]
                and not self.pods(namespace, name)
            ),
            timeout=timeout,
            what=f"{namespace}/{name} deleted",
        )

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        job = self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
        return dict(job.get("status") or {})

    def pods(self, namespace: str, name: str) -> list[Any]:
        selector = f"{c.LABEL_JOB_NAME}={name}"
        return list(self.core.list_namespaced_pod(namespace, label_selector=selector).items)

    def first_step(self, namespace: str, pod: str, attempt: int, after: float) -> float | None:
        """When the pod's worker logged its first step of `attempt` after `after` (Unix seconds)."""
        path = self.sandbox.kubelet.log_path(namespace, pod)
        if not path.exists():
            return None
        for line in path.read_text(errors="replace").splitlines():
            parts = line.split()
            if (
                len(parts) == 6
                and parts[0] == "step"
                and parts[3] == str(attempt)
                and float(parts[5]) > after
            ):
                return float(parts[5])
        return None


def serving(status: dict[str, Any], pod: Any) -> bool:
    labels = pod.metadata.labels
    slice_attempts = status.get("sliceAttempts") or []
    slice_index, attempt = int(labels[c.LABEL_SLICE]), int(labels[c.LABEL_ATTEMPT])
    wanted = slice_attempts[slice_index] if slice_index < len(slice_attempts) else status.get("attempt", 0)
    return attempt == wanted and pod.metadata.deletion_timestamp is None


def wait_trained(
    bed: Bed, namespace: str, name: str, workers: int, since: float, timeout: float
) -> dict[str, Any]:
    """The job Running with every worker of its attempt stepping (after `since`); returns its status."""

    def trained() -> dict[str, Any] | None:
        status = bed.status(namespace, name)
        if status.get("phase") != "Running":
            return None
        current = [p for p in bed.pods(namespace, name) if serving(status, p) and p.status.phase == "Running"]
        if len(current) != workers:
            return None
        attempt = status.get("attempt", 0)
        steps = [bed.first_step(namespace, p.metadata.name, attempt, since) for p in current]
        return status if all(s is not None for s in steps) else None

    found: dict[str, Any] = wait_for(
        trained, timeout=timeout, what=f"{name} Running and stepping", interval=POLL_SECONDS
    )
    return found


def inject(bed: Bed, namespace: str, name: str, fault: str, status: dict[str, Any]) -> None:
    victim = next(
        p
        for p in bed.pods(namespace, name)
        if serving(status, p)
        and p.metadata.labels[c.LABEL_SLICE] == ("1" if len(status["nodePools"]) > 1 else "0")
        and p.metadata.labels[c.LABEL_WORKER] == "0"
    )
    if fault == "crash":
        bed.sandbox.kubelet.fail(namespace, victim.metadata.name, exit_code=1, message="bench crash")
    elif fault == "reclaim":
        pool = victim.spec.node_selector[c.NODE_LABEL_NODEPOOL]
        bed.sandbox.preempt_slice(pool, recreate_after=RECLAIM_RECREATE_GKE_SECONDS)
    else:
        bed.sandbox.gke.device_plugin.report_megascale_hang(namespace, victim.metadata.name)


def measure(
    bed: Bed, namespace: str, name: str, fault: str, workers: int, timeout: float
) -> dict[str, float]:
    """Inject the fault, then poll until every worker of the next attempt has stepped: the marks."""
    before = wait_trained(bed, namespace, name, workers, 0.0, timeout)
    old_attempt = before.get("attempt", 0)
    t0 = time.time()
    inject(bed, namespace, name, fault, before)
    marks: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(marks) < len(MARKS):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}/{fault}: only {sorted(marks)} after {timeout} s")
        now = time.time() - t0
        status = bed.status(namespace, name)
        attempt = status.get("attempt", 0)
        if "detected" not in marks and (status.get("phase") == "Restarting" or attempt > old_attempt):
            marks["detected"] = now
        if "detected" in marks and attempt > old_attempt:
            pods = bed.pods(namespace, name)
            current = [p for p in pods if serving(status, p)]
            replaced = [
                p for p in pods if not serving(status, p) and p.status.phase in ("Running", "Pending")
            ]
            if "torn_down" not in marks and not replaced:
                marks["torn_down"] = now
            if "created" not in marks and len(current) == workers:
                marks["created"] = now
            running = [p for p in current if p.status.phase == "Running"]
            if "running" not in marks and len(running) == workers:
                marks["running"] = now
            if "running" in marks and "first_step" not in marks:
                steps = [bed.first_step(namespace, p.metadata.name, attempt, t0) for p in running]
                if all(s is not None for s in steps):
                    marks["first_step"] = max(s for s in steps if s is not None) - t0
        time.sleep(POLL_SECONDS)
    live = live_recovery(bed, namespace, name, old_attempt)
    if live is not None:
        marks["live"] = live
    return marks


def live_recovery(bed: Bed, namespace: str, name: str, old_attempt: int, timeout: float = 20) -> float | None:
    """The operator's recoverySeconds of the restart after `old_attempt`, once it has read a step of the new
    attempt (within one progress read); None if it has none by then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = bed.status(namespace, name).get("restartHistory") or []
        record = next((r for r in history if r["attempt"] == old_attempt + 1), None)
        if record is not None and record.get("recoverySeconds") is not None:
            return float(record["recoverySeconds"])
        time.sleep(POLL_SECONDS)
    return None


def floor(bed: Bed, namespace: str, name: str, slices: list[int], timeout: float) -> dict[str, float]:
    """The operator stopped and the job's pods deleted; the same pods of `slices` created by a bare client
    on the same nodes: seconds to all Running and to every worker's first step."""
    job = parse_tpujob(bed.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name))
    cluster = Cluster(
        bed.sandbox.gke.project, bed.sandbox.gke.location, bed.sandbox.gke.cluster, bed.sandbox.default_zone
    )
    bodies = [render.pod(job, cluster, s, w, 90 + len(slices)) for s in slices for w in range(HOSTS)]
    for body in bodies:
        body["metadata"]["labels"][c.LABEL_JOB_NAME] = f"{name}-floor"
        body["metadata"].pop("ownerReferences", None)
    t0 = time.time()
    for body in bodies:
        bed.core.create_namespaced_pod(namespace, body)
    names = [b["metadata"]["name"] for b in bodies]

    def running() -> bool:
        pods = [bed.core.read_namespaced_pod(n, namespace) for n in names]
        return all(p.status.phase == "Running" for p in pods)

    wait_for(running, timeout=timeout, what="the floor's pods Running", interval=POLL_SECONDS)
    to_running = time.time() - t0
    attempt = 90 + len(slices)

    def stepped() -> list[float] | None:
        steps = [bed.first_step(namespace, n, attempt, t0) for n in names]
        return [s for s in steps if s is not None] if all(s is not None for s in steps) else None

    steps = wait_for(stepped, timeout=timeout, what="the floor's first steps", interval=POLL_SECONDS)
    result = {"to_running": to_running, "to_first_step": max(steps) - t0}
    for n in names:
        bed.core.delete_namespaced_pod(n, namespace, grace_period_seconds=0)
    wait_for(
        lambda: not any(p.metadata.name in names for p in bed.core.list_namespaced_pod(namespace).items),
        timeout=timeout,
        what="the floor's pods gone",
    )
    return result


def summarize(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def summary_of(splits: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each part's median and range over the runs that have it (live: those the operator recovered)."""
    parts = dict.fromkeys(part for s in splits for part in s)
    return {part: summarize([s[part] for s in splits if part in s]) for part in parts}


def run_case(bed: Bed, slices: int, strategy: str, fault: str, runs: int, timeout: float) -> list[Run]:
    namespace = f"rb-{slices}x{HOSTS}-{strategy.lower()}-{fault}"
    name = "job"
    bed.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    bed.custom.create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job_manifest(name, namespace, slices, strategy)
    )
    results = []
    for _ in range(runs):
        marks = measure(bed, namespace, name, fault, slices * HOSTS, timeout)
        results.append(Run(f"{slices}x{HOSTS}", fault, strategy, {k: round(v, 3) for k, v in marks.items()}))
        print(f"  {slices}x{HOSTS} {strategy:13} {fault:7} {results[-1].marks}", flush=True)
    final = wait_trained(bed, namespace, name, slices * HOSTS, 0.0, timeout)
    assert final["phase"] == "Running" and final["restarts"] >= runs, final
    return results


def table(report: dict[str, Any]) -> str:
    """The README's table: per job and fault, Recreate (before) and RecreateSlice (after), then the floor."""
    parts = (
        "detection", "teardown", "pod_creation", "start", "to_running", "to_first_step",
        "from_detection", "live",
    )  # fmt: skip
    lines = [
        "| job | fault | strategy | " + " | ".join(p.replace("_", " ") for p in parts) + " |",
        "|---" * (3 + len(parts)) + "|",
    ]

    def cell(figure: dict[str, float]) -> str:
        return f"{figure['median']:.1f} ({figure['min']:.1f}-{figure['max']:.1f})"

    for key, summary in report["summary"].items():
        job, fault, strategy = key.split(" ")
        lines.append(
            f"| {job} | {fault} | {strategy} | "
            + " | ".join(cell(summary[p]) if p in summary else "-" for p in parts)
            + " |"
        )
    for key, figures in report["floor"].items():
        lines.append(
            f"| {key} | floor: a bare client | - | | | | | "
            f"{cell(figures['to_running'])} | {cell(figures['to_first_step'])} | | |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-a-row", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--table", type=Path, help="print the table of a saved --json report, run nothing")
    args = parser.parse_args()
    if args.table:
        saved = json.loads(args.table.read_text())
        for key in saved["summary"]:  # the split as this version defines it, from the saved marks
            job, fault, strategy = key.split(" ")
            splits = [
                split(r["marks"])
                for r in saved["runs"]
                if (r["job"], r["fault"], r["strategy"]) == (job, fault, strategy)
            ]
            saved["summary"][key] = summary_of(splits)
        print(table(saved))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="recovery-bench-"))
    sandbox = start_sandbox(folder / "bed", time_scale=TIME_SCALE)
    bed = Bed(sandbox, folder)
    cases = [(1, "Recreate", f) for f in ("crash", "reclaim", "hang")]
    cases += [(4, s, f) for f in ("crash", "reclaim", "hang") for s in ("Recreate", "RecreateSlice")]
    report: dict[str, Any] = {"runs": [], "summary": {}, "floor": {}}
    try:
        bed.start_operator()
        for slices, strategy, fault in cases:
            runs = args.in_a_row if (slices, strategy, fault) == (4, "RecreateSlice", "crash") else args.runs
            results = run_case(bed, slices, strategy, fault, runs, args.timeout)
            report["runs"] += [asdict(r) for r in results]
            splits = [r.split() for r in results]
            key = f"{slices}x{HOSTS} {fault} {strategy}"
            report["summary"][key] = summary_of(splits)
            namespace = f"rb-{slices}x{HOSTS}-{strategy.lower()}-{fault}"
            if (strategy, fault) == ("Recreate", "crash"):  # its pools serve the floor
                report["floor"].update(floors(bed, namespace, slices, args))
            bed.delete_job(namespace, "job", args.timeout)  # one job's workers at a time on the machine
    finally:
        bed.stop_operator()
        sandbox.stop()
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def floors(bed: Bed, namespace: str, slices: int, args: argparse.Namespace) -> dict[str, Any]:
    """The floor for the whole job's pods and (Multislice) one slice's, the operator stopped meanwhile."""
    found = {}
    bed.stop_operator()
    for pod in bed.pods(namespace, "job"):
        bed.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    wait_for(lambda: not bed.pods(namespace, "job"), timeout=args.timeout, what="the job's pods gone")
    for label, which in (("whole job", list(range(slices))), ("one slice", [slices - 1])):
        if slices == 1 and label == "one slice":
            continue
        figures = [floor(bed, namespace, "job", which, args.timeout) for _ in range(args.runs)]
        found[f"{slices}x{HOSTS} {label}"] = {
            part: summarize([f[part] for f in figures]) for part in figures[0]
        }
    bed.start_operator()
    return found


if __name__ == "__main__":
    sys.exit(main())
