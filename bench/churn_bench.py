"""Pods the operator did not make, churning in its cluster: do they cost the operator CPU or memory?

    .venv/bin/python bench/churn_bench.py --pods 1000 --seconds 60 --json bench/results/churn.json

One fresh test bed (the sandbox as bench/operator_bench.py sets it up: real kube-apiserver 1.20, etcd,
kube-controller-manager, simulated GKE; the scheduler and the simulated kubelet stopped, so every pod stays
Pending), one operator, cluster-wide, with no TPUJob at all. The bench then:

1. waits for the operator's /metrics, then measures its CPU seconds (utime + stime, /proc) over an idle
   window of `--seconds`;
2. creates `--pods` pods in another namespace, without the operator's label (app.kubernetes.io/managed-by),
   from 8 threads;
3. churns them for `--seconds`: round after round, every pod gets a new annotation (a MODIFIED watch event
   each), and every tenth pod is deleted and created again (DELETED and ADDED);
4. reads the operator's CPU seconds over the churn window and its RSS (peak and now) before and after.

The figures are the operator's CPU share of a core while idle and while the pods churn, the pod events the
churn caused, and the RSS difference: an operator that sees only its own pods shows the same CPU and RSS in
both windows.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # operator_bench and race_*, beside this file

from kubernetes import client as k8s
from operator_bench import CREATE_THREADS, Bench
from race_measure import create_namespace, proc_figures, write_json

from tpujob_sandbox import ControlPlane, OperatorProcess, find_binaries, start_sandbox, stop_process

NAMESPACE = "churn"


@dataclass
class ChurnResult:
    pods: int
    window_seconds: float
    idle_cpu_percent: float | None = None  # the operator's CPU, % of one core, no pod churning
    churn_cpu_percent: float | None = None  # the same while the pods churn
    churn_events: int = 0  # pod watch events the churn caused: modifications + deletions + creations
    rss_before_mib: float | None = None  # after the idle window
    rss_after_mib: float | None = None  # after the churn window
    rss_peak_mib: float | None = None
    notes: list[str] = field(default_factory=list)


def unrelated_pod(name: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"app": "unrelated"}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="main", image="busybox")]),
    )


def wait_for_metrics(port: int, operator: OperatorProcess, timeout: float) -> None:
    """Until the operator serves /metrics (its start-up handlers have run), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        assert operator.process is not None
        if operator.process.poll() is not None:
            raise RuntimeError(f"the operator exited with code {operator.process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def cpu_over(pid: int, seconds: float, work: concurrent.futures.Future[int] | None = None) -> float:
    """The process' CPU seconds over the next `seconds`, or until `work` is done."""
    before = proc_figures(pid)[2]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (work is not None and work.done()):
        time.sleep(0.5)
    return proc_figures(pid)[2] - before


def churn(core: k8s.CoreV1Api, names: list[str], seconds: float) -> int:
    """Annotate every pod, and delete every tenth and create one in its place (a new name: the old one may
    still be going), round after round for `seconds`: the watch events caused."""

    def annotate(name: str, round_no: int) -> None:
        core.patch_namespaced_pod(
            name, NAMESPACE, {"metadata": {"annotations": {"churn-round": str(round_no)}}}
        )

    def replace(name: str, round_no: int) -> str:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
        new_name = f"{name.split('.')[0]}.{round_no}"
        core.create_namespaced_pod(NAMESPACE, unrelated_pod(new_name))
        return new_name

    names = list(names)
    events = 0
    deadline = time.monotonic() + seconds
    round_no = 0
    with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
        while time.monotonic() < deadline:
            round_no += 1
            list(pool.map(annotate, names, [round_no] * len(names)))
            slots = range(round_no % 10, len(names), 10)
            replaced = pool.map(replace, [names[i] for i in slots], [round_no] * len(slots))
            for i, new_name in zip(slots, replaced, strict=True):
                names[i] = new_name
            events += len(names) + 2 * len(slots)
    return events


def run(args: argparse.Namespace) -> ChurnResult:
    result = ChurnResult(args.pods, args.seconds)
    with tempfile.TemporaryDirectory(prefix="tpujob-churn-") as tmp:
        state = Path(tmp) / "sandbox"
        bed = start_sandbox(state, time_scale=0.0, control_plane=ControlPlane(find_binaries(), state).start())
        try:
            # As operator_bench: no scheduling, no kubelet; the pods stay Pending, unscheduled.
            stop_process(bed.control_plane.processes.pop("kube-scheduler"))
            bed.kubelet.stop()
            bench = Bench(bed, Path(tmp), ("v5e", "2x2"))
            env = bench.operator_env()
            operator = OperatorProcess(env, Path(tmp) / "operator.log").start()
            try:
                assert operator.process is not None
                pid = operator.process.pid
                wait_for_metrics(int(env["TPUJOB_METRICS_PORT"]), operator, 120)
                result.idle_cpu_percent = round(100 * cpu_over(pid, args.seconds) / args.seconds, 2)
                result.rss_before_mib = round(proc_figures(pid)[1], 1)
                create_namespace(bench.core, NAMESPACE)
                names = [f"unrelated-{i}" for i in range(args.pods)]
                with concurrent.futures.ThreadPoolExecutor(CREATE_THREADS) as pool:
                    list(
                        pool.map(
                            lambda name: bench.core.create_namespaced_pod(NAMESPACE, unrelated_pod(name)),
                            names,
                        )
                    )
                with concurrent.futures.ThreadPoolExecutor(1) as runner:
                    work = runner.submit(churn, bench.core, names, args.seconds)
                    started = time.monotonic()
                    cpu = cpu_over(pid, args.seconds + 30, work)
                    elapsed = time.monotonic() - started
                    result.churn_events = work.result()
                result.churn_cpu_percent = round(100 * cpu / elapsed, 2)
                peak, now, _ = proc_figures(pid)
                result.rss_after_mib, result.rss_peak_mib = round(now, 1), round(peak, 1)
            finally:
                operator.stop()
        finally:
            bed.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000, help="unrelated pods churning")
    parser.add_argument("--seconds", type=float, default=60.0, help="each window: idle, then churn")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(asdict(result), indent=2))
    write_json(args.json, [result])
    return 0


if __name__ == "__main__":
    sys.exit(main())
