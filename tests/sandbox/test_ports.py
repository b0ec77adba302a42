"""free_port deals the machine's server ports out in blocks, one per process while it lives: the test bed's
processes (pytest workers, sandboxes, a test's own session) never pick the same port between a pick and
the server's bind."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from tpujob_sandbox import processes

# Picks a port, says it and the block it came from, and holds the block until its stdin closes.
PICKER = (
    "import sys; from tpujob_sandbox import processes; port = processes.free_port(); "
    "block = processes._own_ports(); print(port, block.start, block.stop, flush=True); sys.stdin.read()"
)


def picker(env: dict[str, str]) -> tuple[subprocess.Popen[str], int, range]:
    process = subprocess.Popen(
        [sys.executable, "-c", PICKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    port, start, stop = (int(word) for word in process.stdout.readline().split())
    return process, port, range(start, stop)


@pytest.mark.timeout(60)  # each picker answers in a second; a hung one fails here, not at the suite's 600 s
def test_two_processes_pick_from_blocks_of_their_own_and_a_block_is_free_again_when_its_process_ends(
    tmp_path,
):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # a machine of its own: no other holder
    first, first_port, first_block = picker(env)
    second, second_port, second_block = picker(env)
    try:
        assert (first_block, second_block) == (processes.port_block(0), processes.port_block(1))
        assert first_port in first_block and second_port in second_block
        assert first_block.stop <= second_block.start  # disjoint
    finally:
        for process in (first, second):
            process.communicate(timeout=30)
    third, third_port, third_block = picker(env)
    third.communicate(timeout=30)
    assert third_block == processes.port_block(0) and third_port in third_block


def test_the_blocks_split_the_server_ports_below_the_ephemeral_range():
    blocks = [processes.port_block(index) for index in range(processes.PORT_BLOCKS)]
    assert blocks[0].start == processes.SERVER_PORTS.start and blocks[-1].stop <= 32768
    assert all(a.stop == b.start for a, b in itertools.pairwise(blocks))
    assert min(len(block) for block in blocks) > 500  # and a block used up falls back to the whole range
