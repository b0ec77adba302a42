"""The container runtime side of the simulated kubelet: a trainer-image (or other local image's) container
runs as a local process group with the pod's env, output in a log file; stopping it is SIGTERM, then SIGKILL
after a grace period."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpujob.api.trainer_contract import ENV_METRICS_ADDRESS, ENV_TERMINATION_LOG
from tpujob_sandbox.forkserver import TRAINER_PRELOAD, ForkServer
from tpujob_sandbox.kubelet.podstatus import (
    DEFAULT_LOCAL_IMAGES,
    MAX_TERMINATION_MESSAGE_LOG_BYTES,
    LocalImage,
    container_argv,
    container_env,
    is_trainer_image,
    local_image_for,
    map_gcs,
    map_path,
    resolve_pod_names,
    termination_message,
)
from tpujob_sandbox.processes import Process, start_process, stop_process

log = logging.getLogger(__name__)

# The test bed's trainers share this machine's few cores (a dozen processes at once under the tests), where a
# TPU host gives its one trainer its ~200 cores and runs the model's ops on the chips. TensorFlow sizes its op
# thread pools by the host's cores, and for the small CPU models here its intra-op threads mostly spin: one
# intra-op and two inter-op threads (MultiWorkerMirrored's collectives want a second) cut a 4,000-step digits
# run from 28.6 to 19.9 CPU-seconds and its training from 15.9 to 10.1 s (2-core machine, 2026-11-30, two runs
# each). Set in every local process's env and the fork server's; a pod's own env overrides them. A real
# kubelet sets no such variables: they are the test bed's sharing of one machine; the operator reads none.
SHARED_HOST_ENV = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2"}


@dataclass
class Run:
    """What this kubelet knows about one pod it runs."""

    uid: str
    pod_ip: str
    process: Process | None = None
    restarts: int = 0
    finished: bool = False
    sigterm_at: float | None = None
    kill_timer: threading.Timer | None = field(default=None, repr=False)
    # The container instance's termination log, and its log: the pod's log from log_offset on.
    termination_log: Path | None = None
    log: Path | None = None
    log_offset: int = 0
    # Set by KubeletSimulator.oom_kill: the process's SIGKILL was the OOM killer's (reason OOMKilled).
    oom_killed: bool = False
    # What the kubelet resolved before the container started (kubelet/startup.py), kept for its restarts:
    # env from Secrets and ConfigMaps, and (mountPath, local folder) of its volumes.
    referenced_env: dict[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()


class LocalContainers:
    """Runs the pods' trainer-image and `local_images` containers as local processes (others run nowhere)."""

    def __init__(
        self,
        state_dir: Path,
        *,
        trainer_images: tuple[str, ...],
        trainer_entrypoint: tuple[str, ...],
        python: str,
        extra_env: dict[str, str] | None = None,
        local_images: tuple[LocalImage, ...] = DEFAULT_LOCAL_IMAGES,
    ) -> None:
        self.state_dir = state_dir
        self.trainer_images = trainer_images
        self.local_images = local_images
        self.trainer_entrypoint = trainer_entrypoint
        self.python = python
        # Passed to local processes on top of PATH/HOME/LANG, under the pod's env (e.g. PYTHONPATH).
        self.extra_env = {**SHARED_HOST_ENV, **(extra_env or {})}
        # Every process started: (namespace, image, argv). The test bed's pytest plugin tells real trainers by
        # it, per test namespace (a pod of an earlier test may start late, while the next test runs).
        self.started: list[tuple[str, str, list[str]]] = []
        # Trainer-image containers (`python -m tpujob_trainer`) start as forks of a warm interpreter: the same
        # program from its main on, without each one importing TensorFlow again.
        self.forkserver = ForkServer(
            state_dir / "forkserver",
            python=python,
            modules=(trainer_entrypoint[2],) if trainer_entrypoint[:2] == ("python", "-m") else (),
            preload=TRAINER_PRELOAD,
            env={**_base_env(), **self.extra_env},
        )

    def trainer_container(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod's first container with the trainer image or a local image: the one that runs as a local
        process."""
        return next((c for c in pod["spec"]["containers"] if self._runs_locally(c["image"])), None)

    def _runs_locally(self, image: str) -> bool:
        return is_trainer_image(image, self.trainer_images) or bool(local_image_for(image, self.local_images))

    def log_path(self, namespace: str, name: str) -> Path:
        return self.state_dir / "pods" / f"{namespace}_{name}.log"

    def start(
        self,
        run: Run,
        pod: dict[str, Any],
        container: dict[str, Any],
        on_exit: Callable[[], None],
        *,
        env: dict[str, str] | None = None,
        mounts: tuple[tuple[str, str], ...] | None = None,
        gcs_root: Path | None = None,
    ) -> None:
        """Start `container` as `run`'s process; `on_exit` is called (on another thread) when it exits.
        `env` and `mounts` (kubelet/startup.py) are kept on the run for the container's restarts; gs://
        paths in its env and argv become folders of `gcs_root` (default: the state dir's gcs/)."""
        if env is not None:
            run.referenced_env = dict(env)
        if mounts is not None:
            run.mounts = tuple(mounts)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        # Each container instance gets a new, empty termination log, as a kubelet gives it one.
        run.termination_log = self.termination_log_path(namespace, name)
        run.termination_log.parent.mkdir(parents=True, exist_ok=True)
        run.termination_log.write_bytes(b"")
        run.log = self.log_path(namespace, name)
        run.log_offset = run.log.stat().st_size if run.log.exists() else 0
        run.process = self._spawn(pod, container, run, gcs_root or self.state_dir / "gcs")
        threading.Thread(target=_await_exit, args=(run.process, on_exit), daemon=True).start()

    def termination_log_path(self, namespace: str, name: str) -> Path:
        return self.state_dir / "pods" / f"{namespace}_{name}.termination-log"

    def termination_message(self, run: Run, container: dict[str, Any], exit_code: int) -> str:
        """What a kubelet reports as the ended container instance's state.terminated.message."""
        written = b""
        if run.termination_log is not None and run.termination_log.exists():
            written = run.termination_log.read_bytes()
        log = b""
        if run.log is not None and run.log.exists():
            # The message is a suffix of the log no longer than this: no need to read more.
            start = max(run.log_offset, run.log.stat().st_size - MAX_TERMINATION_MESSAGE_LOG_BYTES)
            with run.log.open("rb") as handle:
                handle.seek(start)
                log = handle.read()
        return termination_message(container, exit_code, written, log)

    def _spawn(self, pod: dict[str, Any], container: dict[str, Any], run: Run, gcs_root: Path) -> Process:
        assert run.termination_log is not None
        termination_log = run.termination_log
        env = container_env(pod, container, run.referenced_env)
        # Each pod has a network namespace of its own; these processes share the host's. Every worker pod
        # serves metrics on the port it declares, so each process binds it on its pod's own loopback IP
        # (addresses.py), where the operator (and Prometheus) find it by pod IP, as in a cluster.
        env[ENV_METRICS_ADDRESS] = run.pod_ip
        image = None if is_trainer_image(container["image"], self.trainer_images) else container["image"]
        local = local_image_for(image, self.local_images) if image else None
        # The pod's volumes at their mount paths, and gs:// buckets, as local folders.
        paths = run.mounts + (local.paths if local else ())

        def here(word: str) -> str:
            return map_gcs(map_path(word, paths), gcs_root)

        if local is None:
            env = {name: here(value) for name, value in env.items()}
            argv = container_argv(container, env, self.python, self.trainer_entrypoint)
        else:  # a bring-your-own image: its paths mapped here, its peers' names on loopback
            env = {name: here(value) for name, value in resolve_pod_names(pod, env).items()}
            argv = container_argv(container, env, self.python, local.entrypoint)
        argv = [here(word) for word in argv]
        working_dir = container.get("workingDir") and here(container["workingDir"])
        workdir = self.state_dir / "pods" / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}"
        workdir.mkdir(parents=True, exist_ok=True)
        cwd = Path(working_dir) if working_dir else workdir
        log_path = self.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.started.append((pod["metadata"]["namespace"], container["image"], argv))
        process_env = {
            **_base_env(),
            **self.extra_env,
            "HOSTNAME": pod["metadata"]["name"],
            **env,
            # In place of terminationMessagePath (/dev/termination-log), which a local process lacks.
            ENV_TERMINATION_LOG: str(termination_log),
        }
        if self.forkserver.can_run(argv, process_env):
            try:
                return self.forkserver.start(argv, log_path, env=process_env, cwd=cwd)
            except (OSError, RuntimeError) as error:  # the same program, started the slow way
                log.warning("starting %s without the fork server: %s", argv[:3], error)
        return start_process(argv, log_path, env=process_env, cwd=cwd)


def _base_env() -> dict[str, str]:
    return {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}


def _await_exit(process: Process, on_exit: Callable[[], None]) -> None:
    process.wait()
    on_exit()


def terminate(run: Run, grace_seconds: float) -> None:
    """Pod deletion: SIGTERM `run`'s process group once, SIGKILL it `grace_seconds` later."""
    assert run.process is not None
    if run.sigterm_at is None:
        run.sigterm_at = time.monotonic()
        sigterm_group(run.process)
        run.kill_timer = threading.Timer(grace_seconds, kill_group, (run.process,))
        run.kill_timer.daemon = True
        run.kill_timer.start()


def discard(run: Run, grace_seconds: float = 10.0) -> None:
    """The pod is gone or the kubelet stops: cancel a pending SIGKILL and stop the process, if any."""
    if run.kill_timer:
        run.kill_timer.cancel()
    if run.process:
        stop_process(run.process, grace_seconds=grace_seconds)


def sigterm_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)


def kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
