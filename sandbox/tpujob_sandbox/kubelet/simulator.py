"""`KubeletSimulator`: for each pod bound to a simulated node, one idempotent sync (on `PodWatch`'s work
thread) toward what a kubelet would report; trainer-image and local-image containers run in
`LocalContainers`, node preemption is `NodeShutdown`'s."""

from __future__ import annotations

import concurrent.futures
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob_sandbox.addresses import POD_BASE, LoopbackAddresses
from tpujob_sandbox.gke.device_plugin import ChipActivity
from tpujob_sandbox.gke.nodes import SIMULATED_NODE_LABEL, STANDALONE_NODE_OWNER
from tpujob_sandbox.kubelet.containers import LocalContainers, Run, discard, kill_group, terminate
from tpujob_sandbox.kubelet.images import PullBackOff, Registry
from tpujob_sandbox.kubelet.podstatus import (
    DEFAULT_LOCAL_IMAGES,
    DEFAULT_TRAINER_ENTRYPOINT,
    DEFAULT_TRAINER_IMAGES,
    EXIT_CODE_ANNOTATION,
    EXIT_CODE_START_ERROR,
    EXIT_MESSAGE_ANNOTATION,
    LocalImage,
    rejected_status,
    restarted_status,
    restarts_container,
    running_status,
    shell_exit_code,
    terminated_status,
)
from tpujob_sandbox.kubelet.podwatch import PodWatch
from tpujob_sandbox.kubelet.shutdown import NodeShutdown
from tpujob_sandbox.kubelet.startup import Blocked, StartChecks
from tpujob_sandbox.kubelet.tpuruntime import RuntimeMeter
from tpujob_sandbox.processes import Process, stop_process
from tpujob_sandbox.reads import get_json
from tpujob_sandbox.waiting import wait_for


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
        local_images: tuple[LocalImage, ...] = DEFAULT_LOCAL_IMAGES,
        shutdown_grace_seconds: float = 30.0,
        critical_pods_grace_seconds: float = 15.0,
        retry_scale: float = 1.0,
        node_owner: str = STANDALONE_NODE_OWNER,
    ) -> None:
        self.api_client = api_client
        self.node_owner = node_owner  # it serves the nodes whose SIMULATED_NODE_LABEL says this
        self.core = k8s.CoreV1Api(api_client)
        self.containers = LocalContainers(
            state_dir,
            trainer_images=trainer_images,
            trainer_entrypoint=trainer_entrypoint,
            python=python,
            extra_env=extra_env,
            local_images=local_images,
        )
        self._runs: dict[tuple[str, str], Run] = {}
        # The images pods may pull (test controls: registry.missing, registry.private), and what the kubelet
        # checks before a container starts; `retry_scale` shortens its back-off and retries for tests.
        self.registry = Registry()
        self.starts = StartChecks(self.core, state_dir, self.registry, PullBackOff(retry_scale))
        self._blocked: dict[tuple[str, str], float] = {}  # pods that cannot start: when to look again
        self.node_shutdown = NodeShutdown(
            api_client,
            self._runs,
            self._patch_status,
            shutdown_grace_seconds=shutdown_grace_seconds,
            critical_pods_grace_seconds=critical_pods_grace_seconds,
        )
        self.pods = PodWatch(self.core, self._sync)
        self._simulated_nodes: set[str] = set()
        # Nodes whose TPU device plugin fails every Allocate (fail_tpu_allocation): node -> (the Node's UID,
        # the error). The fault is the VM's: a node registered again under the name (a new VM) is healthy.
        self._allocation_errors: dict[str, tuple[str, str]] = {}
        self._addresses = LoopbackAddresses(POD_BASE)
        self._runtime = RuntimeMeter()

    # ---- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> KubeletSimulator:
        self.pods.start()
        return self

    def stop(self) -> None:
        """Stop watching; every local process gets SIGTERM (SIGKILL after 10 s)."""
        self.pods.stop()
        for run in list(self._runs.values()):
            discard(run)
        self.containers.forkserver.stop()

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

    def oom_kill(self, namespace: str, name: str, timeout: float = 15) -> Any:
        """The kernel's OOM killer ends the pod's container process (a local process): SIGKILL, no grace
        period, no chance to write a last word. Reported as a kubelet reports it: exit code 137 (128 +
        SIGKILL), reason OOMKilled, and the termination message read from the file as the process left it
        (kuberuntime reads terminationMessagePath for every exited container, whatever ended it:
        kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go, getTerminationMessage;
        https://kubernetes.io/docs/tasks/configure-pod-container/assign-memory-resource/ shows OOMKilled).
        Returns the pod once its status says so."""
        run = self._runs.get((namespace, name))
        if run is None or run.process is None or run.process.poll() is not None:
            raise ValueError(f"pod {namespace}/{name} has no running process to kill")
        run.oom_killed = True
        kill_group(run.process)
        return wait_for(
            lambda: self._exited(namespace, name),
            timeout=timeout,
            what=f"pod {namespace}/{name} to be OOMKilled",
        )

    def fail_tpu_allocation(
        self, node: str, error: str = "rpc error: code = Unknown desc = failed to open TPU device /dev/accel0"
    ) -> None:
        """A bad host: the node's TPU device plugin fails the device manager's Allocate call, so the kubelet
        rejects every pod placed there from now on (UnexpectedAdmissionError, podstatus.rejected_status),
        until the node is repaired or its VM replaced (the Node deleted and registered again)."""
        self._allocation_errors[node] = (self.core.read_node(node).metadata.uid, error)

    def repair(self, node: str | None = None) -> None:
        """The node's device plugin allocates again (every node's, without one)."""
        if node is None:
            self._allocation_errors.clear()
        else:
            self._allocation_errors.pop(node, None)

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
                self.node_shutdown.shut_down(nodes)
                future.set_result(None)
            except BaseException as error:
                future.set_exception(error)

        self.pods.put(work)
        future.result(timeout=timeout or self.node_shutdown.shutdown_grace_seconds + 30)

    def pod_shutdown_grace_seconds(self, pod: dict[str, Any]) -> float:
        """What a pod gets on node shutdown: the non-critical share of the shutdown grace period, or less if
        the pod asks for less (kubelet's graceful node shutdown takes the smaller)."""
        return self.node_shutdown.pod_grace_seconds(pod)

    def process(self, namespace: str, name: str) -> Process | None:
        run = self._runs.get((namespace, name))
        return run.process if run else None

    def log_path(self, namespace: str, name: str) -> Path:
        return self.containers.log_path(namespace, name)

    def tpu_runtime(self, namespace: str, name: str) -> ChipActivity | None:
        """What the pod's TPU runtime would answer GKE's device plugin on its port 8431 (tpuruntime.py): read
        from its local process; None when it runs none (nothing listens there). The simulated GKE's device
        plugin asks (bed.py wires it)."""
        run = self._runs.get((namespace, name))
        process = run.process if run else None
        if process is None or process.poll() is not None:
            return None
        return self._runtime.read((namespace, name), process.pid)

    # ---- sync ------------------------------------------------------------------------------------------

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return get_json(self.api_client, f"/api/v1/namespaces/{namespace}/pods/{name}")  # type: ignore[no-any-return]
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
        if labels.get(SIMULATED_NODE_LABEL) == self.node_owner:
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
            if time.monotonic() >= self._blocked.get(key, 0.0):
                self._start(pod)
        elif not run.finished:
            self.starts.refresh_downward_api(pod)  # a changed annotation reaches the container's files
            self._check_exit(pod, run)

    def _forget(self, key: tuple[str, str]) -> None:
        self._blocked.pop(key, None)
        self._runtime.forget(key)
        run = self._runs.pop(key, None)
        if run:
            discard(run, grace_seconds=1)

    def _start(self, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        allocation_error = self._allocation_error(pod["spec"]["nodeName"])
        if allocation_error is not None and self._requests_extended_resources(pod):
            self._patch_status(pod, rejected_status(pod, allocation_error))  # admission: no container runs
            return
        local = self.containers.trainer_container(pod)
        host_ip = self._host_ip(pod["spec"]["nodeName"])
        checked = self.starts.check(pod, host_ip)
        if isinstance(checked, Blocked):
            # Pending with the container's waiting reason; the kubelet looks again after its retry wait.
            self._blocked[key] = time.monotonic() + checked.retry_seconds
            self._patch_status(pod, checked.status)
            timer = threading.Timer(checked.retry_seconds, self.pods.enqueue, args=key)
            timer.daemon = True
            timer.start()
            return
        self._blocked.pop(key, None)
        # A pod's own address (a local process serves its metrics there); a hostNetwork pod has its node's.
        ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []]
        pod_ip = (
            host_ip
            if pod["spec"].get("hostNetwork") and not local
            else self._addresses.next(ports if local else ())
        )
        run = Run(uid=pod["metadata"]["uid"], pod_ip=pod_ip)
        self._runs[key] = run
        status = running_status(pod, run.pod_ip, host_ip)
        if local:
            # The process sees the pod as running: its status fields (podIP ...) are known before it starts.
            pod = {**pod, "status": status}
            try:
                self.containers.start(
                    run,
                    pod,
                    local,
                    self._on_exit_of(key),
                    env=checked.env.get(local["name"], {}),
                    mounts=checked.mounts.get(local["name"], ()),
                    gcs_root=self.starts.gcs_root,
                )
            except (ValueError, OSError) as error:
                self._report_exit(pod, run, EXIT_CODE_START_ERROR, reason="StartError", message=str(error))
                return
        self._patch_status(pod, status)

    def _allocation_error(self, node: str) -> str | None:
        """The error the node's device plugin fails Allocate with, while it is the VM fail_tpu_allocation
        named."""
        fault = self._allocation_errors.get(node)
        if fault is None:
            return None
        try:
            uid = self.core.read_node(node).metadata.uid
        except ApiException:
            return None
        return fault[1] if uid == fault[0] else None

    @staticmethod
    def _requests_extended_resources(pod: dict[str, Any]) -> bool:
        """The device manager allocates only for pods that request a device plugin's resource."""
        return any(
            "/" in name
            for c in pod["spec"].get("containers") or []
            for name in ((c.get("resources") or {}).get("limits") or {})
        )

    def _on_exit_of(self, key: tuple[str, str]) -> Callable[[], None]:
        """When a local process exits, its pod is synced again (unless the kubelet is stopping)."""

        def on_exit() -> None:
            if not self.pods.stopping:
                self.pods.enqueue(*key)

        return on_exit

    def _check_exit(self, pod: dict[str, Any], run: Run) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if EXIT_CODE_ANNOTATION in annotations:
            # The annotation stands for the container's own exit (a crash): its process is gone at once, as a
            # crashed one is, with no SIGTERM and grace. With them a trainer that catches SIGTERM (JAX's
            # preemption service does) trained on, its peers with it, while this work thread waited 10 s
            # (2026-11-30: a "crashed" JAX worker of test_recovery.py trained to the end).
            if run.process:
                kill_group(run.process)
                run.process.wait()
            message = annotations.get(EXIT_MESSAGE_ANNOTATION, "")
            self._report_exit(
                pod, run, int(annotations[EXIT_CODE_ANNOTATION]), message=message, by_annotation=True
            )
        elif run.process and (returncode := run.process.poll()) is not None:
            # The annotation above stands for the exit and its message; a process that ended tells its own.
            container = self.containers.trainer_container(pod)
            exit_code = shell_exit_code(returncode)
            message = self.containers.termination_message(run, container, exit_code) if container else ""
            reason = "OOMKilled" if run.oom_killed else ""
            self._report_exit(pod, run, returncode, reason=reason, message=message)

    def _report_exit(
        self,
        pod: dict[str, Any],
        run: Run,
        exit_code: int,
        *,
        reason: str = "",
        message: str = "",
        by_annotation: bool = False,
    ) -> None:
        exit_code = shell_exit_code(exit_code)
        if restarts_container(pod["spec"].get("restartPolicy", "Always"), exit_code):
            self._restart(pod, run, exit_code, by_annotation)
            return
        run.finished = True
        self._patch_status(pod, terminated_status(pod, exit_code, reason=reason, message=message))

    def _restart(self, pod: dict[str, Any], run: Run, exit_code: int, by_annotation: bool) -> None:
        """restartPolicy Always/OnFailure: the container starts again in the same pod, restartCount + 1."""
        run.restarts += 1
        run.oom_killed = False
        if by_annotation:
            annotations = {EXIT_CODE_ANNOTATION: None, EXIT_MESSAGE_ANNOTATION: None}
            self.core.patch_namespaced_pod(
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                {"metadata": {"annotations": annotations}},
            )
        host_ip = self._host_ip(pod["spec"]["nodeName"])
        status = restarted_status(pod, run.pod_ip, host_ip, run.restarts, exit_code)
        if run.process:
            local = self.containers.trainer_container(pod)
            assert local is not None  # a pod with a process has a trainer-image or local-image container
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.containers.start(run, {**pod, "status": status}, local, self._on_exit_of(key))
        self._patch_status(pod, status)

    def _finish_deletion(self, pod: dict[str, Any], run: Run | None) -> None:
        """Graceful deletion: SIGTERM, wait up to the grace period (SIGKILL after), report how the container
        ended, then remove the pod. The kubelet's status manager writes the terminated state (exit code,
        termination message) before it deletes the pod object: it deletes only a pod whose containers it
        has reported terminated (pkg/kubelet/status/status_manager.go, syncPod: the status patch, then
        canBeDeleted -> Delete with grace 0), so a watcher sees the last words of a deleted worker."""
        if run and run.process and run.process.poll() is None:
            terminate(run, grace_seconds=pod["metadata"].get("deletionGracePeriodSeconds") or 30)
            return  # the process's exit brings us back here
        if run and run.process and not run.finished and (container := self.containers.trainer_container(pod)):
            exit_code = shell_exit_code(run.process.wait())  # it has ended: see above
            message = self.containers.termination_message(run, container, exit_code)
            run.finished = True
            self._patch_status(pod, terminated_status(pod, exit_code, message=message))
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

    # ---- helpers ---------------------------------------------------------------------------------------

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(
                pod["metadata"]["name"], pod["metadata"]["namespace"], {"status": status}
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def _host_ip(self, node: str) -> str:
        try:
            addresses = self.core.read_node(node).status.addresses or []
        except ApiException:
            return ""
        return next((a.address for a in addresses if a.type == "InternalIP"), "")
