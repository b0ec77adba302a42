"""How right a queued TPUJob's start estimate is: predicted admission against the actual one.

    .venv/bin/python bench/start_estimate_bench.py --json bench/results/start-estimate.json

One test bed (tpujob_sandbox.start_sandbox at the tests' GKE time scale; Kueue v0.19.2's real CRDs, its
admission simulated) and the operator as the e2e tests run it (its own process, resync 2 s). A ClusterQueue
with quota for `--slots` one-host v5e 2x2 jobs (4 chips each; BestEffortFIFO) is made busy by that many
jobs, then `--jobs` more are queued behind them, one a second (Kueue's order is their creation order). Each
pod runs bench/start_estimate_worker.py as a local process: a trainer of a known length (steps of 0.1 s,
lengths spread over `--shortest` to `--longest` seconds, in a fixed shuffled order), which serves its step
and target as the trainer contract says, so the operator reads its ETA.

The bench polls every job's status every `--poll` seconds. For each queued job: its admission
(status.queue.admittedTime, Kueue's Admitted time), the first estimate the operator made for it
(status.queue.estimatedStart.time: a job behind others whose run time is not yet known has none at
first; it comes once the jobs ahead of it run and report their ETAs), how long before the
admission that was (its lead), and the estimate as it stood `--before` seconds ahead of the admission.
Error = predicted - actual (seconds; positive: it started earlier than predicted). Reports each job, and the
median and worst absolute error of each. A time shown as a latest start (`bound`: quota held by a job not
yet reporting an ETA may come back sooner) is marked ≤, and the first that is an estimate (~) is reported
too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from race_measure import command_line, provenance
from start_estimate_report import table

from tpujob.api import constants as c
from tpujob_sandbox import OperatorProcess, start_sandbox, wait_for
from tpujob_sandbox.kueue import crds as kueue_crds
from tpujob_sandbox.kueue.handle import KueueHandle
from tpujob_sandbox.kueue.simulator import KueueSimulator
from tpujob_sandbox.operators import install_crd, operator_env
from tpujob_sandbox.pytest_plugin import TIME_SCALE

WORKER = Path(__file__).resolve().parent / "start_estimate_worker.py"
IMAGE = "tpujob-jax:start-estimate-bench"  # a local image: the simulated kubelet runs its command
STEP_SECONDS = 0.1
NAMESPACE = "start-estimate"
# The estimates reported: the first shown (an estimate or a latest start), the first that is an estimate,
# and the one shown `--before` seconds ahead of the admission.
WHICH = ("first", "first_estimate", "before")
V5E_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2",
}


def job_manifest(name: str, queue: str, seconds: float) -> dict[str, Any]:
    steps = round(seconds / STEP_SECONDS)
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {c.LABEL_QUEUE_NAME: queue}},
        "spec": {
            "tpu": {"type": "v5e", "topology": "2x2"},
            "trainer": {"image": IMAGE, "command": ["python", str(WORKER), str(steps)]},
        },
    }


def parse(text: str | None) -> float | None:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def lengths(count: int, shortest: float, longest: float, seed: int) -> list[float]:
    spread = [shortest + (longest - shortest) * i / max(count - 1, 1) for i in range(count)]
    random.Random(seed).shuffle(spread)
    return [round(x, 1) for x in spread]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--slots", type=int, default=4, help="jobs the ClusterQueue's quota runs at once")
    parser.add_argument("--busy", type=float, default=40.0, help="seconds the busy jobs train")
    parser.add_argument("--shortest", type=float, default=15.0)
    parser.add_argument("--longest", type=float, default=45.0)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--before", type=float, default=10.0, help="also report the estimate this long ahead")
    parser.add_argument("--seed", type=int, default=54)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="start-estimate-bench-"))
    kueue_crds.crds_path(
        kueue_crds.NEWEST
    )  # TPUJOB_KUEUE_CRDS, or ../shared/kueue/crds: said before starting
    sandbox = start_sandbox(folder / "bed", time_scale=TIME_SCALE)
    simulator = None
    operator = OperatorProcess(operator_env(sandbox, folder), folder / "operator.log")
    custom = k8s.CustomObjectsApi(sandbox.api_client)
    try:
        install_crd(sandbox)
        kueue_crds.install(sandbox.api_client)
        simulator = KueueSimulator(sandbox.api_client).start()
        operator.start()
        k8s.CoreV1Api(sandbox.api_client).create_namespace({"metadata": {"name": NAMESPACE}})
        kueue = KueueHandle(sandbox.api_client, simulator, kueue_crds.NEWEST)
        flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
        cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4 * args.slots}})
        queue = kueue.local_queue(NAMESPACE, cluster_queue)
        report = run(custom, queue, args)
    finally:
        operator.stop()
        if simulator is not None:
            simulator.stop()
        sandbox.stop()
    print(f"operator log: {folder / 'operator.log'}")
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        saved = {"command": command_line(), **provenance(), **report}
        args.json.write_text(json.dumps(saved, indent=2) + "\n")
    return 0


def statuses(custom: k8s.CustomObjectsApi) -> dict[str, dict[str, Any]]:
    items = custom.list_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL)["items"]
    return {job["metadata"]["name"]: job.get("status") or {} for job in items}


def run(custom: k8s.CustomObjectsApi, queue: str, args: argparse.Namespace) -> dict[str, Any]:
    for slot in range(args.slots):
        body = job_manifest(f"busy-{slot}", queue, args.busy)
        custom.create_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, body)
    wait_for(
        lambda: all(
            (s.get("progress") or {}).get("eta") for n, s in statuses(custom).items() if n.startswith("busy")
        ),
        timeout=args.timeout,
        what="the busy jobs to train and report their ETAs",
    )
    planned = lengths(args.jobs, args.shortest, args.longest, args.seed)
    names = [f"job-{i:02d}" for i in range(args.jobs)]
    for name, seconds in zip(names, planned, strict=True):
        body = job_manifest(name, queue, seconds)
        custom.create_namespaced_custom_object(c.GROUP, c.VERSION, NAMESPACE, c.PLURAL, body)
        time.sleep(1.0)  # a second apart: Kueue orders them by creation, to the second
    seen: dict[str, dict[str, Any]] = {n: {"length_seconds": s} for n, s in zip(names, planned, strict=True)}
    unknown_reasons: dict[str, set[str]] = {n: set() for n in names}
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        now = time.time()
        found = statuses(custom)
        for name in names:
            status = found.get(name) or {}
            record = status.get("queue") or {}
            entry = seen[name]
            if record.get("admittedTime") and "admitted" not in entry:
                entry["admitted"] = parse(record["admittedTime"])
            if "admitted" in entry:
                continue
            estimate = record.get("estimatedStart") or {}
            if estimate.get("time"):
                mark = {
                    "predicted": parse(estimate["time"]),
                    "at": now,
                    "bound": bool(estimate.get("bound")),
                    "summary": record.get("summary"),
                }
                entry.setdefault("first", mark)
                if not mark["bound"]:
                    entry.setdefault("first_estimate", mark)
                entry.setdefault("history", []).append(mark)
            elif estimate.get("reason"):
                unknown_reasons[name].add(estimate["reason"])
        if all("admitted" in e for e in seen.values()):
            break
        time.sleep(args.poll)
    jobs = []
    for name in names:
        entry = seen[name]
        actual = entry.get("admitted")
        row: dict[str, Any] = {"job": name, "length_seconds": entry["length_seconds"], "admitted": actual}
        # The estimate as it stood `--before` seconds ahead of the admission (the last one made by then).
        ahead = [
            m for m in entry.get("history", []) if actual is not None and m["at"] <= actual - args.before
        ]
        if ahead:
            entry["before"] = ahead[-1]
        for which in WHICH:
            if which in entry and actual is not None:
                mark = entry[which]
                row[which] = {
                    "predicted": mark["predicted"],
                    "bound": mark["bound"],
                    "lead_seconds": round(actual - mark["at"], 1),
                    "error_seconds": round(mark["predicted"] - actual, 1),
                    "summary": mark["summary"],
                }
        row["unknown_reasons"] = sorted(unknown_reasons[name])[:3]
        jobs.append(row)
    summary = {}
    for which in WHICH:
        errors = [abs(j[which]["error_seconds"]) for j in jobs if which in j]
        leads = [j[which]["lead_seconds"] for j in jobs if which in j]
        summary[which] = {
            "jobs": len(errors),
            "median_abs_error_seconds": round(statistics.median(errors), 1) if errors else None,
            "worst_abs_error_seconds": round(max(errors), 1) if errors else None,
            "median_lead_seconds": round(statistics.median(leads), 1) if leads else None,
        }
    never = [j["job"] for j in jobs if "first" not in j]

    return {
        "settings": {k: v for k, v in vars(args).items() if k != "json"} | {"time_scale": TIME_SCALE},
        "jobs": jobs,
        "summary": summary,
        "never_estimated": never,
    }


if __name__ == "__main__":
    raise SystemExit(main())
