"""What a team adds to its worker pods: env from Secrets, volumes, sidecars, pull secrets, scheduling extras.

A curated, typed subset of Kubernetes' core/v1 PodSpec and Container, not a whole pod template: the fields
training teams on GKE use (Cloud Storage FUSE, Secrets, ConfigMaps, Filestore/Parallelstore claims, /dev/shm,
native sidecars), with Kubernetes' names, meanings, bounds and patterns, so a pod template's fragment pastes
in as is; volumes.py holds the volumes. Whatever the operator sets itself (the TPU resources, node selector
and tolerations, hostname, restart policy, the worker env and ports) is not here, or is refused by
pod_validation.py with the field to use instead. Cross-field rules ("exactly one of", names that must exist)
live in pod_validation.py, and again as the CRD's CEL rules in cel.py: every list and map here is bounded so
that the API server's cost estimate, which multiplies by every list's possible length, stays in budget.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from tpujob.api.base import (
    CONFIG_KEY_PATTERN,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    ENV_NAME_PATTERN,
    LABEL_VALUE_PATTERN,
    ApiModel,
    Quantity,
)
from tpujob.api.volumes import MAX_VOLUMES, LocalObjectReference, Volume

# Kubernetes bounds (k8s.io/kubernetes pkg/apis/core/validation): user and group IDs 0 to 2^31-1, ports 1 to
# 65535; a port name is an IANA service name of at most 15 characters.
MAX_ID = 2147483647
PORT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# The fields an env var may take from its pod (the downward API for env).
FIELD_PATH_PATTERN = (
    r"^(metadata\.(name|namespace|uid|labels\['[^']+'\]|annotations\['[^']+'\])"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)
RESOURCE_FIELD_PATTERN = r"^(limits|requests)\.(cpu|memory|ephemeral-storage|hugepages-[-a-zA-Z0-9]+)$"
# Lists keyed by a field, as Kubernetes' own pod lists are (+listType=map): the API server refuses two items
# with one key at apply time, and server-side apply merges them by key.
KEYED_BY_NAME: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
KEYED_BY_MOUNT_PATH: dict[str, Any] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["mountPath"],
}
# Bounds on every list and map of the pod parts: Kubernetes sets none on a pod, but the API server estimates
# the cost of the CRD's CEL rules from them (an unbounded list counts as long as a whole request, and a CRD
# over its budget is refused). Far past what a team writes; each is said in its field's description.
MAX_CONTAINERS = 16  # sidecars, and init containers: each list
MAX_COMMAND = 64
MAX_ARGS = 1024
MAX_ENV = 256
MAX_ENV_FROM = 32
MAX_MOUNTS = 64
MAX_PORTS = 32
MAX_CAPABILITIES = 64
MAX_CAPABILITY_LENGTH = 64
MAX_RESOURCES = 16
MAX_LABELS = 64
# A pod's annotations may take 256 KiB in all, keys and values (apimachinery ValidateAnnotationsSize,
# TotalAnnotationSizeLimitB): 64 of at most 317-byte keys (a 253-byte prefix, '/', a 63-byte name) and
# 3 KiB values take at most 217 KB, so a job the API server stores never makes a pod it refuses after its
# pools exist. A 300 KB annotation is refused at apply, naming it.
MAX_ANNOTATIONS = 64
MAX_ANNOTATION_VALUE = 3072
# One variable as exec passes it ("NAME=value" and its NUL) must fit Linux's MAX_ARG_STRLEN (131072 bytes,
# validation.py): a longer one makes the container fail to start, after the pools exist.
MAX_ENV_VALUE = 131072 - 256 - 2
MAX_NODE_SELECTOR = 32
MAX_TOLERATIONS = 32
MAX_PULL_SECRETS = 32
MAX_GROUPS = 32
Id = Annotated[int, Field(ge=0, le=MAX_ID)]


def _name(what: str) -> Any:
    """A Secret's or ConfigMap's name (a DNS subdomain), as a field."""
    return Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253, description=f"Name of the {what}.")


# --- env ---------------------------------------------------------------------------------------------------


class SecretKeySelector(ApiModel):
    """A key of a Secret in the job's namespace."""

    name: str = _name("Secret")
    key: str = Field(pattern=CONFIG_KEY_PATTERN, max_length=253, description="The key to read.")
    optional: bool | None = Field(
        default=None,
        description="true: a missing Secret or key leaves the variable unset instead of failing.",
    )


