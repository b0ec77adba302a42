"""The operator's Kubernetes client on its own: CPU per request and requests/s of tpujob.kube.Kube against a
real API server, with nothing else in the process.

    .venv/bin/python bench/client_bench.py --n 500 --runs 3

One fresh control plane (the test bed's kube-apiserver 1.20 and etcd; no scheduler work: the pods stay
Pending, unscheduled), logged in through its admin kubeconfig as the operator logs in (Kube.login, no
client-side limit). Each run creates N pods (a pass' create: a dict body, the answer not decoded) and
deletes them, from `--threads` threads, and reports this process's CPU ms per request (user + system, over
the run) and requests/s; the figure is the median of `--runs` runs, with the spread. The CPU is the
client's: the API server and etcd are other processes.

To compare with another version of tpujob.kube (say the previous commit's), run the same bench with that
version first on the path: `PYTHONPATH=<its checkout>/operator .venv/bin/python bench/client_bench.py`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # race_measure, beside this file

from race_measure import write_json

from tpujob import kube
from tpujob_sandbox import ControlPlane, find_binaries
from tpujob_sandbox.waiting import wait_for

NAMESPACE = "default"


@dataclass
class ClientResult:
    client: str
    n: int
    threads: int
    cpu_ms_per_request: list[float] = field(default_factory=list)
    requests_per_second: list[float] = field(default_factory=list)


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "client"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "infinity"]}]},
    }


def timed(api: kube.Kube, names: list[str], threads: int) -> tuple[float, float]:
    """CPU seconds and wall seconds of creating then deleting `names`; every call must succeed."""
    cpu, wall = time.process_time(), time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        assert all(pool.map(lambda name: api.create_pod(NAMESPACE, pod(name)), names))
        assert all(pool.map(lambda name: api.delete_pod(NAMESPACE, name), names))
    return time.process_time() - cpu, time.monotonic() - wall


def run(args: argparse.Namespace) -> ClientResult:
    result = ClientResult(kube.__file__, args.n, args.threads)
    with tempfile.TemporaryDirectory(prefix="tpujob-client-") as tmp:
        control_plane = ControlPlane(find_binaries(), Path(tmp)).start()
        try:
            os.environ["KUBECONFIG"] = str(control_plane.kubeconfig)
            api = kube.Kube.login(max_connections=max(args.threads, 1))
            # The namespace's default ServiceAccount must exist before a pod may be admitted.
            wait_for(lambda: _created_warmup(api), timeout=60, interval=0.5, what="the first pod admitted")
            timed(api, [f"warm-{i}" for i in range(20)], args.threads)  # connections open, code paths hot
            for run_no in range(args.runs):
                names = [f"bench-{run_no}-{i}" for i in range(args.n)]
                cpu, wall = timed(api, names, args.threads)
                requests = 2 * args.n
                result.cpu_ms_per_request.append(round(1000 * cpu / requests, 3))
                result.requests_per_second.append(round(requests / wall, 1))
                cpu_ms, rate = 1000 * cpu / requests, requests / wall
                print(f"  run {run_no + 1}: {cpu_ms:.2f} CPU ms/request, {rate:.0f} requests/s")
        finally:
            control_plane.stop()
    return result


def _created_warmup(api: kube.Kube) -> bool:
    try:
        api.create_pod(NAMESPACE, pod("admitted"))
    except kube.ApiError:
        return False
    api.delete_pod(NAMESPACE, "admitted")
    return True


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):g} ({min(values):g} to {max(values):g})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500, help="pods created then deleted per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="calling threads (a pass creates from 8)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    result = run(args)
    print(f"tpujob.kube from {result.client}, N={args.n}, {args.threads} thread(s), {args.runs} runs")
    print(f"  CPU ms per request: {spread(result.cpu_ms_per_request)}")
    print(f"  requests/s:         {spread(result.requests_per_second)}")
    write_json(args.json, [result])
    return 0


if __name__ == "__main__":
    sys.exit(main())
