"""Each test's CPU seconds, kept in the JUnit report (the property `cpu_seconds`) so scripts/ci_timing.py can
say which test files cost the cores the most: on the 2-core machine `make test` is bound by CPU, not by waits,
so a file's CPU, not its duration, is what it costs the suite.

A test's CPU is that of the process running it and of every process under it, from its setup to its teardown:
the test bed's control plane and operator (per pytest worker, so their work for this test), the trainers and
tools the test started. Read from /proc: each process' own CPU and that of the children it reaped, so a
process that ended during the test counts whole, through whichever process reaped it."""

from __future__ import annotations

import os
from collections import defaultdict

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROPERTY = "cpu_seconds"


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks of the process and of the children it reaped), for every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # ended between the listing and the read
            continue
        # The command name (field 2) may hold spaces and parentheses: the fields after its last ")" are fixed.
        fields = stat.rsplit(b")", 1)[1].split()
        parent, ticks = int(fields[1]), sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        table[int(entry)] = (parent, ticks)
    return table


def tree_ticks(table: dict[int, tuple[int, int]], root: int) -> int:
    """The CPU ticks of `root` and of every living process under it (each counting what it reaped)."""
    children: defaultdict[int, list[int]] = defaultdict(list)
    for pid, (parent, _) in table.items():
        children[parent].append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def cpu_seconds() -> float:
    """The CPU this process and everything under it has used so far; 0 where there is no /proc."""
    if not os.path.isdir("/proc/self"):
        return 0.0
    return tree_ticks(process_table(), os.getpid()) / CLOCK_TICKS
