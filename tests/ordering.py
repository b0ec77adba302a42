"""The order the test files run in: the longest first, so that on `make test`'s workers (pytest-xdist hands
out whole files in the order collected with --dist loadfile --no-loadscope-reorder; without that flag it
orders them by their count of tests) the short files fill the end and no worker is left with a long file
while the others idle. A run on 2026-11-29 spent its last 5 minutes at 50-75% idle CPU: its
longest files (goodput, progress, Kueue) were handed out last.

How long each file took comes from a run's JUnit report (tests/durations.json, written by `make durations`).
Durations drift as tests change; a stale figure only costs some balance. A file it does not know (a new one)
runs first: unknown may be long."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

DURATIONS = Path(__file__).with_name("durations.json")


class Located(Protocol):
    @property
    def nodeid(self) -> str: ...


T = TypeVar("T", bound=Located)


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test file (its path from the repository root); none when the file is missing or bad."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: Sequence[T], durations: dict[str, float]) -> list[T]:
    """`items` with their files ordered by duration, longest (and unknown) first; each file's tests keep their
    order and stay together (its module fixtures run once), ties keep the collected order."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(file_of(item.nodeid), len(first_seen))

    def key(item: T) -> tuple[float, int]:
        name = file_of(item.nodeid)
        return (-durations.get(name, float("inf")), first_seen[name])

    return sorted(items, key=key)
