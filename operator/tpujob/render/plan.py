"""Render a validated TPUJob into what the operator creates: its node pools (render/pools.py), pods, a
Service, the NetworkPolicy and, for large slices, the host lists.

Pure and deterministic: plain dicts, in a fixed order, from the job and the cluster settings alone.
Node pools are GKE REST JSON (camelCase, as `container_v1.NodePool.from_json` reads them); the rest
are Kubernetes manifests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpujob import tpu
from tpujob.api import constants as c
from tpujob.api import trainer_contract as contract
from tpujob.api.job import TPUJob
from tpujob.api.run_policy import RestartStrategy
from tpujob.api.spec import CapacityMode, NodePoolPolicy
from tpujob.api.validation import is_default_trainer_image
from tpujob.render import naming
from tpujob.render.cluster import Cluster, slice_shape
from tpujob.render.inplace import restart_in_place
from tpujob.render.meta import job_labels, owned_metadata
from tpujob.render.network import network_policy
from tpujob.render.placement import Placement
from tpujob.render.pod_parts import env_from_and_mounts, merge_pod, security_context, wire
from tpujob.render.pools import node_pools, own_taint


@dataclass(frozen=True)
class Plan:
    node_pools: list[dict[str, Any]]
    resources: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"nodePools": self.node_pools, "resources": self.resources}


# --- pods and the Service ---------------------------------------------------------------------


def with_port(address: str, port: int) -> str:
    """`host:port`; an address that names its own port (`tpujob run --local`: localhost:PORT) keeps it."""
    return address if ":" in address else f"{address}:{port}"


def export_dir(job: TPUJob) -> str | None:
    """spec.trainer.exportDir, else <checkpointDir>/export when checkpointDir is set, else none."""
    trainer = job.spec.trainer
    if trainer.export_dir:
        return trainer.export_dir
    if trainer.checkpoint_dir:
        return trainer.checkpoint_dir.rstrip("/") + "/export"
    return None


# A slice's host list (TPU_WORKER_HOSTNAMES; TPU_PROCESS_ADDRESSES on tpu7x) grows with the slice, and
# every worker of the slice needs it: inline in each pod, a job's pods would hold hosts² names (tpu7x
# 16x24x24: 2,304 pods of ~90 KB each, 209 MB rendered). Above this many hosts the list is kept once per
# slice, in a ConfigMap the pods' env reads by configMapKeyRef: the kubelet sets the very same variable in the
# container, so libtpu and JAX read what they always read ("Define container environment variables using
# ConfigMap data", kubernetes.io/docs/tasks/configure-pod-container/configure-pod-configmap/). At or below
# it the list is under 1 KiB and a ConfigMap would only cost one more write per slice.
INLINE_HOSTS_MAX = 16


def uses_hosts_config_map(job: TPUJob) -> bool:
    return slice_shape(job).hosts > INLINE_HOSTS_MAX


def slice_hostnames(job: TPUJob, slice_index: int) -> list[str]:
    """The slice's hosts' DNS names, by worker id (stable across restarts)."""
    return [naming.worker_address(job, slice_index, w) for w in range(slice_shape(job).hosts)]


def _process_addresses(job: TPUJob, hosts: int) -> bool:
    """TPU7x multi-host runtimes find each other by TPU_PROCESS_ADDRESSES (host:port by worker id), as
    KubeRay's TPU webhook injects them."""
    return job.spec.tpu.type == "tpu7x" and hosts > 1


def slice_host_env(job: TPUJob, worker_hostnames: list[str]) -> dict[str, str]:
    """The slice-wide host list variables by name: the same for every worker of the slice."""
    env = {contract.ENV_WORKER_HOSTNAMES: ",".join(worker_hostnames)}
    if _process_addresses(job, len(worker_hostnames)):
        addresses = ",".join(with_port(host, c.PORT_TPU_ICI) for host in worker_hostnames)
        env[contract.ENV_PROCESS_ADDRESSES] = addresses
    return env


