"""Graceful node shutdown, as GKE does it on spot reclaim and host maintenance.

The node goes NotReady and gets the not-ready taint; every container gets SIGTERM and the shutdown grace
period; each pod ends `Failed` with reason `Terminated` and a `DisruptionTarget` condition; then the Node
object goes away with the VM.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob_sandbox.kubelet.containers import Run, sigterm_group
from tpujob_sandbox.kubelet.podstatus import (
    EXIT_CODE_SIGTERM,
    NOT_READY_TAINT,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_REASON,
    shell_exit_code,
    status_time,
    terminated_status,
    termination_message,
)
from tpujob_sandbox.processes import stop_process

CRITICAL_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")


class NodeShutdown:
    """Shuts simulated nodes down; `runs` are the kubelet's pods by (namespace, name), `patch_status` posts
    a pod's status."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        runs: Mapping[tuple[str, str], Run],
        patch_status: Callable[[dict[str, Any], dict[str, Any]], None],
        *,
        shutdown_grace_seconds: float,
        critical_pods_grace_seconds: float,
    ) -> None:
        self.api_client = api_client
        self.core = k8s.CoreV1Api(api_client)
        self._runs = runs
        self._patch_status = patch_status
        # GKE's graceful node shutdown on spot reclaim and maintenance: 30 s before the VM goes, of which the
        # last 15 s are kept for system-critical pods, so other pods get 15 s whatever their
        # terminationGracePeriodSeconds asks ("Spot VMs" in GKE docs: shutdownGracePeriod 30s,
        # shutdownGracePeriodCriticalPods 15s). Real seconds: these are the trainer's own processes.
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.critical_pods_grace_seconds = critical_pods_grace_seconds

    def shut_down(self, nodes: list[str]) -> None:
        """Shut `nodes` down together (one shared grace period); returns when they are gone."""
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
            sigterm_group(process)
        started = time.monotonic()
        for pod, process in live:
            deadline = started + self.pod_grace_seconds(pod)
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                stop_process(process, grace_seconds=0)
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": SHUTDOWN_MESSAGE,
            "lastTransitionTime": status_time(),
        }
        for pod, run in zip(active, runs, strict=True):
            exit_code = shell_exit_code(run.process.wait()) if run and run.process else EXIT_CODE_SIGTERM
            if run:
                run.finished = True
            status = terminated_status(
                pod,
                exit_code,
                message=_written_message(pod, run, exit_code),
                pod_reason=SHUTDOWN_REASON,
                pod_message=SHUTDOWN_MESSAGE,
                extra_conditions=(disruption,),
            )
            self._patch_status(pod, status)
        for node in nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(node)

    def pod_grace_seconds(self, pod: dict[str, Any]) -> float:
        """What a pod gets on node shutdown: the non-critical share of the shutdown grace period, or less if
        the pod asks for less (kubelet's graceful node shutdown takes the smaller)."""
        share = self.shutdown_grace_seconds - self.critical_pods_grace_seconds
        if pod["spec"].get("priorityClassName") in CRITICAL_PRIORITY_CLASSES:
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
        now = status_time()
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


def _written_message(pod: dict[str, Any], run: Run | None, exit_code: int) -> str:
    """The container's own termination message: a kubelet reads the termination log whenever a container
    ends, a node shutdown's SIGTERM included (kuberuntime's container status, not the pod's reason)."""
    if run is None or run.termination_log is None or not run.termination_log.exists():
        return ""
    container = pod["spec"]["containers"][0]
    return termination_message(container, exit_code, run.termination_log.read_bytes(), b"")