class ConfigMapKeySelector(ApiModel):
    """A key of a ConfigMap in the job's namespace."""

    name: str = _name("ConfigMap")
    key: str = Field(pattern=CONFIG_KEY_PATTERN, max_length=253, description="The key to read.")
    optional: bool | None = Field(
        default=None,
        description="true: a missing ConfigMap or key leaves the variable unset instead of failing.",
    )


class ObjectFieldSelector(ApiModel):
    """A field of the pod (the downward API)."""

    api_version: str | None = Field(default=None, description="Version of fieldPath's schema; default v1.")
    field_path: str = Field(
        pattern=FIELD_PATH_PATTERN,
        description=(
            "metadata.name, metadata.namespace, metadata.uid, metadata.labels['KEY'] (e.g. "
            "metadata.labels['tpujob.dev/worker']), metadata.annotations['KEY'], spec.nodeName, "
            "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP or status.podIPs."
        ),
    )


class ResourceFieldSelector(ApiModel):
    """A container's resource request or limit."""

    container_name: str | None = Field(
        default=None,
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="The container; default: the one the variable is in.",
    )
    resource: str = Field(
        pattern=RESOURCE_FIELD_PATTERN,
        description="limits.cpu, requests.memory, limits.ephemeral-storage, ...",
    )
    divisor: Quantity | None = Field(default=None, description="Unit of the value, e.g. 1Mi; default 1.")


