"""A simulated kubelet for the simulated GKE nodes.

It does what a kubelet does to the API: posts a bound pod's status (Running, then Succeeded or Failed),
finishes graceful deletions, and on node shutdown fails the node's pods the way a real node loss leaves them.

A pod's "container" ends:
- on command: `KubeletSimulator.succeed/fail`, or the annotation `sandbox.tpujob.dev/exit-code: "<n>"`;
- or, when the image is the trainer image, as a real local process running the container's command with the
  pod's env: the phase follows its exit code, and deleting the pod sends it SIGTERM (SIGKILL after the grace
  period), as the container runtime would.

Preemption (`preempt_node`) follows GKE's graceful node shutdown on spot reclaim / host maintenance: every
container gets SIGTERM and the shutdown grace period, each pod ends `Failed` with reason `Terminated` and
message "Pod was terminated in response to imminent node shutdown." plus a `DisruptionTarget` condition, and
the Node object goes away with the VM. The Failed pods stay until someone deletes them (or PodGC does).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tpujob.render.plan import ENV_METRICS_PORT
from tpujob.sandbox.controlplane import free_port
from tpujob.sandbox.gke.nodes import SIMULATED_NODE_LABEL
from tpujob.sandbox.processes import start_process, stop_process
from tpujob.sandbox.waiting import wait_for

log = logging.getLogger(__name__)

EXIT_CODE_ANNOTATION = "sandbox.tpujob.dev/exit-code"
EXIT_MESSAGE_ANNOTATION = "sandbox.tpujob.dev/exit-message"
DEFAULT_TRAINER_IMAGES = ("tpujob-trainer",)
# The trainer image's ENTRYPOINT: what runs when a pod gives only args.
DEFAULT_TRAINER_ENTRYPOINT = ("python", "-m", "tpujob_trainer")
SHUTDOWN_REASON = "Terminated"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
EXIT_CODE_SIGTERM = 143
EXIT_CODE_START_ERROR = 128


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def is_trainer_image(image: str, trainer_images: tuple[str, ...]) -> bool:
    """`registry/path/tpujob-trainer:tag` matches "tpujob-trainer": the last path segment, any tag."""
    repository = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return any(repository.startswith(prefix) for prefix in trainer_images)


def _field_value(pod: dict[str, Any], path: str) -> str:
    metadata, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if path in simple:
        return simple[path] or ""
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['"):
            return (metadata.get(source) or {}).get(path[len(prefix) + 2 : -2], "")
    raise ValueError(f"unsupported fieldRef {path}")


def container_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's env as the kubelet would compute it: literal values and downward-API fields.

    Later entries may refer to earlier ones with $(NAME), as in Kubernetes.
    """
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if entry.get("valueFrom"):
            field_ref = entry["valueFrom"].get("fieldRef")
            if not field_ref:
                raise ValueError(f"env {entry['name']}: only fieldRef is simulated")
            env[entry["name"]] = _field_value(pod, field_ref["fieldPath"])
        else:
            env[entry["name"]] = _expand(entry.get("value") or "", env)
    return env


def _expand(text: str, env: dict[str, str]) -> str:
    for name, value in env.items():
        text = text.replace(f"$({name})", value)
    return text


def container_argv(
    container: dict[str, Any], env: dict[str, str], python: str, entrypoint: tuple[str, ...]
) -> list[str]:
    """command (else the image's entrypoint) + args, $(VAR) expanded; `python`/`python3` run this
    interpreter, which has the trainer installed."""
    command = container.get("command") or list(entrypoint)
    argv = [_expand(part, env) for part in command + (container.get("args") or [])]
    if argv[0] in ("python", "python3"):
        argv[0] = python
    return argv


def running_status(pod: dict[str, Any], pod_ip: str, host_ip: str, restarts: int = 0) -> dict[str, Any]:
    now = _now()
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"sandbox://{c['image']}",
            "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod["spec"]["containers"]
    ]
    return {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": (pod.get("status") or {}).get("startTime") or now,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": statuses,
    }


