"""`tpujob operator`, plus a probe for bench/soak_bench.py: every few seconds it writes the size of every
container the operator keeps (each dict, set, list or deque attribute of any tpujob object reachable from
the handlers' Runtime, and of tpujob's own Prometheus collectors) to the JSON file named by
TPUJOB_SOAK_PROBE, with the process' RSS.

It knows no structure by name: it walks the objects, so the same probe measures the runtime before and after
a change of its shape, and a new per-job map shows up without a line here. It reads only lengths, from the
event loop (a length read is atomic under the GIL; the worker threads may change the maps meanwhile).

    TPUJOB_SOAK_PROBE=/tmp/sizes.json .venv/bin/python bench/soak_probe.py
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
from pathlib import Path
from typing import Any

import kopf
import prometheus_client

import tpujob.handlers  # noqa: F401  (registers the operator's handlers first: this one runs after them)
from tpujob import cli

PROBE_ENV = "TPUJOB_SOAK_PROBE"
PERIOD_ENV = "TPUJOB_SOAK_PROBE_SECONDS"
CONTAINERS = (dict, set, frozenset, list, collections.deque)
DEPTH = 5


def _ours(value: object) -> bool:
    return type(value).__module__.startswith("tpujob")


def container_sizes(root: object, name: str, depth: int = DEPTH) -> dict[str, int]:
    """`path -> len` for every container attribute of `root` and of the tpujob objects it reaches."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()

    def walk(obj: object, path: str, left: int) -> None:
        if id(obj) in seen or left < 0:
            return
        seen.add(id(obj))
        try:
            attributes = dict(vars(obj))
        except TypeError:  # __slots__
            attributes = {a: getattr(obj, a) for a in getattr(obj, "__slots__", ()) if hasattr(obj, a)}
        for attribute, value in attributes.items():
            where = f"{path}.{attribute}"
            if isinstance(value, CONTAINERS):
                sizes[where] = len(value)
            elif _ours(value):
                if hasattr(value, "__len__"):
                    sizes[where] = len(value)
                walk(value, where, left - 1)

    walk(root, name, depth)
    return sizes


def collector_sizes() -> dict[str, int]:
    """tpujob's own collectors registered with Prometheus (those not reachable from the Runtime)."""
    registry: Any = prometheus_client.REGISTRY
    sizes: dict[str, int] = {}
    for collector in list(registry._collector_to_names):  # private, but a bench may read it
        if _ours(collector):
            sizes.update(container_sizes(collector, f"collector:{type(collector).__qualname__}"))
    return sizes


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


async def _probe(memo: kopf.Memo, path: Path, period: float) -> None:
    while getattr(memo, "runtime", None) is None or not hasattr(memo.runtime, "indexes"):
        await asyncio.sleep(0.5)
    while True:
        sizes = {**container_sizes(memo.runtime, "runtime"), **collector_sizes()}
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps({"rss_kib": _rss_kib(), "sizes": sizes}))
        partial.replace(path)
        await asyncio.sleep(period)


@kopf.on.startup()
async def start_probe(memo: kopf.Memo, **_: Any) -> None:
    path = os.environ.get(PROBE_ENV)
    if path:
        task = asyncio.create_task(_probe(memo, Path(path), float(os.environ.get(PERIOD_ENV, "5"))))
        memo.soak_probe = task  # held: a task only the loop references may be collected


if __name__ == "__main__":
    sys.exit(cli.main(["operator", *sys.argv[1:]]))