class EnvVarSource(ApiModel):
    """Where a variable's value comes from: exactly one of the four."""

    secret_key_ref: SecretKeySelector | None = Field(default=None, description="A key of a Secret.")
    config_map_key_ref: ConfigMapKeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = Field(default=None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(
        default=None, description="A resource request or limit of a container."
    )


class EnvVar(ApiModel):
    """An environment variable: a value, or valueFrom (not both)."""

    name: str = Field(pattern=ENV_NAME_PATTERN, max_length=256, description="Variable name.")
    value: str | None = Field(
        default=None,
        max_length=MAX_ENV_VALUE,
        description="Variable value; neither value nor valueFrom: empty. At most 130,814 characters (with "
        "its name, Linux's 128 KiB limit on one variable).",
    )
    value_from: EnvVarSource | None = Field(
        default=None, description="Take the value from a Secret, a ConfigMap, the pod or a resource."
    )


class SecretEnvSource(ApiModel):
    """A Secret whose every key becomes a variable."""

    name: str = _name("Secret")
    optional: bool | None = Field(default=None, description="true: a missing Secret is no error.")


class ConfigMapEnvSource(ApiModel):
    """A ConfigMap whose every key becomes a variable."""

    name: str = _name("ConfigMap")
    optional: bool | None = Field(default=None, description="true: a missing ConfigMap is no error.")


class EnvFromSource(ApiModel):
    """Every key of one Secret or ConfigMap as a variable (exactly one of secretRef, configMapRef)."""

    prefix: str | None = Field(
        default=None,
        pattern=ENV_NAME_PATTERN,
        max_length=128,
        description="Put before every key's name; not TPU_ or MEGASCALE_ (the operator's and libtpu's).",
    )
    secret_ref: SecretEnvSource | None = Field(default=None, description="The Secret.")
    config_map_ref: ConfigMapEnvSource | None = Field(default=None, description="The ConfigMap.")


# --- containers --------------------------------------------------------------------------------------------


class VolumeMount(ApiModel):
    """A volume of spec.pod.volumes mounted into a container."""

    name: str = Field(
        pattern=DNS_LABEL_PATTERN, max_length=63, description="The volume's name in spec.pod.volumes."
    )
    mount_path: str = Field(
        min_length=1, max_length=4096, description="Where in the container; unique per container."
    )
    sub_path: str | None = Field(
        default=None,
        max_length=4096,
        description="A path inside the volume to mount instead of its root (relative, no '..').",
    )
    read_only: bool | None = Field(default=None, description="true: mounted read-only.")


class ResourceRequirements(ApiModel):
    """CPU, memory and other resources besides the TPU chips (the operator sets the trainer's; no other
    container may take google.com/tpu)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description=f"Requests, e.g. {{cpu: '8', memory: 64Gi}}. At most {MAX_RESOURCES}.",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description=f"Limits, e.g. {{memory: 128Gi}}. At most {MAX_RESOURCES}.",
    )


Capability = Annotated[str, Field(max_length=MAX_CAPABILITY_LENGTH)]


class Capabilities(ApiModel):
    """Linux capabilities to add and drop (names as in capabilities(7), without CAP_ or with it)."""

    add: list[Capability] | None = Field(
        default=None,
        max_length=MAX_CAPABILITIES,
        description=(
            f"Capabilities to add. At most {MAX_CAPABILITIES}, of {MAX_CAPABILITY_LENGTH} characters each."
        ),
    )
    drop: list[Capability] | None = Field(
        default=None,
        max_length=MAX_CAPABILITIES,
        description=f"Capabilities to drop; the operator's default drops ALL. At most {MAX_CAPABILITIES}.",
    )


class ContainerSecurityContext(ApiModel):
    """A container's security settings; unset fields keep the operator's defaults (allowPrivilegeEscalation:
    false, capabilities drop ALL, seccomp RuntimeDefault) or the pod's."""

    run_as_user: Id | None = Field(default=None, description="UID to run the entrypoint as.")
    run_as_group: Id | None = Field(default=None, description="GID to run the entrypoint as.")
    run_as_non_root: bool | None = Field(
        default=None, description="true: the kubelet refuses to start the container as UID 0."
    )
    read_only_root_filesystem: bool | None = Field(
        default=None, description="true: the container's root filesystem is read-only."
    )
    allow_privilege_escalation: bool | None = Field(
        default=None,
        description=(
            "Whether a process may gain more privileges than its parent (no_new_privs). Default false; "
            "privileged or CAP_SYS_ADMIN need it unset or true."
        ),
    )
    privileged: bool | None = Field(
        default=None,
        description="Run privileged (root on the host). TPU chips come from the device plugin without it.",
    )
    capabilities: Capabilities | None = Field(
        default=None, description="Capabilities to add and drop (drop replaces the default ALL)."
    )


class ContainerPort(ApiModel):
    """A port a sidecar listens on (informational, as in Kubernetes; the pod's network is shared)."""

    name: str | None = Field(
        default=None, pattern=PORT_NAME_PATTERN, max_length=15, description="IANA service name of the port."
    )
    container_port: int = Field(ge=1, le=65535, description="Port number; not one of the trainer's.")
    protocol: Literal["TCP", "UDP", "SCTP"] = Field(default="TCP", description="TCP, UDP or SCTP.")


class Container(ApiModel):
    """A container beside the trainer in every worker pod."""

    name: str = Field(
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="Container name, unique in the pod; 'trainer' is the trainer's.",
    )
    image: str = Field(min_length=1, max_length=512, description="Container image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Always, IfNotPresent or Never. Default: the cluster's default for the tag."
    )
    command: list[str] = Field(
        default_factory=list,
        max_length=MAX_COMMAND,
        description=f"Entrypoint; empty keeps the image's. At most {MAX_COMMAND} items.",
    )
    args: list[str] = Field(
        default_factory=list,
        max_length=MAX_ARGS,
        description=f"Arguments to the entrypoint. At most {MAX_ARGS}.",
    )
    working_dir: str | None = Field(default=None, max_length=4096, description="Working directory.")
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_ENV,
        json_schema_extra=KEYED_BY_NAME,
        description=f"Environment variables. At most {MAX_ENV}.",
    )
    env_from: list[EnvFromSource] = Field(
        default_factory=list,
        max_length=MAX_ENV_FROM,
        description=f"Every key of a Secret or ConfigMap as a variable. At most {MAX_ENV_FROM}.",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=MAX_MOUNTS,
        json_schema_extra=KEYED_BY_MOUNT_PATH,
        description=f"Volumes of spec.pod.volumes to mount. At most {MAX_MOUNTS}.",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements, description="CPU and memory; never google.com/tpu."
    )
    security_context: ContainerSecurityContext | None = Field(
        default=None, description="Security settings over the operator's restrictive defaults."
    )
    ports: list[ContainerPort] = Field(
        default_factory=list,
        max_length=MAX_PORTS,
        description=f"Ports it listens on; the trainer's ports are taken. At most {MAX_PORTS}.",
    )


class InitContainer(Container):
    """A container that runs before the trainer: to completion, or (restartPolicy: Always) as a native
    sidecar that starts first and runs beside the trainer until it ends (Kubernetes >= 1.29, GKE >= 1.29)."""

    restart_policy: Literal["Always"] | None = Field(
        default=None,
        description=(
            "Always: a native sidecar, started before the trainer and stopped after it, so the pod still "
            "completes when the trainer exits. Unset: runs to completion before the trainer starts."
        ),
    )