def terminated_status(
    pod: dict[str, Any],
    exit_code: int,
    *,
    reason: str = "",
    message: str = "",
    pod_reason: str = "",
    pod_message: str = "",
    extra_conditions: tuple[dict[str, str], ...] = (),
) -> dict[str, Any]:
    """Terminal status: Succeeded when every container exited 0, else Failed."""
    now = _now()
    status = pod.get("status") or {}
    container_reason = reason or ("Completed" if exit_code == 0 else "Error")
    previous = {s["name"]: s for s in status.get("containerStatuses") or []}
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"sandbox://{c['image']}",
            "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
            "ready": False,
            "started": False,
            "restartCount": previous.get(c["name"], {}).get("restartCount", 0),
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": container_reason,
                    **({"message": message} if message else {}),
                    "startedAt": status.get("startTime") or now,
                    "finishedAt": now,
                    "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
                }
            },
        }
        for c in pod["spec"]["containers"]
    ]
    conditions = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        *extra_conditions,
    ]
    result: dict[str, Any] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": conditions,
        "containerStatuses": statuses,
    }
    if pod_reason:
        result["reason"], result["message"] = pod_reason, pod_message
    return result


def restarts_container(restart_policy: str, exit_code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


@dataclass
class _Run:
    """What this kubelet knows about one pod it runs."""

    uid: str
    pod_ip: str
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    finished: bool = False
    sigterm_at: float | None = None
    kill_timer: threading.Timer | None = field(default=None, repr=False)


class KubeletSimulator:
    """Start with `start()`. Pods on nodes labelled by the GKE simulator are this kubelet's."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        state_dir: Path,
        *,
        trainer_images: tuple[str, ...] = DEFAULT_TRAINER_IMAGES,
        trainer_entrypoint: tuple[str, ...] = DEFAULT_TRAINER_ENTRYPOINT,
        python: str = sys.executable,
        extra_env: dict[str, str] | None = None,
        shutdown_grace_seconds: float = 30.0,
        critical_pods_grace_seconds: float = 15.0,
    ) -> None:
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self.state_dir = state_dir
        self.trainer_images = trainer_images
        self.trainer_entrypoint = trainer_entrypoint
        self.python = python
        # Passed to local processes on top of PATH/HOME/LANG and the pod's env (e.g. PYTHONPATH).
        self.extra_env = dict(extra_env or {})
        # GKE's graceful node shutdown on spot reclaim and maintenance: 30 s before the VM goes, of which the
        # last 15 s are kept for system-critical pods, so other pods get 15 s whatever their
        # terminationGracePeriodSeconds asks ("Spot VMs" in GKE docs: shutdownGracePeriod 30s,
        # shutdownGracePeriodCriticalPods 15s). Real seconds: these are the trainer's own processes.
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.critical_pods_grace_seconds = critical_pods_grace_seconds
        self._runs: dict[tuple[str, str], _Run] = {}
        self._simulated_nodes: set[str] = set()
        self._next_ip = 2
        self._work: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch_response: Any = None

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> KubeletSimulator:
        for target, name in ((self._watch_pods, "kubelet-watch"), (self._work_loop, "kubelet-work")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stop watching; every local process gets SIGTERM (SIGKILL after 10 s)."""
        self._stopping.set()
        self._work.put(None)
        # Shutting the watch's socket ends it now rather than at its timeout, and spares the API server
        # waiting on it when it shuts down.
        if self._watch_response is not None:
            with contextlib.suppress(Exception):
                self._watch_response.shutdown()
        for thread in self._threads:
            thread.join(timeout=5)
        for run in list(self._runs.values()):
            if run.kill_timer:
                run.kill_timer.cancel()
            if run.process:
                stop_process(run.process)

    # ---- test controls ---------------------------------------------------------------------------------

    def succeed(self, namespace: str, name: str, timeout: float = 15) -> Any:
        return self.exit(namespace, name, 0, timeout=timeout)

    def fail(
        self, namespace: str, name: str, exit_code: int = 1, message: str = "", timeout: float = 15
    ) -> Any:
        return self.exit(namespace, name, exit_code, message=message, timeout=timeout)

    def exit(
        self, namespace: str, name: str, exit_code: int, *, message: str = "", timeout: float = 15
    ) -> Any:
        """End the pod's containers with `exit_code` (via the annotation, as a user could) and wait for the
        kubelet to report it; returns the pod."""
        annotations = {EXIT_CODE_ANNOTATION: str(exit_code), EXIT_MESSAGE_ANNOTATION: message or None}
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})
        return wait_for(
            lambda: self._exited(namespace, name),
            timeout=timeout,
            what=f"pod {namespace}/{name} to exit {exit_code}",
        )

    def _exited(self, namespace: str, name: str) -> Any:
        pod = self.core.read_namespaced_pod(name, namespace)
        terminated = [
            s for s in pod.status.container_statuses or [] if s.last_state and s.last_state.terminated
        ]
        if pod.status.phase in ("Succeeded", "Failed") or terminated:
            return pod
        return None

    def preempt_node(self, node: str, timeout: float | None = None) -> None:
        """Shut `node` down as GKE does on spot reclaim or maintenance; returns when the node is gone."""
        self.preempt_nodes([node], timeout)

    def preempt_nodes(self, nodes: list[str], timeout: float | None = None) -> None:
        """Shut several nodes down at once (a TPU slice goes as a whole): one shared grace period."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()

        def work() -> None:
            try:
                self._shut_down_nodes(nodes)
                future.set_result(None)
            except BaseException as error:
                future.set_exception(error)

        self._work.put(work)
        future.result(timeout=timeout or self.shutdown_grace_seconds + 30)

    def process(self, namespace: str, name: str) -> subprocess.Popen[bytes] | None:
        run = self._runs.get((namespace, name))
        return run.process if run else None

    def log_path(self, namespace: str, name: str) -> Path:
        return self.state_dir / "pods" / f"{namespace}_{name}.log"

    # ---- watch and work ---------------------------------------------------------------------------------

    def _watch_pods(self) -> None:
        """List, then watch from the list's version; any error (410 Gone, API server away) lists again."""
        while not self._stopping.is_set():
            try:
                listed = self.core.list_pod_for_all_namespaces()
                for pod in listed.items:
                    self._enqueue(pod.metadata.namespace, pod.metadata.name)
                self._watch_response = self.core.list_pod_for_all_namespaces(
                    watch=True,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=300,
                    _preload_content=False,
                )
                if self._stopping.is_set():  # stop() came while the watch opened: it could not shut it
                    self._watch_response.shutdown()
                    return
                for line in watch.watch.iter_resp_lines(self._watch_response):
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        break
                    metadata = event["object"]["metadata"]
                    self._enqueue(metadata["namespace"], metadata["name"])
            except Exception as error:
                if self._stopping.wait(0.5):
                    return
                log.debug("kubelet-sim: watch restarts after %s", error)

    def _enqueue(self, namespace: str, name: str) -> None:
        self._work.put(lambda: self._sync(namespace, name))

    def _work_loop(self) -> None:
        while True:
            work = self._work.get()
            if work is None or self._stopping.is_set():
                return
            try:
                work()
            except Exception:
                log.exception("kubelet-sim: work failed")

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.api_client.sanitize_for_serialization(self.core.read_namespaced_pod(name, namespace))  # type: ignore[no-any-return]
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _is_simulated(self, node: str) -> bool:
        if node in self._simulated_nodes:
            return True
        try:
            labels = self.core.read_node(node).metadata.labels or {}
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        if labels.get(SIMULATED_NODE_LABEL) == "true":
            self._simulated_nodes.add(node)
            return True
        return False

    def _sync(self, namespace: str, name: str) -> None:
        """One idempotent step toward what a kubelet would have reported for this pod."""
        key = (namespace, name)
        pod = self._read(namespace, name)
        run = self._runs.get(key)
        if pod is None or (run and run.uid != pod["metadata"]["uid"]):
            self._forget(key)
            if pod is None:
                return
            run = None
        node = pod["spec"].get("nodeName")
        if not node or not self._is_simulated(node):
            return
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            self._finish_deletion(pod, run)
        elif phase in ("Succeeded", "Failed"):
            if run and run.process:
                stop_process(run.process)
        elif run is None:
            self._start(pod)
        elif not run.finished:
            self._check_exit(pod, run)

    def _forget(self, key: tuple[str, str]) -> None:
        run = self._runs.pop(key, None)
        if run and run.kill_timer:
            run.kill_timer.cancel()
        if run and run.process:
            stop_process(run.process, grace_seconds=1)

    def _start(self, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        containers = pod["spec"]["containers"]
        local = [c for c in containers if is_trainer_image(c["image"], self.trainer_images)]
        host_ip = self._host_ip(pod["spec"]["nodeName"])
        # A local process really listens on loopback; a hostNetwork pod has its node's address.
        pod_ip = "127.0.0.1" if local else host_ip if pod["spec"].get("hostNetwork") else self._new_pod_ip()
        run = _Run(uid=pod["metadata"]["uid"], pod_ip=pod_ip)
        self._runs[key] = run
        status = running_status(pod, run.pod_ip, host_ip)
        if local:
            # The process sees the pod as running: its status fields (podIP ...) are known before it starts.
            pod = {**pod, "status": status}
            try:
                run.process = self._spawn(pod, local[0])
            except (ValueError, OSError) as error:
                self._report_exit(pod, run, EXIT_CODE_START_ERROR, reason="StartError", message=str(error))
                return
            threading.Thread(target=self._await_process, args=(key, run), daemon=True).start()
        self._patch_status(pod, status)

    def _spawn(self, pod: dict[str, Any], container: dict[str, Any]) -> subprocess.Popen[bytes]:
        env = container_env(pod, container)
        if ENV_METRICS_PORT in env:
            # Each pod has a network namespace of its own; these processes share the host's. Every worker
            # pod serves metrics on the same port, so each process (of any attempt, old ones still shutting
            # down) gets a free one instead.
            env[ENV_METRICS_PORT] = str(free_port())
        argv = container_argv(container, env, self.python, self.trainer_entrypoint)
        base = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
        workdir = self.state_dir / "pods" / f"{pod['metadata']['namespace']}_{pod['metadata']['name']}"
        workdir.mkdir(parents=True, exist_ok=True)
        cwd = Path(container["workingDir"]) if container.get("workingDir") else workdir
        log_path = self.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"])
        return start_process(
            argv,
            log_path,
            env={**base, **self.extra_env, "HOSTNAME": pod["metadata"]["name"], **env},
            cwd=cwd,
        )

    def _await_process(self, key: tuple[str, str], run: _Run) -> None:
        assert run.process is not None
        run.process.wait()
        if not self._stopping.is_set():
            self._enqueue(*key)

    def _check_exit(self, pod: dict[str, Any], run: _Run) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if EXIT_CODE_ANNOTATION in annotations:
            if run.process:
                stop_process(run.process)
            message = annotations.get(EXIT_MESSAGE_ANNOTATION, "")
            self._report_exit(
                pod, run, int(annotations[EXIT_CODE_ANNOTATION]), message=message, by_annotation=True
            )
        elif run.process and run.process.poll() is not None:
            self._report_exit(pod, run, run.process.returncode)

    def _report_exit(
        self,
        pod: dict[str, Any],
        run: _Run,
        exit_code: int,
        *,
        reason: str = "",
        message: str = "",
        by_annotation: bool = False,
    ) -> None:
        exit_code = _shell_exit_code(exit_code)
        if restarts_container(pod["spec"].get("restartPolicy", "Always"), exit_code):
            self._restart(pod, run, exit_code, by_annotation)
            return
        run.finished = True
        self._patch_status(pod, terminated_status(pod, exit_code, reason=reason, message=message))

    def _restart(self, pod: dict[str, Any], run: _Run, exit_code: int, by_annotation: bool) -> None:
        """restartPolicy Always/OnFailure: the container starts again in the same pod, restartCount + 1."""
        run.restarts += 1
        if by_annotation:
            annotations = {EXIT_CODE_ANNOTATION: None, EXIT_MESSAGE_ANNOTATION: None}
            self.core.patch_namespaced_pod(
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                {"metadata": {"annotations": annotations}},
            )
        status = running_status(pod, run.pod_ip, self._host_ip(pod["spec"]["nodeName"]), run.restarts)
        for container_status in status["containerStatuses"]:
            container_status["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Error" if exit_code else "Completed",
                    "finishedAt": _now(),
                }
            }
        if run.process:
            local = next(
                c for c in pod["spec"]["containers"] if is_trainer_image(c["image"], self.trainer_images)
            )
            run.process = self._spawn({**pod, "status": status}, local)
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            threading.Thread(target=self._await_process, args=(key, run), daemon=True).start()
        self._patch_status(pod, status)

    def _finish_deletion(self, pod: dict[str, Any], run: _Run | None) -> None:
        """Graceful deletion: SIGTERM, wait up to the grace period (SIGKILL after), then remove the pod."""
        if run and run.process and run.process.poll() is None:
            if run.sigterm_at is None:
                run.sigterm_at = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.process.pid, signal.SIGTERM)
                grace = pod["metadata"].get("deletionGracePeriodSeconds") or 30
                run.kill_timer = threading.Timer(grace, _kill_group, (run.process,))
                run.kill_timer.daemon = True
                run.kill_timer.start()
            return  # the process's exit brings us back here
        try:
            self.core.delete_namespaced_pod(
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                body=k8s.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=pod["metadata"]["uid"])
                ),
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise
        self._forget((pod["metadata"]["namespace"], pod["metadata"]["name"]))

    def _shut_down_nodes(self, nodes: list[str]) -> None:
        for node in nodes:
            self._mark_shutting_down(node)
        pods = [
            self.api_client.sanitize_for_serialization(p)
            for node in nodes
            for p in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        ]
        active = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        runs = [self._runs.get((p["metadata"]["namespace"], p["metadata"]["name"])) for p in active]
        live = [
            (pod, run.process)
            for pod, run in zip(active, runs, strict=True)
            if run and run.process and run.process.poll() is None
        ]
        for _, process in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        started = time.monotonic()
        for pod, process in live:
            deadline = started + self.pod_shutdown_grace_seconds(pod)
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                stop_process(process, grace_seconds=0)
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": SHUTDOWN_MESSAGE,
            "lastTransitionTime": _now(),
        }
        for pod, run in zip(active, runs, strict=True):
            exit_code = _shell_exit_code(run.process.returncode) if run and run.process else EXIT_CODE_SIGTERM
            if run:
                run.finished = True
            status = terminated_status(
                pod,
                exit_code,
                pod_reason=SHUTDOWN_REASON,
                pod_message=SHUTDOWN_MESSAGE,
                extra_conditions=(disruption,),
            )
            self._patch_status(pod, status)
        for node in nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(node)

    def pod_shutdown_grace_seconds(self, pod: dict[str, Any]) -> float:
        """What a pod gets on node shutdown: the non-critical share of the shutdown grace period, or less if
        the pod asks for less (kubelet's graceful node shutdown takes the smaller)."""
        share = self.shutdown_grace_seconds - self.critical_pods_grace_seconds
        if pod["spec"].get("priorityClassName") in ("system-node-critical", "system-cluster-critical"):
            share = self.critical_pods_grace_seconds
        asked = pod["spec"].get("terminationGracePeriodSeconds")
        return share if asked is None else min(float(asked), share)

    def _mark_shutting_down(self, node: str) -> None:
        """First thing a kubelet's graceful shutdown does: the node goes NotReady ("node is shutting down"),
        and (as the node lifecycle controller then does) gets the not-ready NoSchedule taint, so the
        scheduler places no replacement pod on a node about to vanish."""
        try:
            found = self.core.read_node(node)
        except ApiException:
            return
        now = _now()
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "node is shutting down",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.core.patch_node_status(node, {"status": {"conditions": [ready]}})
        taints = [self.api_client.sanitize_for_serialization(t) for t in found.spec.taints or []]
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
        self.core.patch_node(node, {"spec": {"taints": taints}})

    # ---- helpers ---------------------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(
                pod["metadata"]["name"], pod["metadata"]["namespace"], {"status": status}
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def _new_pod_ip(self) -> str:
        self._next_ip += 1
        return f"10.4.{self._next_ip // 250}.{self._next_ip % 250 + 2}"

    def _host_ip(self, node: str) -> str:
        try:
            addresses = self.core.read_node(node).status.addresses or []
        except ApiException:
            return ""
        return next((a.address for a in addresses if a.type == "InternalIP"), "")


def _shell_exit_code(returncode: int) -> int:
    """Popen reports death by signal N as -N; a container runtime reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