def hosts_config_map(job: TPUJob, slice_index: int) -> dict[str, Any]:
    """A large slice's host list, once (see INLINE_HOSTS_MAX); owned by the job, so collected with it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(job, naming.hosts_config_map_name(job, slice_index), job_labels(job)),
        "data": slice_host_env(job, slice_hostnames(job, slice_index)),
    }


def worker_env(
    job: TPUJob,
    slice_index: int,
    worker_index: int,
    *,
    worker_hostnames: list[str] | None = None,
    coordinator_address: str,
    attempt: int = 0,
) -> list[dict[str, Any]]:
    """The env every worker gets: TPU identity, Multislice wiring, tpujob settings, then the user's (a value,
    or valueFrom a Secret, ConfigMap or field).

    worker_hostnames are this slice's hosts indexed by worker id: `tpujob run --local` passes local
    addresses; None: the pods' DNS names, inline or, for a large slice, read from the slice's ConfigMap.
    """
    slices = job.spec.tpu.slices
    env: list[dict[str, Any]] = [{"name": contract.ENV_WORKER_ID, "value": str(worker_index)}]
    if worker_hostnames is None and uses_hosts_config_map(job):
        hosts = slice_shape(job).hosts
        config_map = naming.hosts_config_map_name(job, slice_index)
        names = [contract.ENV_WORKER_HOSTNAMES]
        if _process_addresses(job, hosts):
            names.append(contract.ENV_PROCESS_ADDRESSES)
        env += [
            {"name": name, "valueFrom": {"configMapKeyRef": {"name": config_map, "key": name}}}
            for name in names
        ]
    else:
        hostnames = worker_hostnames if worker_hostnames is not None else slice_hostnames(job, slice_index)
        hosts = len(hostnames)
        env += [{"name": name, "value": value} for name, value in slice_host_env(job, hostnames).items()]
    if _process_addresses(job, hosts):
        env.append({"name": contract.ENV_PROCESS_PORT, "value": str(c.PORT_TPU_ICI)})
        if slices > 1:
            # Their multislice coordinator address carries a port.
            coordinator_address = with_port(coordinator_address, c.PORT_MEGASCALE)
    if slices > 1:
        env += [
            {"name": contract.ENV_MEGASCALE_COORDINATOR_ADDRESS, "value": coordinator_address},
            {"name": contract.ENV_MEGASCALE_NUM_SLICES, "value": str(slices)},
            {"name": contract.ENV_MEGASCALE_SLICE_ID, "value": str(slice_index)},
            {"name": contract.ENV_MEGASCALE_PORT, "value": str(c.PORT_MEGASCALE)},
        ]
    env += [
        {"name": contract.ENV_JOB_NAME, "value": job.metadata.name},
        {"name": contract.ENV_NAMESPACE, "value": job.metadata.namespace},
        {"name": contract.ENV_NUM_SLICES, "value": str(slices)},
        {"name": contract.ENV_ATTEMPT, "value": str(attempt)},
        {"name": contract.ENV_METRICS_PORT, "value": str(c.PORT_TRAINER_METRICS)},
    ]
    if job.spec.trainer.checkpoint_dir:
        env.append({"name": contract.ENV_CHECKPOINT_DIR, "value": job.spec.trainer.checkpoint_dir})
    export = export_dir(job)
    if export:
        env.append({"name": contract.ENV_EXPORT_DIR, "value": export})
    env += [wire(var) for var in job.spec.trainer.env]
    return env


def _container_ports(multislice: bool) -> list[dict[str, Any]]:
    ports = [
        {"name": "tpu-ici", "containerPort": c.PORT_TPU_ICI, "protocol": "TCP"},
        {"name": "tf-worker", "containerPort": c.PORT_TF_WORKER, "protocol": "TCP"},
        {"name": "tpu-metrics", "containerPort": c.PORT_TPU_RUNTIME_METRICS, "protocol": "TCP"},
        {"name": c.METRICS_PORT_NAME, "containerPort": c.PORT_TRAINER_METRICS, "protocol": "TCP"},
    ]
    if multislice:
        ports.append({"name": "megascale", "containerPort": c.PORT_MEGASCALE, "protocol": "TCP"})
    return ports


def _resources(job: TPUJob, chips: int) -> dict[str, Any]:
    """TPU chips: requests = limits (extended resources allow nothing else)."""
    user = job.spec.trainer.resources
    tpu_chips = {c.TPU_RESOURCE: str(chips)}
    return {"requests": {**user.requests, **tpu_chips}, "limits": {**user.limits, **tpu_chips}}


def _node_selector(job: TPUJob, cluster: Cluster, shape: tpu.SliceShape, slice_index: int) -> dict[str, str]:
    selector = {
        c.NODE_LABEL_ACCELERATOR: shape.generation.accelerator,
        c.NODE_LABEL_TOPOLOGY: shape.topology,
    }
    if job.spec.node_pool.policy == NodePoolPolicy.create:
        # Pin each slice to its own pool: a slice's hosts must share one ICI domain.
        selector[c.NODE_LABEL_NODEPOOL] = naming.node_pool_name(job, slice_index)
    elif tpu.machine_type_is_ambiguous(shape.generation, shape.topology):
        # Pools made elsewhere: 2x4 is one 8-chip VM or two 4-chip VMs; name which, or the pods wait on
        # nodes of the other kind.
        selector[c.NODE_LABEL_INSTANCE_TYPE] = shape.machine_type.name
    if job.spec.capacity.mode == CapacityMode.spot:
        selector[c.NODE_LABEL_SPOT] = "true"
    elif job.spec.capacity.mode == CapacityMode.flex_start:
        selector[c.NODE_LABEL_FLEX_START] = "true"
    return selector


def _tolerations(job: TPUJob) -> list[dict[str, str]]:
    tolerations = [{"key": c.TPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    if job.spec.node_pool.policy == NodePoolPolicy.create:
        tolerations.append({**own_taint(job), "operator": "Equal"})
    if job.spec.capacity.mode == CapacityMode.spot:
        tolerations.append(
            {"key": c.SPOT_TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        )
    return tolerations


# GKE's maintenance notice on a node: Unix seconds (GKE >= 1.31.1-gke.2008000).
MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"


HOSTNAME_LABEL = "kubernetes.io/hostname"


def node_affinity(before: int | None, avoid_nodes: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The required node affinity of a new pod: with `before` (Unix seconds), no node whose announced
    maintenance comes sooner; with `avoid_nodes`, none of those nodes (a bad host: status.nodeFailures).
    Terms are ORed and a term's expressions ANDed, so the hostname expression goes into every term."""
    avoid = (
        [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(avoid_nodes)}] if avoid_nodes else []
    )
    if before is None:
        terms = [{"matchExpressions": avoid}] if avoid else []
    else:
        terms = [
            {"matchExpressions": [{"key": MAINTENANCE_LABEL, "operator": "DoesNotExist"}, *avoid]},
            {
                "matchExpressions": [
                    {"key": MAINTENANCE_LABEL, "operator": "Gt", "values": [str(before)]},
                    *avoid,
                ]
            },
        ]
    if not terms:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def pod(
    job: TPUJob,
    cluster: Cluster,
    slice_index: int,
    worker_index: int,
    attempt: int = 0,
    *,
    avoid_maintenance_before: int | None = None,
    avoid_nodes: tuple[str, ...] = (),
    placement: Placement | None = None,
) -> dict[str, Any]:
    """One TPU host's pod; with `avoid_maintenance_before` (Unix seconds), never on a node whose announced
    maintenance comes sooner (it would stop the slice again); never on `avoid_nodes` (nodes that failed the
    job: status/bad_nodes.py); with a Kueue admission's `placement`, on its flavors' nodes (their node labels
    as selectors, their tolerations)."""
    shape = slice_shape(job)
    trainer = job.spec.trainer
    labels = {
        **job_labels(job),
        c.LABEL_SLICE: str(slice_index),
        c.LABEL_WORKER: str(worker_index),
        c.LABEL_ATTEMPT: str(attempt),
    }
    container: dict[str, Any] = {
        "name": c.TRAINER_CONTAINER,
        "image": trainer.image,
        "env": worker_env(
            job,
            slice_index,
            worker_index,
            coordinator_address=naming.worker_address(job, 0, 0),
            attempt=attempt,
        ),
        **env_from_and_mounts(trainer),
        "ports": _container_ports(job.spec.tpu.slices > 1),
        "resources": _resources(job, shape.chips_per_host),
        # The failing worker says why in its pod status (state.terminated.message), which the job's status
        # quotes: what it wrote to /dev/termination-log (the trainer writes one line on every non-zero
        # exit), else the end of its log. kubernetes.io/docs/tasks/debug/debug-application/
        # determine-reason-pod-failure/
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": security_context(trainer.security_context),
    }
    if is_default_trainer_image(trainer.image):
        # The shipped trainer runs as its image's user 1000 (trainer-image/Dockerfile USER): the kubelet
        # refuses to start it as root, whatever else the image becomes. A job may still say otherwise.
        container["securityContext"].setdefault("runAsNonRoot", True)
    if trainer.command:
        container["command"] = list(trainer.command)
    if trainer.args:
        container["args"] = list(trainer.args)
    if trainer.image_pull_policy:
        container["imagePullPolicy"] = trainer.image_pull_policy
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # the operator restarts whole slices, never one container
        "hostname": naming.worker_hostname(job, slice_index, worker_index),
        "subdomain": naming.service_name(job),
        "nodeSelector": _node_selector(job, cluster, shape, slice_index),
        "tolerations": _tolerations(job),
        # The trainer saves a checkpoint on SIGTERM within it (spec.trainer.terminationGracePeriodSeconds).
        "terminationGracePeriodSeconds": trainer.termination_grace_period_seconds,
        "containers": [container],
    }
    if trainer.service_account_name:
        spec["serviceAccountName"] = trainer.service_account_name
    # No Kubernetes API token in a worker unless the job asks for one (a trainer calls no Kubernetes API).
    spec["automountServiceAccountToken"] = trainer.automount_service_account_token
    if (affinity := node_affinity(avoid_maintenance_before, avoid_nodes)) is not None:
        spec["affinity"] = affinity
    if trainer.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    metadata = owned_metadata(job, naming.pod_name(job, slice_index, worker_index, attempt), labels)
    if job.spec.run_policy.restart_strategy == RestartStrategy.recreate_slice:
        restart_in_place(spec, metadata, attempt)
    merge_pod(spec, metadata, job.spec.pod)  # sidecars, volumes, pull secrets, ...: after the operator's part
    if placement is not None:
        # Kueue's flavor assignment only picks flavors whose labels agree with the pod's own selectors, and
        # an admission check's update that disagrees with the pod stops the job before this (podset.Merge;
        # status/queue.py).
        spec["nodeSelector"] = {**placement.node_selector, **spec["nodeSelector"]}
        metadata["labels"] = {**placement.labels, **metadata["labels"]}
        if placement.annotations:
            metadata["annotations"] = {**placement.annotations, **metadata.get("annotations", {})}
        spec["tolerations"] = [
            *spec["tolerations"],
            *(t for t in placement.tolerations if t not in spec["tolerations"]),
        ]
        if worker_index < len(placement.worker_node_selectors):
            # Kueue's topology assignment: this worker's domain, copied over as the ungater copies it
            # (topology_ungater.go Reconcile: maps.Copy into the pod's nodeSelector; status/tas.py).
            spec["nodeSelector"].update(placement.worker_node_selectors[worker_index])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pods(job: TPUJob, cluster: Cluster, attempt: int = 0) -> list[dict[str, Any]]:
    hosts = slice_shape(job).hosts
    return [pod(job, cluster, s, w, attempt) for s in range(job.spec.tpu.slices) for w in range(hosts)]


