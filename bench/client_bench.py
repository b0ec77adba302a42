"""The operator's Kubernetes client on its own: CPU per request and requests/s of tpujob.kube.Kube against a
real API server, with nothing else in the process.

    .venv/bin/python bench/client_bench.py --n 500 --runs 3

One fresh control plane (the test bed's kube-apiserver 1.20 and etcd; no scheduler work: the pods stay
Pending, unscheduled), logged in through its admin kubeconfig as the operator logs in (Kube.login, no
client-side limit). Each run creates N pods (a pass' create: a dict body, the answer not decoded) and
deletes them, from `--threads` threads, and reports this process's CPU ms per request (user + system, over
the run) and requests/s; the figure is the median of `--runs` runs, with the spread. The CPU is the
client's: the API server and etcd are other processes.

`--compare FILE` measures another version of tpujob/kube.py beside this one (say the previous commit's,
`git show HEAD~1:operator/tpujob/kube.py > /tmp/kube_before.py`: it imports what it needs from tpujob as
this checkout has it), the two alternating run by run against the same API server.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
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


def load(path: Path) -> ModuleType:
    """Another version of tpujob/kube.py, as a module of its own."""
    spec = importlib.util.spec_from_file_location(f"kube_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> list[ClientResult]:
    versions = [kube, *([load(args.compare)] if args.compare else [])]
    results = [ClientResult(str(version.__file__), args.n, args.threads) for version in versions]
    with tempfile.TemporaryDirectory(prefix="tpujob-client-") as tmp:
        control_plane = ControlPlane(find_binaries(), Path(tmp)).start()
        try:
            os.environ["KUBECONFIG"] = str(control_plane.kubeconfig)
            apis = [version.Kube.login(max_connections=max(args.threads, 1)) for version in versions]
            # The namespace's default ServiceAccount must exist before a pod may be admitted.
            wait_for(
                lambda: _created_warmup(apis[0]), timeout=60, interval=0.5, what="the first pod admitted"
            )
            for number, api in enumerate(apis):  # connections open, code paths hot
                timed(api, [f"warm-{number}-{i}" for i in range(50)], args.threads)
            for run_no in range(args.runs):
                for number, (api, result) in enumerate(zip(apis, results, strict=True)):
                    names = [f"bench-{run_no}-{number}-{i}" for i in range(args.n)]
                    cpu, wall = timed(api, names, args.threads)
                    requests = 2 * args.n
                    cpu_ms, rate = 1000 * cpu / requests, requests / wall
                    result.cpu_ms_per_request.append(round(cpu_ms, 3))
                    result.requests_per_second.append(round(rate, 1))
                    print(f"  run {run_no + 1}, {result.client}: {cpu_ms:.2f} CPU ms, {rate:.0f} requests/s")
        finally:
            control_plane.stop()
    return results


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
    parser.add_argument("--compare", type=Path, help="another version of tpujob/kube.py, measured beside")
    args = parser.parse_args(argv)
    results = run(args)
    for result in results:
        print(f"tpujob.kube from {result.client}, N={args.n}, {args.threads} thread(s), {args.runs} runs")
        print(f"  CPU ms per request: {spread(result.cpu_ms_per_request)}")
        print(f"  requests/s:         {spread(result.requests_per_second)}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
