"""A warm interpreter that starts Python programs by forking: the test bed's way to start many trainers.

A real trainer spends about 5 CPU-seconds importing TensorFlow and Keras (and, through them, scikit-learn)
before its first step, and the test bed starts dozens of them on a machine whose tests are bound by CPU.
The server imports the modules a program needs once; each program it is asked to run is a fork of it that
then runs the module as `python -m MODULE ARGS` would: in a session (and process group) of its own, with
the given environment, working directory and log, its exit status reported as `subprocess.Popen` does.
The program's own code, and all it does from its `main` on, is the same as in a fresh process.

What differs from a fresh `python -m` is only what the modules did while they were imported, with the
server's environment: a program whose environment names a variable Python, numpy, TensorFlow or Keras read
as they start (`reads_at_import`) is not forked but started fresh (`ForkServer.can_run`). Python's `random`
is seeded again in each child by Python itself (os.register_at_fork); numpy's global generator here.

One request per connection: a JSON line (argv, env, cwd, log); the answer `pid N`, then `exit CODE` when
the child ends (CODE as Popen.returncode: negative for a signal).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tpujob_sandbox.processes import start_process, stop_process

# What Python, numpy's BLAS, TensorFlow, Keras and JAX read from the environment as they start (names and
# prefixes): set in a program's environment, they would not take effect in a fork, so it starts fresh.
# TF_CONFIG is read when a strategy is made, not at import.
IMPORT_TIME_PREFIXES = (
    *("PYTHON", "LD_", "KERAS_", "XLA_", "JAX_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "CUDA_"),
    *("TF_CPP_", "TF_ENABLE_", "TF_USE_", "TF_NUM_", "TF_XLA_", "TF_GPU_"),
)

# What the trainer (`python -m tpujob_trainer`) imports before its first step, for a server of trainers to
# import once: TensorFlow, Keras and scikit-learn through the trainer's modules.
TRAINER_PRELOAD = ("tpujob_trainer.cli", "tpujob_trainer.train", "tpujob_trainer.metrics")

ABSTRACT = "\0"  # a Unix socket name that starts with NUL is in the abstract namespace (unix(7))


def reads_at_import(name: str) -> bool:
    return name.startswith(IMPORT_TIME_PREFIXES)


class ForkedProcess:
    """A forked program, as much of `subprocess.Popen` as the test bed uses: pid, poll, wait, returncode."""

    def __init__(self, args: Sequence[str], connection: socket.socket, pid: int) -> None:
        self.args = list(args)
        self.pid = pid
        self.returncode: int | None = None
        self._connection = connection
        self._ended = threading.Event()
        threading.Thread(target=self._await_exit, name=f"forked-{pid}", daemon=True).start()

    def _await_exit(self) -> None:
        answer = _read_line(self._connection)
        self._connection.close()
        # No answer: the server itself ended, and its children with it (PR_SET_PDEATHSIG).
        self.returncode = int(answer.split()[1]) if answer.startswith("exit ") else -signal.SIGKILL
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """The client: starts the server on first use (importing `preload`), then forks `python -m MODULE`
    programs for the `modules` it was given."""

    def __init__(
        self,
        state_dir: Path,
        *,
        python: str,
        modules: tuple[str, ...],
        preload: tuple[str, ...],
        env: Mapping[str, str],
    ) -> None:
        self.state_dir = state_dir
        self.python = python
        self.modules = modules
        self.preload = preload
        self.env = dict(env)
        self._server: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        """The server's socket's name in Linux's abstract namespace (a path is bound by AF_UNIX's 107 bytes,
        which a state folder under pytest's tmp_path can pass, and would be left behind on disk)."""
        return f"tpujob-forkserver-{os.getpid()}-{id(self):x}"

    def can_run(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """True for `python -m MODULE ...` of a module this server preloads, with no environment variable
        that would have changed how the preloaded modules imported."""
        return (
            len(argv) >= 3
            and argv[0] == self.python
            and argv[1] == "-m"
            and argv[2] in self.modules
            and not any(
                reads_at_import(name) for name in {*env, *self.env} if env.get(name) != self.env.get(name)
            )
        )

    def start(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str],
        cwd: Path,
        stderr_path: Path | None = None,
    ) -> ForkedProcess:
        """Fork `argv` (`python -m MODULE ...`), its output appended to `log_path` (stderr to
        `stderr_path`, if given)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        connection = self._connect()
        request = {
            "module": argv[2],
            "argv": list(argv[2:]),
            "env": dict(env),
            "cwd": str(cwd),
            "stdout": str(log_path),
            "stderr": str(stderr_path or log_path),
        }
        connection.sendall(json.dumps(request).encode() + b"\n")
        answer = _read_line(connection)
        if not answer.startswith("pid "):
            connection.close()
            raise RuntimeError(f"the fork server did not start {argv}: {answer or 'no answer'}")
        return ForkedProcess(argv, connection, int(answer.split()[1]))

    def stop(self) -> None:
        """Stop the server; a child still running gets SIGTERM with it (PR_SET_PDEATHSIG)."""
        with self._lock:
            if self._server is not None:
                stop_process(self._server, grace_seconds=5)
                self._server = None

    def _connect(self, timeout: float = 120.0) -> socket.socket:
        with self._lock:
            if self._server is None or self._server.poll() is not None:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                argv = [self.python, "-m", "tpujob_sandbox.forkserver", self.address, *self.preload]
                self._server = start_process(
                    argv, self.state_dir / "forkserver.log", env=self.env, cwd=self.state_dir
                )
            server = self._server
        deadline = time.monotonic() + timeout
        while True:  # refused until the server has imported `preload` and listens
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                connection.connect(ABSTRACT + self.address)
                return connection
            except ConnectionRefusedError:
                connection.close()
            if server.poll() is not None:
                raise RuntimeError(
                    f"the fork server exited ({server.returncode}): see {self.state_dir / 'forkserver.log'}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not listen within {timeout:.0f} s")
            time.sleep(0.05)


def _read_line(connection: socket.socket) -> str:
    data = b""
    with contextlib.suppress(OSError):
        while not data.endswith(b"\n"):
            chunk = connection.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace").strip()


# ---- the server (python -m tpujob_sandbox.forkserver SOCKET MODULE...) ---------------------------------


def serve(address: str, preload: Sequence[str]) -> dict[str, Any]:
    """Import `preload`, then fork a child per request; returns only in a child, with its request."""
    for module in preload:
        importlib.import_module(module)
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_read, False)
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wakeup pipe
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(ABSTRACT + address)
    listener.listen(64)
    children: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([listener.fileno(), wakeup_read], [], [])
        if wakeup_read in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(wakeup_read, 4096)
            _reap(children)
        if listener.fileno() in readable:
            connection, _ = listener.accept()
            try:
                request: dict[str, Any] = json.loads(_read_line(connection))
            except ValueError:  # a client that went away before asking: nothing to start
                connection.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                for held in (listener, connection, *children.values()):
                    held.close()
                os.close(wakeup_read)
                os.close(wakeup_write)
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                return request
            connection.sendall(f"pid {pid}\n".encode())
            children[pid] = connection


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            connection.close()


def become(request: Mapping[str, Any]) -> None:
    """In the child: the process `python -m` would have started for `request`, up to running its module."""
    from tpujob_sandbox.processes import die_with_parent

    os.setsid()
    die_with_parent()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        # The same file twice is opened once, so that both streams append at one offset.
        if fd == 2 and path == request["stdout"]:
            os.dup2(1, 2)
            continue
        opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
        sys.modules["numpy"].random.seed()


if __name__ == "__main__":
    child_request = serve(sys.argv[1], sys.argv[2:])
    become(child_request)
    runpy.run_module(child_request["module"], run_name="__main__", alter_sys=True)
