"""One huge TPUJob: the operator's and `tpujob render`'s peak memory for a job of thousands of hosts.

    .venv/bin/python bench/big_job_bench.py --repeats 3 --json bench/results/big_job.json

The job is issue #39's: tpu7x `16x24x24` (9,216 chips, 2,304 hosts, one slice), `policy: existing`, a JAX
image. Per repeat, one fresh test bed (the sandbox as bench/scale_bench.py sets it up: real kube-apiserver
1.20, etcd, kube-controller-manager, simulated GKE; the scheduler and the simulated kubelet stopped, so the
pods stay Pending: the metric is the pass that renders and creates them) and one fresh operator process,
cluster-wide, with the test bed's settings. The bench creates the job and waits (bounded, `--timeout`) until
the API server holds every one of its pods (a list with limit=1 counts them: 1 + remainingItemCount) and
its status has a phase; then it reads the operator's peak RSS (VmHWM) from /proc, beside the API server's
and etcd's RSS. The chart's memory limit for the operator is 512Mi: the row says whether the peak stayed
under it.

`tpujob render` runs on the same job from a file, its JSON written to /dev/null: its peak RSS (ru_maxrss of
the child, from wait4) and the bytes it wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # operator_bench and race_*, beside this file

import yaml
from kubernetes import client as k8s
from race_measure import create_namespace, proc_figures, write_json

from tpujob.api import constants as c
from tpujob_sandbox import (
    ControlPlane,
    OperatorProcess,
    Sandbox,
    find_binaries,
    free_port,
    install_crd,
    operator_kubeconfig,
    start_sandbox,
    stop_process,
    wait_for,
)

NAMESPACE = "big"
JOB = "big"
CHART_MEMORY_LIMIT_MIB = 512  # charts/tpujob-operator/values.yaml resources.limits.memory


def manifest(tpu: str, topology: str, image: str) -> dict[str, object]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": {
            "tpu": {"type": tpu, "topology": topology},
            "nodePool": {"policy": "existing"},
            "trainer": {"image": image},
        },
    }


@dataclass
class RenderResult:
    peak_mib: float
    bytes_written: int
    seconds: float


@dataclass
class RunResult:
    hosts: int
    pods: int = 0
    phase: str = ""
    pods_seconds: float | None = None  # job created -> every pod in the API server
    operator_peak_mib: float | None = None
    operator_rss_mib: float | None = None
    under_chart_limit: bool | None = None
    apiserver_rss_mib: float | None = None
    etcd_rss_mib: float | None = None
    notes: list[str] = field(default_factory=list)


def operator_env(bed: Sandbox, folder: Path) -> dict[str, str]:
    """As bench/operator_bench.py runs it: the operator's defaults, no client-side request limit."""
    return {
        **os.environ,
        "KUBECONFIG": str(operator_kubeconfig(bed, folder / "operator.kubeconfig")),
        "TPUJOB_GKE_ENDPOINT": bed.gke.endpoint,
        "TPUJOB_GKE_PROJECT": bed.gke.project,
        "TPUJOB_GKE_LOCATION": bed.gke.location,
        "TPUJOB_GKE_CLUSTER": bed.gke.cluster,
        "TPUJOB_GKE_ZONE": bed.default_zone,
        "TPUJOB_METRICS_PORT": str(free_port()),
        "TPUJOB_HEALTH_PORT": str(free_port()),
        "TPUJOB_API_QPS": "0",
    }


