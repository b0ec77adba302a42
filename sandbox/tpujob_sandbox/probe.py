"""`tpujob operator` with a probe into what it keeps (OperatorProcess(probe=...); run as a script by the
operator's own Python, so it imports only what the operator has). Every TPUJOB_PROBE_SECONDS (5) it writes
to the JSON file named by TPUJOB_PROBE, from the event loop:

- `sizes`: the length of every container the operator keeps: each dict, set, list or deque attribute of any
  tpujob object reachable from the handlers' Runtime, and of tpujob's own Prometheus collectors;
- `held` (with TPUJOB_PROBE_HELD set): every short string those containers hold, as keys or items, however
  deep (a job's UID, a pool's name), for a test that asserts a gone job left nothing behind;
- `rss_kib`: the process' RSS.

It knows no structure by name: it walks the objects, so the same probe measures the runtime before and after
a change of its shape, and a new per-job map shows up without a line here (bench/soak_bench.py,
tests/e2e/test_runtime_lifecycle.py). Lengths are read without locks (atomic under the GIL); `held` copies
each container before walking it, as the worker threads may change them meanwhile.

    TPUJOB_PROBE=/tmp/probe.json .venv/operator/bin/python sandbox/tpujob_sandbox/probe.py
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

PROBE_ENV = "TPUJOB_PROBE"
PERIOD_ENV = "TPUJOB_PROBE_SECONDS"
HELD_ENV = "TPUJOB_PROBE_HELD"
CONTAINERS = (dict, set, frozenset, list, collections.deque)
DEPTH = 5
# Strings longer than this are bodies (an indexed job's JSON), not names: a test looks for names and UIDs.
NAME_LENGTH = 128


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


def held_strings(root: object, depth: int = 10) -> set[str]:
    """Every short string held as a key, item or attribute value inside the tpujob objects and containers
    `root` reaches."""
    held: set[str] = set()
    seen: set[int] = set()

    def walk(value: object, left: int) -> None:
        if isinstance(value, str):
            if len(value) <= NAME_LENGTH:
                held.add(value)
            return
        if left < 0 or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for key, item in list(value.items()):
                walk(key, left - 1)
                walk(item, left - 1)
        elif isinstance(value, (*CONTAINERS, tuple)):
            for item in list(value):
                walk(item, left - 1)
        elif _ours(value):
            try:
                attributes = list(vars(value).values())
            except TypeError:
                attributes = [getattr(value, a) for a in getattr(value, "__slots__", ()) if hasattr(value, a)]
            for attribute in attributes:
                walk(attribute, left - 1)

    walk(root, depth)
    return held


def _collectors() -> list[object]:
    registry: Any = prometheus_client.REGISTRY
    return [c for c in list(registry._collector_to_names) if _ours(c)]  # private, but a probe may read it


def collector_sizes() -> dict[str, int]:
    """tpujob's own collectors registered with Prometheus (those not reachable from the Runtime)."""
    sizes: dict[str, int] = {}
    for collector in _collectors():
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
        report: dict[str, Any] = {"rss_kib": _rss_kib(), "sizes": sizes}
        if os.environ.get(HELD_ENV):
            report["held"] = sorted(held_strings([memo.runtime, *_collectors()]))
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(report))
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
