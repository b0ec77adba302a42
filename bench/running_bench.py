"""What a user feels: from the create request to every worker pod Running, against the floor the
components the operator does not control set for the same pods.

    .venv/bin/python bench/running_bench.py --n 1 100 --json bench/results/running.json

One test bed (the sandbox as bench/operator_bench.py sets it up: real kube-apiserver 1.20, etcd,
kube-controller-manager, *and* kube-scheduler; simulated GKE *and* simulated kubelet, both on), with one
pre-existing TPU node pool (made through the simulated GKE's API, as a platform team would) of max(N) + 1
single-host nodes: the machine type of `--tpu` (default v5e 2x2: one ct5lp-hightpu-4t VM, 4 chips, one pod
per job), so N jobs fit at once. Every pod's image is one the simulated kubelet runs nowhere
(`registry.example/sleeper:1`): it reports the pod Running as soon as it is bound and leaves it so, with no
local process, so what is measured is the API path, not training start-up.

For each N, two paths, each in a fresh namespace, one after the other:

  operator  N TPUJobs (policy existing) created from 8 threads; the operator (one process, TPUJOB_API_QPS
            `--qps`, default 50 = the operator's default, burst 2 x Q) renders and creates the pods, the
            scheduler binds them, the kubelet reports them Running. One warm-up job goes through first,
            outside the clock (its node is the + 1), so the operator's watches are open.
  direct    the same pods (rendered by the operator's renderer, tpujob.render.plan.pod, without the
            operator's managed-by label) created by the bench itself from 8 threads: scheduler + kubelet +
            API server only. The floor.

Per job: from just before the bench sends the job's create request (the TPUJob, or the job's first pod)
to the moment a pod watch in this process has seen the job's last pod with status.phase Running.
p50/p90/p99 (nearest rank) and max over the N jobs, and operator minus direct for each. Every wait is
bounded (`--timeout`); jobs that never got Running are counted, not waited for.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # operator_bench and race_*, beside this file

from google.cloud import container_v1
from kubernetes import client as k8s
from operator_bench import CREATE_THREADS, Bench
from race_measure import (
    PodWatch,
    create_namespace,
    delete_namespace,
    limits,
    percentile,
    write_json,
)
from race_objects import tpujob_manifest

from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.render import Cluster
from tpujob.render import plan as render
from tpujob.render.cluster import slice_shape
from tpujob_sandbox import (
    ControlPlane,
    OperatorProcess,
    Sandbox,
    Timeout,
    find_binaries,
    start_sandbox,
    wait_for,
)

SLEEPER = "registry.example/sleeper:1"  # the simulated kubelet runs nothing for it: Running until told
POOL = "bench-tpu-pool"
WARM_UP = "warm-up"
PATHS = ("operator", "direct")


# --- the clock: first time each pod was seen Running ------------------------------------------------


def running_job(pod: dict[str, Any]) -> str | None:
    """The job a pod counts for once it is Running (its job-name label), else None."""
    if (pod.get("status") or {}).get("phase") != "Running":
        return None
    return (pod["metadata"].get("labels") or {}).get(c.LABEL_JOB_NAME)


def running_watch(api: k8s.ApiClient, namespace: str) -> PodWatch:
    """When each job's pods were first all seen Running: complete_at(pods per job)."""
    return PodWatch(api, namespace, job_of=running_job).start()


# --- the objects --------------------------------------------------------------------------------


def sleeper_job(name: str, namespace: str, tpu: tuple[str, str]) -> dict[str, Any]:
    manifest = tpujob_manifest(name, namespace, tpu, "existing")
    manifest["spec"]["trainer"] = {"image": SLEEPER}
    return manifest


def direct_pods(name: str, namespace: str, tpu: tuple[str, str]) -> list[dict[str, Any]]:
    """The pods the operator would create for the job (attempt 0), without its managed-by label."""
    pods = render.pods(parse_tpujob(sleeper_job(name, namespace, tpu)), Cluster())
    for pod in pods:
        pod["metadata"]["labels"].pop(c.LABEL_MANAGED_BY, None)
        pod["metadata"].pop("ownerReferences", None)
    return pods


