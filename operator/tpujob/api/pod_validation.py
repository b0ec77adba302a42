"""The rules of a job's pod parts (spec.trainer's container fields and spec.pod): what the operator sets is
refused with the reason and the field to use instead; names must exist and be unique; exactly one source
where Kubernetes takes one. What Kubernetes would refuse only when the operator creates the pods (a job
already holding its TPU slice) is refused here, with its field path, before anything is made.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from tpujob.api import constants as c
from tpujob.api import trainer_contract as contract
from tpujob.api.base import QUALIFIED_NAME_PATTERN, ApiModel, Problem
from tpujob.api.pod import (
    Container,
    ContainerSecurityContext,
    EnvFromSource,
    EnvVar,
    KeyToPath,
    ResourceRequirements,
    VolumeMount,
    WorkerPodSpec,
)
from tpujob.api.spec import TPUJobSpec, TrainerSpec

# The worker env: the slice's identity and wiring under TPU_ and MEGASCALE_ (render/plan.py worker_env), both
# prefixes reserved whole, as libtpu reads more of them (TPU_ACCELERATOR_TYPE, TPU_SKIP_MDS_QUERY, ...) ...
RESERVED_ENV_PREFIXES = ("TPU_", "MEGASCALE_")
# ... except libtpu's logging knobs, which say nothing about the slice and which teams do set: xpk's
# --enable-debug-logs runs the workload with TPU_STDERR_LOG_LEVEL=0 TPU_MIN_LOG_LEVEL=0
# TPU_VMODULE=real_program_continuator=1 (AI-Hypercomputer/xpk src/xpk/commands/workload.py).
USER_TPU_ENV = frozenset({"TPU_STDERR_LOG_LEVEL", "TPU_MIN_LOG_LEVEL", "TPU_VMODULE"})
# Where a job says what some of the reserved variables carry.
ENV_SETTINGS = {
    contract.ENV_CHECKPOINT_DIR: "spec.trainer.checkpointDir",
    contract.ENV_EXPORT_DIR: "spec.trainer.exportDir",
}

OPERATOR_PORTS = {
    c.PORT_TPU_ICI: "TPU ICI",
    c.PORT_TF_WORKER: "TensorFlow worker",
    c.PORT_TPU_RUNTIME_METRICS: "TPU runtime metrics",
    c.PORT_TRAINER_METRICS: "trainer metrics",
    c.PORT_MEGASCALE: "Megascale",
}
# Node labels the operator selects on, and the field of the job that decides each.
OPERATOR_NODE_LABELS = {
    c.NODE_LABEL_ACCELERATOR: "spec.tpu.type",
    c.NODE_LABEL_TOPOLOGY: "spec.tpu.topology",
    c.NODE_LABEL_NODEPOOL: "spec.nodePool",
    c.NODE_LABEL_INSTANCE_TYPE: "spec.tpu.machineType",
    c.NODE_LABEL_SPOT: "spec.capacity.mode",
    c.NODE_LABEL_FLEX_START: "spec.capacity.mode",
}
OPERATOR_TAINTS = {
    c.TPU_TAINT_KEY: "the operator tolerates it on every worker",
    c.SPOT_TAINT_KEY: "the operator tolerates it when spec.capacity.mode is spot",
}
OPERATOR_LABEL_PREFIX = f"{c.GROUP}/"

_PORTS = ", ".join(str(port) for port in OPERATOR_PORTS)
# Fields of a pod or container that the operator sets, each with where it is set: a manifest that names one
# is told so, instead of "unknown field" (see validation.py).
OPERATOR_FIELDS: dict[tuple[type[ApiModel], str], str] = {
    (
        WorkerPodSpec,
        "hostname",
    ): "the operator names each worker <job>-s<slice>-w<worker> (TPU_WORKER_HOSTNAMES lists them); remove it",
    (WorkerPodSpec, "subdomain"): "the operator sets the job's headless Service, through which the workers "
    "find each other; remove it",
    (WorkerPodSpec, "restartPolicy"): "the operator sets Never: it restarts a failed job's pods all together "
    "(spec.runPolicy.maxRestarts), never one container; remove it",
    (WorkerPodSpec, "nodeName"): "the scheduler puts each worker on a node of its slice; choose nodes with "
    "spec.pod.nodeSelector or spec.nodePool",
    (WorkerPodSpec, "hostNetwork"): "set spec.trainer.hostNetwork (the operator also sets the DNS policy it "
    "needs)",
    (
        WorkerPodSpec,
        "dnsPolicy",
    ): "the operator sets it (ClusterFirstWithHostNet with spec.trainer.hostNetwork); remove it",
    (WorkerPodSpec, "serviceAccountName"): "set spec.trainer.serviceAccountName",
    (WorkerPodSpec, "serviceAccount"): "set spec.trainer.serviceAccountName",
    (WorkerPodSpec, "affinity"): "the operator sets the node affinity (no node with announced maintenance); "
    "require more node labels with spec.pod.nodeSelector",
    (WorkerPodSpec, "terminationGracePeriodSeconds"): "the operator sets 30 s, the notice a spot VM gets, in "
    "which the trainer saves a checkpoint; remove it",
    (TrainerSpec, "name"): f"the trainer's container is always named {c.TRAINER_CONTAINER}; remove it",
    (TrainerSpec, "ports"): f"the operator sets the trainer's ports ({_PORTS}); remove it",
    (TPUJobSpec, "template"): "a TPUJob takes no pod template: the trainer's container is spec.trainer, the "
    "rest of the pod spec.pod (volumes, sidecars, labels, ...)",
}


def env_reserved(name: str) -> bool:
    """TPU_* and MEGASCALE_* (bar libtpu's log levels), and the TPUJOB_* names the operator sets; the other
    TPUJOB_* are the default trainer's settings."""
    if name in contract.OPERATOR_TPUJOB_ENV:
        return True
    return name.startswith(RESERVED_ENV_PREFIXES) and name not in USER_TPU_ENV


def pod_problems(spec: TPUJobSpec) -> Iterator[Problem]:
    """Every problem of spec.trainer's container fields and of spec.pod."""
    pod = spec.pod
    volumes = {volume.name for volume in pod.volumes}
    containers = [
        *((f"spec.pod.initContainers[{i}]", x) for i, x in enumerate(pod.init_containers)),
        *((f"spec.pod.containers[{i}]", x) for i, x in enumerate(pod.containers)),
    ]
    names = {c.TRAINER_CONTAINER, *(container.name for _, container in containers)}
    trainer = spec.trainer
    yield from _trainer_env_problems(trainer.env, trainer.env_from)
    yield from _container_problems("spec.trainer", trainer, volumes, names, trainer=True)
    seen = {c.TRAINER_CONTAINER}
    for path, container in containers:
        if container.name == c.TRAINER_CONTAINER:
            yield Problem(
                f"{path}.name", f"{c.TRAINER_CONTAINER} is the trainer's container; name it otherwise"
            )
        elif container.name in seen:
            yield Problem(
                f"{path}.name", f"{container.name} names two containers; container names are unique"
            )
        seen.add(container.name)
        yield from _container_problems(path, container, volumes, names, trainer=False)
        for index, port in enumerate(container.ports):
            if port.container_port in OPERATOR_PORTS:
                yield Problem(
                    f"{path}.ports[{index}].containerPort",
                    f"{port.container_port} is the trainer's {OPERATOR_PORTS[port.container_port]} port, and "
                    f"the pod's containers share one network; the operator's ports are {_PORTS}",
                )
    yield from _pod_problems(pod)


def _trainer_env_problems(env: Sequence[EnvVar], env_from: Sequence[EnvFromSource]) -> Iterator[Problem]:
    for index, var in enumerate(env):
        if env_reserved(var.name):
            setting = ENV_SETTINGS.get(var.name)
            fix = f"set {setting} instead" if setting else "remove it"
            yield Problem(
                f"spec.trainer.env[{index}].name",
                f"{var.name} is set by the operator (TPU_*, MEGASCALE_* and the TPUJOB_* of the README's env "
                f"contract are the worker env it gives every worker); {fix}",
            )
    for index, source in enumerate(env_from):
        # The operator's own variables win over envFrom's (env beats envFrom in Kubernetes), but a TPU_ or
        # MEGASCALE_ prefix would hand libtpu variables the operator does not set.
        prefix = source.prefix or ""
        if prefix and any(prefix.startswith(p) or p.startswith(prefix) for p in RESERVED_ENV_PREFIXES):
            yield Problem(
                f"spec.trainer.envFrom[{index}].prefix",
                f"{prefix!r} would name variables TPU_* or MEGASCALE_*, which the operator and libtpu own; "
                "choose another prefix",
            )


def _container_problems(
    path: str, container: TrainerSpec | Container, volumes: set[str], containers: set[str], *, trainer: bool
) -> Iterator[Problem]:
    yield from _resource_problems(f"{path}.resources", container.resources, trainer)
    yield from _env_problems(path, container.env, containers)
    for index, source in enumerate(container.env_from):
        if (source.secret_ref is None) == (source.config_map_ref is None):
            yield Problem(f"{path}.envFrom[{index}]", "set exactly one of secretRef or configMapRef")
    yield from _mount_problems(path, container.volume_mounts, volumes)
    yield from _security_problems(f"{path}.securityContext", container.security_context)


def _resource_problems(path: str, resources: ResourceRequirements, trainer: bool) -> Iterator[Problem]:
    for section, quantities in (("requests", resources.requests), ("limits", resources.limits)):
        if c.TPU_RESOURCE in quantities:
            why = (
                "set by the operator from the topology"
                if trainer
                else "the trainer's: every chip of the host goes to it"
            )
            yield Problem(f"{path}.{section}", f"{c.TPU_RESOURCE} is {why}; remove it")


def _env_problems(path: str, env: Sequence[EnvVar], containers: set[str]) -> Iterator[Problem]:
    seen: set[str] = set()
    for index, var in enumerate(env):
        here = f"{path}.env[{index}]"
        if var.name in seen:
            yield Problem(f"{here}.name", f"{var.name} is set twice; keep one")
        seen.add(var.name)
        source = var.value_from
        if source is None:
            continue
        if var.value is not None:
            yield Problem(here, "set value or valueFrom, not both")
        yield from _exactly_one(
            f"{here}.valueFrom",
            secretKeyRef=source.secret_key_ref,
            configMapKeyRef=source.config_map_key_ref,
            fieldRef=source.field_ref,
            resourceFieldRef=source.resource_field_ref,
        )
        resource = source.resource_field_ref
        if resource is not None and resource.container_name and resource.container_name not in containers:
            yield Problem(
                f"{here}.valueFrom.resourceFieldRef.containerName",
                f"no container {resource.container_name} in the pod; containers: "
                + ", ".join(sorted(containers)),
            )


def _relative_path_problem(path: str, value: str) -> Iterator[Problem]:
    if value.startswith("/") or ".." in value.split("/"):
        yield Problem(path, f"{value!r} must be a relative path without '..'")


def _mount_problems(path: str, mounts: Sequence[VolumeMount], volumes: set[str]) -> Iterator[Problem]:
    paths: set[str] = set()
    for index, mount in enumerate(mounts):
        here = f"{path}.volumeMounts[{index}]"
        if mount.name not in volumes:
            known = ", ".join(sorted(volumes)) or "none"
            yield Problem(
                f"{here}.name", f"no volume {mount.name} in spec.pod.volumes (volumes: {known}); add it"
            )
        if mount.mount_path in paths:
            yield Problem(f"{here}.mountPath", f"{mount.mount_path} is mounted twice in this container")
        paths.add(mount.mount_path)
        if mount.sub_path:
            yield from _relative_path_problem(f"{here}.subPath", mount.sub_path)


def _security_problems(path: str, context: ContainerSecurityContext | None) -> Iterator[Problem]:
    """Kubernetes refuses a pod whose container cannot escalate yet is privileged or adds CAP_SYS_ADMIN
    (pkg/apis/core/validation ValidateSecurityContext)."""
    if context is None or context.allow_privilege_escalation is not False:
        return
    if context.privileged:
        yield Problem(path, "allowPrivilegeEscalation false and privileged true cannot go together; drop one")
    if "CAP_SYS_ADMIN" in ((context.capabilities and context.capabilities.add) or []):
        yield Problem(
            path, "allowPrivilegeEscalation false and adding CAP_SYS_ADMIN cannot go together; drop one"
        )


def _qualified_name_problems(path: str, key: str, what: str) -> Iterator[Problem]:
    prefix, _, name = key.rpartition("/")
    if len(name) > 63 or len(prefix) > 253 or not re.match(QUALIFIED_NAME_PATTERN, key):
        yield Problem(
            path,
            f"{key!r} is not a valid {what} key: an optional DNS subdomain and '/', then at most 63 letters, "
            "digits, '-', '_' or '.', alphanumeric at both ends",
        )


def _key_problems(path: str, keys: Mapping[str, str], what: str) -> Iterator[Problem]:
    for key in keys:
        yield from _qualified_name_problems(f"{path}.{key}", key, what)


def _pod_problems(pod: WorkerPodSpec) -> Iterator[Problem]:
    yield from _key_problems("spec.pod.labels", pod.labels, "label")
    yield from _key_problems("spec.pod.annotations", pod.annotations, "annotation")
    yield from _key_problems("spec.pod.nodeSelector", pod.node_selector, "label")
    for section, keys in (("labels", pod.labels), ("annotations", pod.annotations)):
        for key in keys:
            if key.startswith(OPERATOR_LABEL_PREFIX) or (section == "labels" and key == c.LABEL_MANAGED_BY):
                yield Problem(
                    f"spec.pod.{section}.{key}",
                    f"{OPERATOR_LABEL_PREFIX}* and {c.LABEL_MANAGED_BY} are the operator's: it finds its "
                    "pods by them; use a key of your own",
                )
    for key in pod.node_selector:
        if key in OPERATOR_NODE_LABELS:
            yield Problem(
                f"spec.pod.nodeSelector.{key}",
                f"the operator selects {key} from {OPERATOR_NODE_LABELS[key]}; set that instead",
            )
    for index, toleration in enumerate(pod.tolerations):
        here = f"spec.pod.tolerations[{index}]"
        if toleration.key in OPERATOR_TAINTS:
            yield Problem(f"{here}.key", f"{toleration.key}: {OPERATOR_TAINTS[toleration.key]}; remove it")
        if toleration.key:
            yield from _qualified_name_problems(f"{here}.key", toleration.key, "toleration")
        elif toleration.operator != "Exists":
            yield Problem(
                f"{here}.operator", "a toleration without key must have operator Exists (any taint)"
            )
        if toleration.operator == "Exists" and toleration.value:
            yield Problem(f"{here}.value", "operator Exists takes no value; remove it or use Equal")
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            yield Problem(f"{here}.tolerationSeconds", "only used with effect NoExecute")
    yield from _volume_problems(pod)


def _exactly_one(path: str, **sources: object) -> Iterator[Problem]:
    """Kubernetes takes one source where it lists several (an env var's valueFrom, a volume)."""
    if sum(source is not None for source in sources.values()) != 1:
        names = list(sources)
        yield Problem(path, f"set exactly one of {', '.join(names[:-1])} or {names[-1]}")


def _volume_problems(pod: WorkerPodSpec) -> Iterator[Problem]:
    seen: set[str] = set()
    for index, volume in enumerate(pod.volumes):
        here = f"spec.pod.volumes[{index}]"
        if volume.name in seen:
            yield Problem(f"{here}.name", f"{volume.name} names two volumes; volume names are unique")
        seen.add(volume.name)
        yield from _exactly_one(
            here,
            emptyDir=volume.empty_dir,
            secret=volume.secret,
            configMap=volume.config_map,
            persistentVolumeClaim=volume.persistent_volume_claim,
            csi=volume.csi,
        )
        items: list[KeyToPath] = []
        if volume.secret is not None:
            items = volume.secret.items
        elif volume.config_map is not None:
            items = volume.config_map.items
        kind = "secret" if volume.secret is not None else "configMap"
        for item_index, item in enumerate(items):
            yield from _relative_path_problem(f"{here}.{kind}.items[{item_index}].path", item.path)
        gcsfuse = volume.csi is not None and volume.csi.driver == c.GCSFUSE_CSI_DRIVER
        if gcsfuse and pod.annotations.get(c.GCSFUSE_VOLUMES_ANNOTATION) != "true":
            # GKE's webhook injects the gcsfuse sidecar only into annotated pods; without it the mount never
            # serves and the pod cannot start (GKE: Mount Cloud Storage buckets as CSI ephemeral volumes).
            yield Problem(
                f"{here}.csi",
                f'Cloud Storage FUSE volumes need the pod annotation {c.GCSFUSE_VOLUMES_ANNOTATION}: "true" '
                f"(GKE injects the gcsfuse sidecar by it); add it to spec.pod.annotations",
            )
