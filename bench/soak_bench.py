"""A day of churn in half an hour: does the operator give back what it kept about a job once the job is gone?

    .venv/bin/python bench/soak_bench.py --minutes 30 --jobs 20000 --json bench/results/soak.json

One fresh test bed (real kube-apiserver, etcd, scheduler and kube-controller-manager; the simulated GKE at
`--time-scale` of GKE's durations; the simulated kubelet), one operator, cluster-wide, with the test bed's
settings (tpujob_sandbox.operator_env), run under the test bed's probe (tpujob_sandbox/probe.py): the operator
itself, plus a probe that writes the length of every container the operator keeps (found by walking its
objects, not by name).

The bench keeps `--live` jobs alive in `--namespaces` namespaces, each job one single-host v5e 2x2 slice,
and replaces each job that ends with a new one until both `--minutes` of wall time and `--jobs` jobs are
reached (capped at `--max-minutes`). Three jobs in ten have a node pool made for them (policy create:
provisioned and deleted by the simulated GKE, which runs 5 operations a cluster at once, as GKE's quota
does); the others run on a platform team's pool made before the churn (policy existing, as on a cluster
xpk set up), two of those seven queued through Kueue (its real CRDs, its admission simulated: a
ClusterQueue with `--kueue-chips` of quota, a LocalQueue in each namespace). Job i ends as its index says,
so every end comes round:

  i % 10 == 0  its pod fails (exit 1, maxRestarts 0): the job fails, then is deleted    (its own pool)
  i % 10 == 1  deleted while it runs                                                   (its own pool)
  i % 10 == 2  deleted as soon as it is created (provisioning)                         (its own pool)
  i % 10 == 3  suspended while it runs, then deleted                                   (platform pool)
  i % 10 == 5  admitted by Kueue, its pod succeeds; deleted once Succeeded             (platform pool)
  i % 10 == 6  admitted by Kueue, deleted while it runs                                (platform pool)
  otherwise    its pod succeeds; the job is deleted once Succeeded                     (platform pool)

The operator's client limit is the chart's (50 requests a second) unless `--api-qps` says otherwise: at the
chart's limit the churn's own Events wait behind every pass and the event queue fills (the operator drops
what comes then, as client-go does). kube-controller-manager gets `--controller-manager-qps` (100) for its
garbage collector, which deletes the jobs' pods and Services: at its default 20 it fell behind 3 deleted
jobs a second on this machine, and the operator rightly indexed the growing backlog (435 Services for 80
live jobs after 13 minutes), which is the API server's state, not the operator's leak.

Ending a pod goes through the simulated kubelet's exit annotation (what kubelet.succeed/fail do), without
waiting. Every `--sample` seconds the bench records the operator's RSS, the live jobs (created and not yet
seen gone) and the probe's sizes. At the end it stops creating, lets every job end, waits two resync
intervals with no job at all, and samples again.

Figures: jobs done, jobs/s; RSS (mean of the samples) in each quarter of the churn; growth from the
second quarter to the last (goal: <= 2 %); each structure's peak and its size at the end against the live
jobs then (goal: no structure above the live count, which is 0).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.cloud import container_v1
from kubernetes import client as k8s

sys.path.insert(0, str(Path(__file__).resolve().parent))  # soak_churn and race_measure, beside this file

from race_measure import controller_manager_flags
from soak_churn import PLATFORM_POOL, QUEUE, V5E_2X2_LABELS, Churn

from tpujob.api import constants as c
from tpujob_sandbox import Sandbox, find_binaries, install_crd, operator_env, start_sandbox, wait_for
from tpujob_sandbox.controlplane import ControlPlane
from tpujob_sandbox.kueue import crds as kueue_crds
from tpujob_sandbox.kueue.handle import KueueHandle
from tpujob_sandbox.kueue.simulator import KueueSimulator
from tpujob_sandbox.operators import OperatorProcess
from tpujob_sandbox.waiting import Timeout

PROBE_SECONDS = 5.0  # the probe's default period
# Fixed-size structures of the runtime, not kept per job: the loops' tasks, the status writer's threads.
NOT_PER_JOB = (
    "runtime.tasks",
    "runtime.reconciler.status_writer._threads",
    "runtime.config.",  # the settings: their lists are the chart values, not jobs
    "runtime.reconciler.settings.",
    "runtime.reconciler.observer.kueue._flavors",  # Kueue's ResourceFlavors, one per flavor
)


@dataclass
class Sample:
    at: float  # seconds since the churn began
    rss_mib: float
    live: int
    done: int
    sizes: dict[str, int]


@dataclass
class SoakResult:
    minutes: float = 0.0
    jobs_created: int = 0
    jobs_done: int = 0
    jobs_per_second: float = 0.0
    rss_quarters_mib: list[float] = field(default_factory=list)
    rss_growth_q2_to_q4_percent: float | None = None
    live_at_end: int = 0
    peak: dict[str, int] = field(default_factory=dict)
    at_end: dict[str, int] = field(default_factory=dict)
    above_live_at_end: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


def start_kueue(api_client: k8s.ApiClient, namespaces: list[str], chips: int) -> KueueSimulator:
    """Kueue's CRDs and its simulated admission: one flavor for the platform pool's v5e 2x2 nodes, a
    ClusterQueue with `chips` of TPU quota, and a LocalQueue QUEUE in each namespace."""
    kueue_crds.install(api_client)
    simulator = KueueSimulator(api_client).start()
    handle = KueueHandle(api_client, simulator, kueue_crds.NEWEST)
    flavor = handle.resource_flavor(node_labels=V5E_2X2_LABELS, prefix="v5e-2x2")
    cluster_queue = handle.cluster_queue({flavor: {c.TPU_RESOURCE: chips}}, prefix="soak")
    for namespace in namespaces:
        handle.local_queue(namespace, cluster_queue, name=QUEUE)
    return simulator


def make_platform_pool(bed: Sandbox, nodes: int) -> None:
    """The platform team's pool of `nodes` single-host v5e 2x2 nodes, made through GKE's API before the
    churn; its nodes registered before this returns."""
    pool = {
        "name": PLATFORM_POOL,
        "initialNodeCount": nodes,
        "locations": [bed.default_zone],
        "config": {"machineType": "ct5lp-hightpu-4t"},
    }
    bed.gke.client().create_node_pool(
        parent=bed.gke.parent, node_pool=container_v1.NodePool.from_json(json.dumps(pool))
    )
    core = k8s.CoreV1Api(bed.api_client)
    wait_for(
        lambda: len(core.list_node(label_selector=f"{c.NODE_LABEL_NODEPOOL}={PLATFORM_POOL}").items) == nodes,
        timeout=300,
        what=f"the {nodes} nodes of {PLATFORM_POOL}",
        interval=1,
    )


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return 0.0


def read_probe(path: Path) -> dict[str, int]:
    try:
        sizes: dict[str, int] = json.loads(path.read_text())["sizes"]
        return sizes
    except (OSError, ValueError, KeyError):
        return {}


def figures(result: SoakResult, churn_samples: list[Sample], final: Sample) -> None:
    if len(churn_samples) >= 8:
        quarter = len(churn_samples) // 4
        quarters = [churn_samples[i * quarter : (i + 1) * quarter] for i in range(3)]
        quarters.append(churn_samples[3 * quarter :])
        means = [statistics.mean(s.rss_mib for s in q) for q in quarters]
        result.rss_quarters_mib = [round(m, 1) for m in means]
        result.rss_growth_q2_to_q4_percent = round(100 * (means[3] - means[1]) / means[1], 2)
    for sample in [*churn_samples, final]:
        for name, size in sample.sizes.items():
            result.peak[name] = max(result.peak.get(name, 0), size)
    result.at_end = dict(sorted(final.sizes.items()))
    result.live_at_end = final.live
    result.above_live_at_end = per_job_above(final.sizes, final.live)


def per_job_above(sizes: dict[str, int], live: int) -> dict[str, int]:
    """The per-job structures holding more entries than there are live jobs."""
    return {
        name: size for name, size in sorted(sizes.items()) if size > live and not name.startswith(NOT_PER_JOB)
    }


def run(args: argparse.Namespace) -> SoakResult:
    result = SoakResult()
    with tempfile.TemporaryDirectory(prefix="tpujob-soak-") as tmp:
        folder = Path(tmp)
        # kube-controller-manager's garbage collector deletes the jobs' pods and Services: at its default 20
        # requests a second it falls behind 3 deleted jobs a second, and the operator indexes the backlog.
        limit = controller_manager_flags(args.controller_manager_qps, 2 * args.controller_manager_qps)
        # The endpoints controllers rewrite each job's headless Service's Endpoints and EndpointSlices on
        # every pod change: a third of kube-apiserver's requests in the churn (its apiserver_request_total),
        # on the CPU the test bed shares with the operator. The operator reads neither. (kube-controller-
        # manager's --controllers is a list: a second flag adds to the test bed's.)
        no_endpoints = ("--controllers=-endpoint,-endpointslice,-endpointslicemirroring",)
        plane = ControlPlane(
            find_binaries(), folder / "sandbox", controller_manager_flags=limit + no_endpoints
        ).start()
        bed = start_sandbox(folder / "sandbox", time_scale=args.time_scale, control_plane=plane)
        # GKE's device plugin collects every 10 s of GKE time; the test bed's floor is 1 s of real time. Each
        # collection lists every node and running pod: at 1 s, with ~90 nodes, that was the bench process'
        # largest cost (py-spy: a fifth of its samples). The soak does not measure chip metrics.
        bed.gke.device_plugin.interval = args.device_plugin_seconds
        operator: OperatorProcess | None = None
        kueue: KueueSimulator | None = None
        try:
            install_crd(bed)
            namespaces = [f"soak-{i}" for i in range(args.namespaces)]
            core = k8s.CoreV1Api(bed.api_client)
            for namespace in namespaces:
                core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
            kueue = start_kueue(bed.api_client, namespaces, args.kueue_chips)
            make_platform_pool(bed, args.platform_nodes)
            probe = folder / "sizes.json"
            env = operator_env(bed, folder)  # Kueue's integration on, as the chart's default
            if args.api_qps is not None:  # the chart's operator.apiQps / apiBurst
                burst = max(1, 2 * args.api_qps)
                env |= {"TPUJOB_API_QPS": str(args.api_qps), "TPUJOB_API_BURST": str(burst)}
            operator = OperatorProcess(env, folder / "operator.log", probe=probe).start()
            assert operator.process is not None
            pid = operator.process.pid
            wait_for(lambda: probe.exists(), timeout=120, what="the operator's probe", interval=0.5)
            churn = Churn(bed.api_client, namespaces, args.live)
            threads = [
                threading.Thread(target=target, daemon=True)
                for target in (churn.fill, churn.watch_pods, churn.watch_jobs)
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            samples: list[Sample] = []

            def sample() -> Sample:
                with churn.lock:
                    live, done = len(churn.live), churn.done
                taken = Sample(
                    round(time.monotonic() - started, 1),
                    round(rss_mib(pid), 1),
                    live,
                    done,
                    read_probe(probe),
                )
                biggest = sorted(taken.sizes.items(), key=lambda kv: -kv[1])[:4]
                print(
                    f"[soak] {taken.at:7.0f} s rss {taken.rss_mib:7.1f} MiB live {live:4d} done {done:6d} "
                    f"biggest {biggest}",
                    file=sys.stderr,
                    flush=True,
                )
                return taken

            while True:
                time.sleep(args.sample)
                if operator.process.poll() is not None:
                    result.notes.append(f"the operator exited with {operator.process.returncode}")
                    break
                samples.append(sample())
                if args.json is not None:  # what the run reached so far, should it be cut short
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.with_suffix(".partial.json").write_text(
                        json.dumps([asdict(x) for x in samples])
                    )
                elapsed = time.monotonic() - started
                if elapsed >= args.max_minutes * 60:
                    result.notes.append(f"stopped at --max-minutes with {churn.done} jobs done")
                    break
                if elapsed >= args.minutes * 60 and churn.done >= args.jobs:
                    break
            churn_seconds = time.monotonic() - started
            with churn.lock:
                churn.creating = False
                churn.lock.notify_all()
                done_in_churn = churn.done
            try:
                wait_for(lambda: not churn.live, timeout=args.drain_minutes * 60, what="every job to end")
            except Timeout:
                result.notes.append(f"{len(churn.live)} jobs still live after --drain-minutes")
            # Every structure given its chance to let go (the garbage collector's deletion of the jobs'
            # Services and pods reaches the indexes last): a minute at most, then the end is sampled.
            try:
                wait_for(
                    lambda: not per_job_above(read_probe(probe), len(churn.live)),
                    timeout=60,
                    what="every per-job structure back to the live jobs",
                    interval=PROBE_SECONDS,
                )
            except Timeout:
                result.notes.append("per-job structures still above the live jobs a minute after the drain")
            final = sample()
            churn.stop.set()
            result.minutes = round(churn_seconds / 60, 1)
            result.jobs_created, result.jobs_done = churn.created, churn.done
            result.jobs_per_second = round(done_in_churn / churn_seconds, 2)
            figures(result, samples, final)
            result.notes.extend(churn.errors[:20])
            result.samples = [*samples, final]
        finally:
            if operator is not None:
                operator.stop()
            if kueue is not None:
                kueue.stop()
            if args.keep_log is not None:
                args.keep_log.write_bytes((folder / "operator.log").read_bytes())
            bed.stop()
    return result


def report(result: SoakResult) -> str:
    lines = [
        f"churn: {result.minutes} min, {result.jobs_done} jobs done of {result.jobs_created} created, "
        f"{result.jobs_per_second} jobs/s",
        f"RSS by quarter (MiB, mean of samples): {result.rss_quarters_mib}; "
        f"growth Q2 -> Q4: {result.rss_growth_q2_to_q4_percent} % (goal <= 2 %)",
        f"live jobs at the end: {result.live_at_end}; structures above it: "
        f"{result.above_live_at_end or 'none'}",
        "structure: peak -> at end",
    ]
    lines += [f"  {name}: {result.peak.get(name, 0)} -> {size}" for name, size in result.at_end.items()]
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="at least this much wall time of churn")
    parser.add_argument("--jobs", type=int, default=20000, help="and at least this many jobs done")
    parser.add_argument("--max-minutes", type=float, default=90.0, help="stop here regardless")
    parser.add_argument("--live", type=int, default=60, help="jobs alive at once")
    parser.add_argument(
        "--drain-minutes", type=float, default=10.0, help="at most this long for the last jobs"
    )
    parser.add_argument("--namespaces", type=int, default=3)
    parser.add_argument("--platform-nodes", type=int, default=72, help="nodes of the platform team's pool")
    parser.add_argument("--kueue-chips", type=int, default=96, help="the ClusterQueue's TPU quota")
    parser.add_argument(
        "--api-qps",
        type=int,
        help="the operator's Kubernetes API requests per second (burst twice that); default: the chart's",
    )
    parser.add_argument(
        "--controller-manager-qps",
        type=int,
        default=100,
        help="kube-controller-manager's --kube-api-qps (burst twice that): its garbage collector's pace",
    )
    parser.add_argument("--time-scale", type=float, default=0.002, help="of GKE's durations")
    parser.add_argument(
        "--device-plugin-seconds",
        type=float,
        default=10.0,
        help="real seconds between the device plugin's collections",
    )
    parser.add_argument("--sample", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--json", type=Path, help="write the figures and samples here")
    parser.add_argument("--keep-log", type=Path, help="copy the operator's log here")
    args = parser.parse_args(argv)
    # A SIGTERM ends the run through its `finally`: the test bed and the operator are stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args)
    print(report(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(result), indent=1))
    return 0 if result.rss_growth_q2_to_q4_percent is not None else 1


if __name__ == "__main__":
    sys.exit(main())
