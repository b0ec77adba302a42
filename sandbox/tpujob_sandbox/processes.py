"""Child processes that die with their parent and stop with SIGTERM, then SIGKILL after a deadline."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tpujob_sandbox.machine import cache_root

_PR_SET_PDEATHSIG = 1


_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded before any fork: the child only calls into it


def die_with_parent() -> None:
    # If the sandbox's own process is killed (even with SIGKILL), the kernel stops its children too.
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_process(
    args: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `args` in its own process group, output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )


class Process(Protocol):
    """What the test bed uses of a child process: `subprocess.Popen`, or a program forked by forkserver.py."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def stop_process(process: Process, grace_seconds: float = 10.0) -> int:
    """SIGTERM the process group, SIGKILL it if still alive after the grace period; return the exit code."""
    if process.poll() is None:
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
    # Children the program left in its group go with it.
    _signal_group(process.pid, signal.SIGKILL)
    return process.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def pid_alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    # The state letter follows the parenthesised command name, which may itself contain spaces.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


# Below Linux's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default), from which every
# outgoing connection on the machine takes its local port: a free port picked there can be taken by some
# client between the pick and the server's bind (seen: etcd's "bind: address already in use" while the
# other pytest worker ran). Servers that bind a port they are given do best outside it.
SERVER_PORTS = range(20000, 32768)
# The range, dealt out in blocks: each process that picks ports holds a block of its own while it lives (an
# flock on a file, which the kernel releases when the process ends), so two of the test bed's processes (the
# pytest workers, a sandbox, a test's own session) never pick the same port in the seconds between a pick and
# the server's bind. Seen without them (2026-11-30): one worker's kube-scheduler was refused the port another
# worker's picks took during its bed's 20 s start, and that worker's 144 tests all errored. With every block
# held, a process picks from the whole range, probing as before.
PORT_BLOCKS = 16
_picked: set[int] = set()  # this process's picks, never given twice
_block: tuple[int, range] | None = None  # (the pid that holds it, its ports)
_block_lock = threading.Lock()


def port_block(index: int) -> range:
    size = len(SERVER_PORTS) // PORT_BLOCKS
    return SERVER_PORTS[index * size : (index + 1) * size]


def _own_ports() -> range:
    """This process's block of SERVER_PORTS, taken on first use (a forked child takes one of its own)."""
    global _block
    with _block_lock:
        if _block is None or _block[0] != os.getpid():
            _block = (os.getpid(), _take_block())
        return _block[1]


def _take_block() -> range:
    folder = cache_root() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(PORT_BLOCKS):
        held = os.open(folder / f"server-ports-{index}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(held)
            continue
        return port_block(index)  # `held` stays open: the block is this process's until it ends
    return SERVER_PORTS


def free_port() -> int:
    """A loopback port nobody listens on, outside the ephemeral range, from this process's block."""
    ports = _own_ports()
    while True:
        if _picked.issuperset(ports):  # a block used up: the whole range, probed
            ports = SERVER_PORTS
        port = random.choice(ports)
        if port in _picked:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _picked.add(port)
        return port
