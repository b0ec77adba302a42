"""The container runtime side of the simulated kubelet: a trainer-image (or other local image's) container
runs as a local process group with the pod's env, output in a log file; stopping it is SIGTERM, then SIGKILL
after a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpujob.render.plan import ENV_METRICS_PORT
from tpujob_sandbox.kubelet.podstatus import (
    DEFAULT_LOCAL_IMAGES,
    MAX_TERMINATION_MESSAGE_LOG_BYTES,
    TERMINATION_LOG_ENV,
    LocalImage,
    container_argv,
    container_env,
    is_trainer_image,
    local_image_for,
    map_path,
    resolve_pod_names,
    termination_message,
)
from tpujob_sandbox.processes import free_port, start_process, stop_process


@dataclass
class Run:
    """What this kubelet knows about one pod it runs."""

    uid: str
    pod_ip: str
    process: subprocess.Popen[bytes] | None = None
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
        # Passed to local processes on top of PATH/HOME/LANG and the pod's env (e.g. PYTHONPATH).
        self.extra_env = dict(extra_env or {})
        # Every process started: (image, argv). The test bed's pytest plugin tells real trainers by it.
        self.started: list[tuple[str, list[str]]] = []

    def trainer_container(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod's first container with the trainer image or a local image: the one that runs as a local
        process."""
        return next((c for c in pod["spec"]["containers"] if self._runs_locally(c["image"])), None)

    def _runs_locally(self, image: str) -> bool:
        return is_trainer_image(image, self.trainer_images) or bool(local_image_for(image, self.local_images))

    def log_path(self, namespace: str, name: str) -> Path:
        return self.state_dir / "pods" / f"{namespace}_{name}.log"

    def start(
        self, run: Run, pod: dict[str, Any], container: dict[str, Any], on_exit: Callable[[], None]
    ) -> None:
        """Start `container` as `run`'s process; `on_exit` is called (on another thread) when it exits."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        # Each container instance gets a new, empty termination log, as a kubelet gives it one.
        run.termination_log = self.termination_log_path(namespace, name)
        run.termination_log.parent.mkdir(parents=True, exist_ok=True)
        run.termination_log.write_bytes(b"")
        run.log = self.log_path(namespace, name)
        run.log_offset = run.log.stat().st_size if run.log.exists() else 0
        run.process = self._spawn(pod, container, run.termination_log)
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

    def _spawn(
        self, pod: dict[str, Any], container: dict[str, Any], termination_log: Path
    ) -> subprocess.Popen[bytes]:
        env = container_env(pod, container)
        if ENV_METRICS_PORT in env:
            # Each pod has a network namespace of its own; these processes share the host's. Every worker
            # pod serves metrics on the same port, so each process (of any attempt, old ones still shutting
            # down) gets a free one instead.
            env[ENV_METRICS_PORT] = str(free_port())
        image = None if is_trainer_image(container["image"], self.trainer_images) else container["image"]
        local = local_image_for(image, self.local_images) if image else None
        if local is None:
            argv = container_argv(container, env, self.python, self.trainer_entrypoint)
            working_dir = container.get("workingDir")
        else:  # a bring-your-own image: its paths mapped here, its peers' names on loopback
            env = {name: map_path(value, local.paths) for name, value in resolve_pod_names(pod, env).items()}
            argv = container_argv(container, env, self.python, local.entrypoint)
            argv = [map_path(word, local.paths) for word in argv]
            working_dir = container.get("workingDir") and map_path(container["workingDir"], local.paths)
        base = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
        workdir = self.state_dir / "pods" / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}"
        workdir.mkdir(parents=True, exist_ok=True)
        cwd = Path(working_dir) if working_dir else workdir
        log_path = self.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.started.append((container["image"], argv))
        return start_process(
            argv,
            log_path,
            env={
                **base,
                **self.extra_env,
                "HOSTNAME": pod["metadata"]["name"],
                **env,
                # In place of terminationMessagePath (/dev/termination-log), which a local process lacks.
                TERMINATION_LOG_ENV: str(termination_log),
            },
            cwd=cwd,
        )


def _await_exit(process: subprocess.Popen[bytes], on_exit: Callable[[], None]) -> None:
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


def sigterm_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