def render_peak(job_file: Path) -> RenderResult:
    """`tpujob render FILE -o json`'s peak RSS and output size."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tpujob.cli", "render", str(job_file), "-o", "json"], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    written = 0
    while chunk := process.stdout.read(1 << 20):
        written += len(chunk)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"tpujob render exited with status {status}")
    return RenderResult(round(usage.ru_maxrss / 1024, 1), written, round(time.monotonic() - started, 1))


def count_pods(core: k8s.CoreV1Api) -> int:
    """The job's pods in the API server (the namespace holds only them), without listing their bodies: the
    API server counts the rest of a paged list (remainingItemCount, only given without a selector)."""
    page = core.list_namespaced_pod(NAMESPACE, limit=1)
    return len(page.items) + (page.metadata.remaining_item_count or 0)


def run_once(args: argparse.Namespace, hosts: int) -> RunResult:
    result = RunResult(hosts=hosts)
    with tempfile.TemporaryDirectory(prefix="tpujob-big-") as tmp:
        state = Path(tmp) / "sandbox"
        bed = start_sandbox(state, time_scale=0.0, control_plane=ControlPlane(find_binaries(), state).start())
        operator = None
        try:
            stop_process(bed.control_plane.processes.pop("kube-scheduler"))
            bed.kubelet.stop()
            install_crd(bed)
            core = k8s.CoreV1Api(bed.api_client)
            custom = k8s.CustomObjectsApi(bed.api_client)
            create_namespace(core, NAMESPACE)
            operator = OperatorProcess(operator_env(bed, Path(tmp)), Path(tmp) / "operator.log").start()
            started = time.monotonic()
            custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, manifest(args.tpu, args.topology, args.image)
            )

            def done() -> bool:
                assert operator is not None and operator.process is not None
                if operator.process.poll() is not None:
                    raise RuntimeError(
                        f"the operator exited ({operator.process.returncode}):\n{operator.log()}"
                    )
                result.pods = count_pods(core)
                if result.pods >= hosts and result.pods_seconds is None:
                    result.pods_seconds = round(time.monotonic() - started, 1)
                job = custom.get_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, JOB)
                result.phase = (job.get("status") or {}).get("phase") or ""
                return result.pods >= hosts and bool(result.phase)

            try:
                wait_for(done, timeout=args.timeout, what=f"{hosts} pods and a status", interval=2.0)
            except Exception as error:
                result.notes.append(f"{type(error).__name__}: {str(error)[:300]}")
            assert operator.process is not None
            if operator.process.poll() is None:
                peak, now, _ = proc_figures(operator.process.pid)
                result.operator_peak_mib, result.operator_rss_mib = round(peak, 1), round(now, 1)
                result.under_chart_limit = peak < CHART_MEMORY_LIMIT_MIB
            pids = bed.control_plane.pids
            result.apiserver_rss_mib = round(proc_figures(pids["kube-apiserver"])[1])
            result.etcd_rss_mib = round(proc_figures(pids["etcd"])[1])
        finally:
            if operator is not None:
                operator.stop()
            bed.stop()
    return result


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tpu", default="tpu7x")
    parser.add_argument("--topology", default="16x24x24")
    parser.add_argument("--image", default="example.com/jax-trainer:1", help="a JAX image (tpu7x runs no TF)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the pods")
    parser.add_argument("--no-operator", action="store_true", help="measure `tpujob render` only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from tpujob.api import parse_tpujob
    from tpujob.render.cluster import slice_shape

    hosts = slice_shape(parse_tpujob(manifest(args.tpu, args.topology, args.image))).hosts
    with tempfile.TemporaryDirectory(prefix="tpujob-big-render-") as tmp:
        job_file = Path(tmp) / "job.yaml"
        job_file.write_text(yaml.safe_dump(manifest(args.tpu, args.topology, args.image)))
        renders = [render_peak(job_file) for _ in range(args.repeats)]
    print(f"render: {[asdict(r) for r in renders]}", file=sys.stderr, flush=True)
    runs: list[RunResult] = []
    if not args.no_operator:
        for k in range(args.repeats):
            print(f"run {k + 1}/{args.repeats}: {hosts} hosts ...", file=sys.stderr, flush=True)
            runs.append(run_once(args, hosts))
            print(f"  {json.dumps(asdict(runs[-1]))}", file=sys.stderr, flush=True)
    peaks = [r.operator_peak_mib for r in runs if r.operator_peak_mib is not None]
    print(f"{args.tpu} {args.topology}: {hosts} hosts, {args.repeats} runs, median (min-max)")
    print("| tpujob render peak MiB | render output MB | operator peak MiB | pods created | under 512Mi |")
    print("|---|---|---|---|---|")
    print(
        f"| {spread([r.peak_mib for r in renders])} | {spread([r.bytes_written / 1e6 for r in renders])} "
        f"| {spread(peaks)} | {[r.pods for r in runs]} | {[r.under_chart_limit for r in runs]} |"
    )
    write_json(args.json, runs, render=[asdict(r) for r in renders], hosts=hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
