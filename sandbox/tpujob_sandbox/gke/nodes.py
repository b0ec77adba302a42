"""The Kubernetes side of a node pool: the Node objects GKE's VMs register, and their removal.

A RUNNING pool has one Node per VM, labelled, tainted and sized as GKE's TPU nodes are (labels and taint:
GKE "About TPUs in GKE"; allocatable: GKE's node allocatable reservations). Deleting a pool drains its
nodes (pods deleted gracefully, their grace periods waited for) before the Node objects go, as GKE does.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob.api import constants
from tpujob_sandbox import gke_facts
from tpujob_sandbox.addresses import NODE_BASE, LoopbackAddresses
from tpujob_sandbox.gke import zones

# Its value names the test bed whose simulated kubelet serves the node: "true" for the one of a control plane
# of its own, another for a test session on the control plane of a running `tpujob sandbox up`.
SIMULATED_NODE_LABEL = "sandbox.tpujob.dev/simulated"
STANDALONE_NODE_OWNER = "true"
# Nodes of flex-start pools carry it, and their pods select it (GKE "About flex-start provisioning mode").
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
TPU_TAINT_VALUE = "present"
MAX_PODS_PER_NODE = 110  # GKE's default when the pool sets no maxPodsConstraint
# A deleted pool's drain waits at most this long for its pods (GKE's cap on MAX_POD: one hour), looking this
# often.
MAX_POD_GRACE_SECONDS = 3600
DRAIN_POLL_SECONDS = 0.1


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1_000_000:06d}Z"


def node_name(cluster: str, pool: str, index: int) -> str:
    """GKE's shape: gke-<cluster>-<pool>-<8 hex>-<4 chars>, at most 63 characters."""
    digest = hashlib.sha256(f"{cluster}/{pool}".encode()).hexdigest()
    prefix = f"gke-{cluster}-{pool}"[:50].rstrip("-")
    return f"{prefix}-{digest[:8]}-{digest[8:11]}{index:x}"[:63]


def _taint_effect(effect: container_v1.NodeTaint.Effect) -> str:
    return {
        container_v1.NodeTaint.Effect.NO_SCHEDULE: "NoSchedule",
        container_v1.NodeTaint.Effect.PREFER_NO_SCHEDULE: "PreferNoSchedule",
        container_v1.NodeTaint.Effect.NO_EXECUTE: "NoExecute",
    }.get(effect, "NoSchedule")


def node_manifest(
    name: str,
    pool: container_v1.NodePool,
    shape: gke_facts.PoolShape,
    zone: str,
    project: str,
    owner: str = STANDALONE_NODE_OWNER,
) -> dict[str, Any]:
    """The Node object GKE's kubelet registers for one VM of `pool` (spec only; status is set after)."""
    machine = shape.machine
    config = pool.config
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": machine.name,
        "topology.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": zones.region_of(zone),
        "cloud.google.com/machine-family": machine.name.split("-")[0],
        constants.NODE_LABEL_NODEPOOL: pool.name,
        SIMULATED_NODE_LABEL: owner,
        **dict(config.labels),
    }
    taints = [{"key": t.key, "value": t.value, "effect": _taint_effect(t.effect)} for t in config.taints]
    if machine.is_tpu:
        labels[constants.NODE_LABEL_ACCELERATOR] = machine.accelerator
        # For tpu7x pools placed by a workload policy this is the policy's accelerator topology.
        labels[constants.NODE_LABEL_TOPOLOGY] = shape.topology
        taints.append({"key": constants.TPU_TAINT_KEY, "value": TPU_TAINT_VALUE, "effect": "NoSchedule"})
    if config.spot:
        labels[constants.NODE_LABEL_SPOT] = "true"
        labels["cloud.google.com/gke-provisioning"] = "spot"
    if config.preemptible:
        labels["cloud.google.com/gke-preemptible"] = "true"
    if config.flex_start:
        labels[FLEX_START_LABEL] = "true"
    if pool.queued_provisioning.enabled:  # GKE docs (provisioningrequest): queued provisioning's nodes
        labels["cloud.google.com/gke-queued"] = "true"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": f"gce://{project}/{zone}/{name}", "taints": taints},
    }