def make_pool(bed: Sandbox, tpu: tuple[str, str], nodes: int, timeout: float) -> str:
    """A node pool made elsewhere (policy existing): `nodes` single-host VMs of the slice's machine type."""
    shape = slice_shape(parse_tpujob(sleeper_job("x", "x", tpu)))
    pool = container_v1.NodePool.from_json(
        json.dumps(
            {
                "name": POOL,
                "initialNodeCount": nodes,
                "locations": [bed.default_zone],
                "config": {"machineType": shape.machine_type.name},
            }
        )
    )
    client = bed.gke.client()
    operation = client.create_node_pool(parent=bed.gke.parent, node_pool=pool)
    name = f"projects/{bed.gke.project}/locations/{bed.gke.location}/operations/{operation.name}"
    wait_for(
        lambda: client.get_operation(name=name).status == container_v1.Operation.Status.DONE,
        timeout=timeout,
        what="the node pool",
    )
    core = k8s.CoreV1Api(bed.api_client)

    def ready() -> bool:
        found = core.list_node(label_selector=f"{c.NODE_LABEL_NODEPOOL}={POOL}").items
        ok = [
            n
            for n in found
            if any(cond.type == "Ready" and cond.status == "True" for cond in n.status.conditions or [])
            and not n.spec.unschedulable
        ]
        return len(ok) >= nodes

    wait_for(ready, timeout=timeout, what=f"{nodes} Ready nodes", interval=0.5)
    return shape.machine_type.name


# --- one path -------------------------------------------------------------------------------------


@dataclass
class PathResult:
    n: int
    path: str
    qps: float
    pods_per_job: int
    running: int = 0  # jobs with every pod Running
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


class RunningBench:
    def __init__(self, bed: Sandbox, bench: Bench, tpu: tuple[str, str], timeout: float) -> None:
        self.bed, self.bench, self.tpu, self.timeout = bed, bench, tpu, timeout
        self.core = k8s.CoreV1Api(bed.api_client)
        self.custom = k8s.CustomObjectsApi(bed.api_client)

    def run(self, n: int, path: str) -> PathResult:
        namespace = f"running-{path}-{n}"
        result = PathResult(n, path, self.bench.qps if path == "operator" else 0, self.bench.pods)
        started = time.monotonic()
        create_namespace(self.core, namespace)
        operator = None
        try:
            if path == "operator":
                env = self.bench.operator_env()
                operator = OperatorProcess(env, self.bench.folder / f"{namespace}.log").start()
                self._warm_up(namespace, result)
            self._measure(n, path, namespace, result)
        finally:
            delete_namespace(self.core, namespace, timeout=max(120.0, n * 1.0))
            if operator:
                operator.stop()
        result.wall_seconds = round(time.monotonic() - started, 1)
        return result

    def _warm_up(self, namespace: str, result: PathResult) -> None:
        watch_ = running_watch(self.bed.api_client, namespace)
        try:
            self.custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, sleeper_job(WARM_UP, namespace, self.tpu)
            )
            wait_for(
                lambda: WARM_UP in watch_.complete_at(self.bench.pods),
                timeout=120,
                what="the warm-up job's pods Running",
                interval=0.1,
            )
        finally:
            watch_.stop()

    def _create(self, path: str, namespace: str, name: str) -> float:
        sent = time.monotonic()
        if path == "operator":
            manifest = sleeper_job(name, namespace, self.tpu)
            self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, manifest)
        else:
            for pod in direct_pods(name, namespace, self.tpu):
                self.core.create_namespaced_pod(namespace, pod)
        return sent

    def _measure(self, n: int, path: str, namespace: str, result: PathResult) -> None:
        running = running_watch(self.bed.api_client, namespace)
        try:
            names = [f"j{i:05d}" for i in range(n)]
            with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
                sent = dict(
                    zip(names, pool.map(lambda name: self._create(path, namespace, name), names), strict=True)
                )
            try:
                wait_for(
                    lambda: len(set(running.complete_at(self.bench.pods)) & set(names)) == n,
                    timeout=self.timeout,
                    what=f"{n * self.bench.pods} pods Running",
                    interval=0.1,
                )
            except Timeout as error:
                result.notes.append(str(error))
                print(f"  ({error})", file=sys.stderr)
        finally:
            running.stop()
        done = running.complete_at(self.bench.pods)
        latencies = [done[name] - sent[name] for name in names if name in done]
        result.running = len(latencies)
        if latencies:
            result.p50, result.p90, result.p99 = (round(percentile(latencies, q), 3) for q in (50, 90, 99))
            result.max = round(max(latencies), 3)


