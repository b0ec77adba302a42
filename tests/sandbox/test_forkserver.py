"""The fork server starts a program as `python -m` would (argv, environment, working directory, session, log,
exit status), after importing its modules once; a program whose environment would have changed those
imports is not its to run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tpujob_sandbox.forkserver import ForkServer
from tpujob_sandbox.kubelet import DEFAULT_TRAINER_ENTRYPOINT, LocalContainers
from tpujob_sandbox.processes import pid_alive
from tpujob_sandbox.waiting import wait_for

# Imported by the server, once: each import appends the importing process's pid to a file.
PRELOADED = """
import os, pathlib
with open(pathlib.Path(__file__).with_name("imports"), "a") as f:
    f.write(f"{os.getpid()}\\n")
"""

# The program: says what it sees, then does what its first argument says.
PROGRAM = """
import json, os, sys, time
print(json.dumps({
    "name": __name__, "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
    "path0": sys.path[0], "own_session": os.getsid(0) == os.getpid(), "pid": os.getpid(),
    "preloaded": "warm" in sys.modules,
}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "exit":
    sys.exit(int(sys.argv[2]))
if sys.argv[1] == "raise":
    raise RuntimeError("boom")
time.sleep(600)
"""


@pytest.fixture
def server(tmp_path):
    state = tmp_path / ("a-folder-deeper-than-a-unix-socket-path-may-be-" * 2) / "server"  # > 107 bytes
    state.mkdir(parents=True)
    (state / "warm.py").write_text(PRELOADED)  # the server's working directory is on its path
    forks = ForkServer(
        state,
        python=sys.executable,
        modules=("program",),
        preload=("warm",),
        env={"PATH": os.environ["PATH"]},
    )
    yield forks
    forks.stop()


def run(server: ForkServer, tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    (workdir / "program.py").write_text(textwrap.dedent(PROGRAM))
    log = tmp_path / f"{'-'.join(args)}.log"
    env = env or {"PATH": os.environ["PATH"], "ROLE": "worker-1"}
    process = server.start([sys.executable, "-m", "program", *args], log, env=env, cwd=workdir)
    return process, log


def seen(log: Path) -> dict:
    wait_for(lambda: log.exists() and "to stderr" in log.read_text(), timeout=30, what="the program's report")
    return json.loads(log.read_text().splitlines()[0])


def test_a_forked_program_runs_as_python_dash_m_would_with_its_exit_status(server, tmp_path):
    process, log = run(server, tmp_path, "exit", "3")
    assert process.wait(timeout=30) == 3 and process.poll() == 3
    report = seen(log)
    assert report["name"] == "__main__" and report["argv"] == ["exit", "3"]
    assert report["env"] == {"PATH": os.environ["PATH"], "ROLE": "worker-1"}
    assert report["cwd"] == report["path0"] == str(tmp_path / "work")
    assert report["own_session"] and report["pid"] == process.pid
    assert report["preloaded"]

    failed, failed_log = run(server, tmp_path, "raise")
    assert failed.wait(timeout=30) == 1
    assert "RuntimeError: boom" in failed_log.read_text()  # the traceback, as the interpreter prints it

    # The preloaded module was imported once, by the server, not by either program.
    imports = (server.state_dir / "imports").read_text().split()
    assert len(imports) == 1 and imports[0] not in (str(process.pid), str(failed.pid))


def test_a_forked_program_ends_by_a_signal_to_its_group_as_a_process_does(server, tmp_path):
    process, log = run(server, tmp_path, "sleep")
    seen(log)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.2)
    assert process.poll() is None
    os.killpg(process.pid, signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM


def test_the_programs_end_with_the_server(server, tmp_path):
    process, log = run(server, tmp_path, "sleep")
    seen(log)
    server.stop()
    assert process.wait(timeout=30) < 0
    wait_for(lambda: not pid_alive(process.pid), timeout=30, what="the program to end (PR_SET_PDEATHSIG)")


def test_only_python_dash_m_of_its_modules_without_an_import_time_variable_is_the_servers():
    server = ForkServer(
        Path("/nonexistent"), python="/py", modules=("program",), preload=(), env={"PYTHONPATH": "/lib"}
    )
    assert server.can_run(["/py", "-m", "program", "--steps", "3"], {"PYTHONPATH": "/lib", "TF_CONFIG": "{}"})
    assert not server.can_run(["/py", "-m", "other"], {"PYTHONPATH": "/lib"})
    assert not server.can_run(["/py", "-c", "program"], {"PYTHONPATH": "/lib"})
    assert not server.can_run(["/other/python", "-m", "program"], {})
    # Read as Python, TensorFlow or Keras start: a program that sets them starts fresh.
    for name, value in [
        ("PYTHONPATH", "/elsewhere"),
        ("TF_CPP_MIN_LOG_LEVEL", "3"),
        ("KERAS_BACKEND", "jax"),
    ]:
        assert not server.can_run(["/py", "-m", "program"], {"PYTHONPATH": "/lib", name: value}), name
    assert not server.can_run(["/py", "-m", "program"], {}), "the server's PYTHONPATH, unset"


def test_the_test_beds_trainers_get_a_share_of_the_cores_and_are_still_forked(tmp_path):
    """The kubelet gives every local process one intra-op thread (containers.SHARED_HOST_ENV), the fork
    server's environment too: a trainer is still forked, and a pod that sets its own starts fresh."""
    containers = LocalContainers(
        tmp_path, trainer_images=("trainer",), trainer_entrypoint=DEFAULT_TRAINER_ENTRYPOINT, python="/py"
    )
    shared = containers.forkserver.env
    assert (shared["TF_NUM_INTRAOP_THREADS"], shared["TF_NUM_INTEROP_THREADS"]) == ("1", "2")
    trainer = ["/py", "-m", DEFAULT_TRAINER_ENTRYPOINT[2], "--steps", "3"]
    assert containers.forkserver.can_run(trainer, {**shared, "TPU_WORKER_ID": "0"})
    assert not containers.forkserver.can_run(trainer, {**shared, "TF_NUM_INTRAOP_THREADS": "8"})