def node_status(
    shape: gke_facts.PoolShape, name: str, internal_ip: str, max_pods: int, version: str
) -> dict[str, Any]:
    machine = shape.machine
    capacity = {
        "cpu": str(machine.cpus),
        "memory": f"{machine.memory_gib}Gi",
        "pods": str(max_pods),
        "ephemeral-storage": "100Gi",
    }
    allocatable = {
        "cpu": f"{gke_facts.allocatable_cpu_millis(machine.cpus)}m",
        "memory": f"{gke_facts.allocatable_memory_mib(machine.memory_gib)}Mi",
        "pods": str(max_pods),
        "ephemeral-storage": "90Gi",
    }
    if machine.is_tpu:
        capacity[constants.TPU_RESOURCE] = allocatable[constants.TPU_RESOURCE] = str(machine.chips)
    now = now_rfc3339()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": [
            condition(
                "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"
            ),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition(
                "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
            ),
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
        "nodeInfo": {
            "kubeletVersion": f"v{version}",
            "kubeProxyVersion": f"v{version}",
            "containerRuntimeVersion": "containerd://sandbox",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "osImage": "Container-Optimized OS from Google",
            "kernelVersion": "sandbox",
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
        },
    }


class NodeRegistry:
    """Registers and removes the Node objects of simulated VMs in the real API server."""

    def __init__(
        self, core: k8s.CoreV1Api, project: str, version: str, owner: str = STANDALONE_NODE_OWNER
    ) -> None:
        self.core = core
        self.project = project
        self.version = version
        self.owner = owner
        self._addresses = LoopbackAddresses(NODE_BASE)

    def _new_ip(self) -> str:
        return self._addresses.next()

    def register(self, name: str, pool: container_v1.NodePool, shape: gke_facts.PoolShape, zone: str) -> None:
        """Create the Node, post a Ready status, then lift the not-ready taint (as the kubelet and the
        node lifecycle controller would)."""
        manifest = node_manifest(name, pool, shape, zone, self.project, self.owner)
        max_pods = int(pool.max_pods_constraint.max_pods_per_node or MAX_PODS_PER_NODE)
        self.core.create_node(manifest)
        self.core.patch_node_status(
            name, {"status": node_status(shape, name, self._new_ip(), max_pods, self.version)}
        )
        self.core.patch_node(name, {"spec": {"taints": manifest["spec"]["taints"]}})

    def present(self, pool: str) -> set[str]:
        nodes = self.core.list_node(label_selector=f"{constants.NODE_LABEL_NODEPOOL}={pool}").items
        return {node.metadata.name for node in nodes}

    def drain_and_remove(self, nodes: list[str]) -> None:
        """GKE deletes a pool's nodes as it drains them: every pod deleted gracefully, and the VMs and Node
        objects removed once the pods are gone, or after MAX_POD, "the maximum terminationGracePeriodSeconds
        set on the Pods scheduled to the node, with a cap of one hour" (GKE "About node pools", Deleting node
        pools: PodDisruptionBudgets are not honoured). Real seconds, as the simulated kubelet's grace periods
        are (a worker saving its checkpoint on SIGTERM is a real process)."""
        pods = [p for node in nodes for p in self._pods_on(node)]
        for pod in pods:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
            except ApiException as error:
                if error.status != 404:
                    raise
        graces = [p.spec.termination_grace_period_seconds for p in pods]
        max_pod = min(max((30 if g is None else g for g in graces), default=0), MAX_POD_GRACE_SECONDS)
        deadline = time.monotonic() + max_pod
        while time.monotonic() < deadline and any(self._pods_on(node) for node in nodes):
            time.sleep(DRAIN_POLL_SECONDS)
        for node in nodes:
            self.remove(node)

    def _pods_on(self, node: str) -> list[Any]:
        return list(self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items)

    def remove(self, node: str) -> None:
        try:
            self.core.delete_node(node)
        except ApiException as error:
            if error.status != 404:
                raise