# --- the pod -----------------------------------------------------------------------------------------------


class Toleration(ApiModel):
    """A taint the pods tolerate, besides the TPU (and spot) taints the operator tolerates."""

    key: str | None = Field(
        default=None, max_length=316, description="Taint key; unset with operator Exists: every taint."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Equal (default): key and value match. Exists: the key matches."
    )
    value: str | None = Field(
        default=None, pattern=LABEL_VALUE_PATTERN, max_length=63, description="Taint value (with Equal)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule or NoExecute; unset: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, description="NoExecute only: how long the pod stays after the taint appears."
    )


class PodSecurityContext(ApiModel):
    """Settings for every container of the pod (a container's own securityContext wins)."""

    run_as_user: Id | None = Field(default=None, description="UID of every container's entrypoint.")
    run_as_group: Id | None = Field(default=None, description="GID of every container's entrypoint.")
    run_as_non_root: bool | None = Field(default=None, description="true: no container may run as UID 0.")
    fs_group: Id | None = Field(
        default=None, description="A group that owns the volumes and that every process belongs to."
    )
    supplemental_groups: list[Id] = Field(
        default_factory=list,
        max_length=MAX_GROUPS,
        description=f"More groups of every container's first process. At most {MAX_GROUPS}.",
    )


LabelValue = Annotated[str, Field(pattern=LABEL_VALUE_PATTERN, max_length=63)]


class WorkerPodSpec(ApiModel):
    """What every worker pod carries besides the trainer, in Kubernetes' pod fields. The operator sets the
    rest: hostname, subdomain, restartPolicy, the TPU node selector and tolerations, affinity,
    terminationGracePeriodSeconds; serviceAccountName and hostNetwork are spec.trainer's."""

    labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description=(
            "Labels of the pods; tpujob.dev/* and app.kubernetes.io/managed-by are the operator's. "
            f"At most {MAX_LABELS}."
        ),
    )
    annotations: dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE)]] = Field(
        default_factory=dict,
        max_length=MAX_ANNOTATIONS,
        description=(
            'Pod annotations, e.g. gke-gcsfuse/volumes: "true" (Cloud Storage FUSE volumes); tpujob.dev/* '
            f"are the operator's. At most {MAX_ANNOTATIONS}, each value at most {MAX_ANNOTATION_VALUE} "
            "characters (a pod's annotations take at most 256 KiB)."
        ),
    )
    priority_class_name: str | None = Field(
        default=None,
        pattern=DNS_SUBDOMAIN_PATTERN,
        max_length=253,
        description="PriorityClass of the pods: who waits, and who is preempted, when TPUs are short.",
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=MAX_PULL_SECRETS,
        description=(
            "Secrets (kubernetes.io/dockerconfigjson) to pull private images with. "
            f"At most {MAX_PULL_SECRETS}."
        ),
    )
    volumes: list[Volume] = Field(
        default_factory=list,
        max_length=MAX_VOLUMES,
        json_schema_extra=KEYED_BY_NAME,
        description=f"Volumes the trainer and sidecars mount by name. At most {MAX_VOLUMES}.",
    )
    node_selector: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=MAX_NODE_SELECTOR,
        description=(
            "More node labels to require, besides the TPU ones the operator sets (refused here). "
            f"At most {MAX_NODE_SELECTOR}."
        ),
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=MAX_TOLERATIONS,
        description=(
            "More taints to tolerate, besides google.com/tpu and cloud.google.com/gke-spot. "
            f"At most {MAX_TOLERATIONS}."
        ),
    )
    init_containers: list[InitContainer] = Field(
        default_factory=list,
        max_length=MAX_CONTAINERS,
        json_schema_extra=KEYED_BY_NAME,
        description=(
            "Containers that run before the trainer, or beside it as native sidecars "
            f"(restartPolicy: Always). At most {MAX_CONTAINERS}."
        ),
    )
    containers: list[Container] = Field(
        default_factory=list,
        max_length=MAX_CONTAINERS,
        json_schema_extra=KEYED_BY_NAME,
        description=(
            "Containers beside the trainer. The pod ends only when all of them exit: a helper that runs "
            f"forever belongs in initContainers with restartPolicy: Always. At most {MAX_CONTAINERS}."
        ),
    )
    security_context: PodSecurityContext | None = Field(
        default=None, description="User, groups and fsGroup of every container."
    )
