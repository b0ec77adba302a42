"""A test's CPU as tests/cpu_usage.py reads it: its process and all under it, reaped ones included."""

from __future__ import annotations

import subprocess
import sys

from tests.cpu_usage import cpu_seconds, tree_ticks


def test_the_tree_sums_the_root_and_every_living_descendant_and_nothing_beside():
    table = {1: (0, 500), 10: (1, 7), 11: (10, 3), 12: (11, 2), 20: (1, 40), 21: (20, 1)}
    assert tree_ticks(table, 10) == 12
    assert tree_ticks(table, 20) == 41
    assert tree_ticks(table, 99) == 0


def test_a_child_that_ran_and_ended_counts_through_the_process_that_reaped_it():
    before = cpu_seconds()
    # A grandchild: the shell waits for it, then this process for the shell.
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "sum(i * i for i in range(3_000_000))"'], check=True)
    assert cpu_seconds() - before >= 0.1