# --- the report -----------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _diff(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a - b:+.3f}"


def table(results: list[PathResult]) -> str:
    lines = [
        "| N | path | Q | jobs Running | p50 s | p90 s | p99 s | max s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        q = f"{r.qps:g}" if r.path == "operator" else "-"
        lines.append(
            f"| {r.n} | {r.path} | {q} | {r.running} / {r.n} | {_fmt(r.p50)} | {_fmt(r.p90)} "
            f"| {_fmt(r.p99)} | {_fmt(r.max)} |"
        )
    lines += ["", "Operator minus direct (the operator's share of create -> Running):", ""]
    lines += ["| N | p50 s | p90 s | p99 s | max s |", "|---|---|---|---|---|"]
    by_key = {(r.n, r.path): r for r in results}
    for r in results:
        base = by_key.get((r.n, "direct"))
        if r.path != "operator" or base is None:
            continue
        lines.append(
            f"| {r.n} | {_diff(r.p50, base.p50)} | {_diff(r.p90, base.p90)} | {_diff(r.p99, base.p99)} "
            f"| {_diff(r.max, base.max)} |"
        )
    notes = [f"- N={r.n} {r.path}: {note}" for r in results for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 100], help="jobs per path")
    parser.add_argument(
        "--qps",
        type=float,
        default=50,
        help="the operator's TPUJOB_API_QPS (default 50, its default); 0: none",
    )
    parser.add_argument("--burst", type=int, help="TPUJOB_API_BURST; default: 2 x qps")
    parser.add_argument("--tpu", default="v5e:2x2", help="TYPE:TOPOLOGY of every job (one slice)")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a path's pods")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    qps, burst = limits(args.qps, args.burst)
    tpu_type, topology = args.tpu.split(":")
    tpu = (tpu_type, topology)
    results: list[PathResult] = []
    with tempfile.TemporaryDirectory(prefix="tpujob-running-") as tmp:
        state = Path(tmp) / "sandbox"
        # Instant GKE: the pool is there before the clock starts anyway.
        bed = start_sandbox(state, time_scale=0.0, control_plane=ControlPlane(find_binaries(), state).start())
        try:
            bench = Bench(bed, Path(tmp), tpu, qps, burst)
            nodes = max(args.n) + 1  # + the warm-up job's
            machine = make_pool(bed, tpu, nodes, timeout=max(120.0, nodes * 2.0))
            print(f"{nodes} nodes of {machine} Ready", file=sys.stderr, flush=True)
            runner = RunningBench(bed, bench, tpu, args.timeout)
            for n in args.n:
                for path in args.paths:
                    print(f"N={n} {path} ...", file=sys.stderr, flush=True)
                    result = runner.run(n, path)
                    print(f"  {json.dumps(asdict(result))}", file=sys.stderr, flush=True)
                    results.append(result)
        finally:
            bed.stop()
    print(table(results))
    write_json(args.json, results, tpu=args.tpu, pool={"nodes": max(args.n) + 1})
    return 0


if __name__ == "__main__":
    sys.exit(main())