def service(job: TPUJob) -> dict[str, Any]:
    """Headless, publishing not-ready pods: workers must resolve each other before they are ready."""
    ports = [
        {"name": "tpu-ici", "port": c.PORT_TPU_ICI, "targetPort": c.PORT_TPU_ICI},
        {"name": "tf-worker", "port": c.PORT_TF_WORKER, "targetPort": c.PORT_TF_WORKER},
    ]
    if job.spec.tpu.slices > 1:
        ports.append({"name": "megascale", "port": c.PORT_MEGASCALE, "targetPort": c.PORT_MEGASCALE})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(job, naming.service_name(job), job_labels(job)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {c.LABEL_JOB_NAME: job.metadata.name},
            "ports": ports,
        },
    }


def hosts_config_maps(job: TPUJob) -> list[dict[str, Any]]:
    """Each slice's host list ConfigMap, for a job whose slices are too large to repeat it in every pod."""
    if not uses_hosts_config_map(job):
        return []
    return [hosts_config_map(job, s) for s in range(job.spec.tpu.slices)]


def render_plan(job: TPUJob, cluster: Cluster, attempt: int = 0) -> Plan:
    namespace = job.metadata.namespace or "default"
    policy = [network_policy(namespace, cluster.metrics_from)] if cluster.network_policy else []
    resources = [service(job), *hosts_config_maps(job), *pods(job, cluster, attempt), *policy]
    return Plan(node_pools=node_pools(job, cluster), resources=resources)
