"""The rules of a job's pod parts (spec.trainer's container fields and spec.pod): what the operator sets is
refused with the reason and the field to use instead; names must exist and be unique; exactly one source
where Kubernetes takes one. What Kubernetes would refuse only when the operator creates the pods (a job
already holding its TPU slice) is refused here, with its field path, before anything is made.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

from tpujob.api import constants as c
from tpujob.api import messages as m
from tpujob.api import trainer_contract as contract
from tpujob.api.base import QUALIFIED_NAME_PATTERN, ApiModel, Problem
from tpujob.api.pod import (
    Container,
    ContainerPort,
    ContainerSecurityContext,
    EnvFromSource,
    EnvVar,
    PodSecurityContext,
    ResourceRequirements,
    VolumeMount,
    WorkerPodSpec,
)
from tpujob.api.spec import TPUJobSpec, TrainerSpec
from tpujob.api.volumes import KeyToPath, Volume

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
# The node labels of the operator's pools: its pod labels' prefix and the pools' own (GCE label rules).
OPERATOR_NODE_LABEL_PREFIXES = (OPERATOR_LABEL_PREFIX, c.POOL_LABEL_PREFIX)
# Pod annotations that pick a seccomp or AppArmor profile: seccomp's before Kubernetes 1.19 (ignored since
# 1.27), AppArmor's before 1.30 (still honoured; https://kubernetes.io/docs/tutorials/security/apparmor/).
# Their value "unconfined" lifts the profile; the operator's pods keep seccomp RuntimeDefault.
PROFILE_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/pod",)
PROFILE_ANNOTATION_PREFIXES = (
    "container.seccomp.security.alpha.kubernetes.io/",
    "container.apparmor.security.beta.kubernetes.io/",
)
UNCONFINED = "unconfined"
OPERATOR_LABELS_OWNED = f"{OPERATOR_LABEL_PREFIX}* and {c.LABEL_MANAGED_BY}"
OPERATOR_ANNOTATIONS_OWNED = f"{OPERATOR_LABEL_PREFIX}*"

OPERATOR_PORT_LIST = ", ".join(str(port) for port in OPERATOR_PORTS)
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
    **{
        (WorkerPodSpec, field): f"the operator never shares the node's {what} with a job's pods; remove it"
        for field, what in (("hostPID", "process namespace"), ("hostIPC", "IPC namespace"))
    },
    **{
        (model, field): f"refused: {why}; remove it"
        for model in (ContainerSecurityContext, PodSecurityContext)
        for field, why in (
            ("seccompProfile", "the operator runs every container with seccomp RuntimeDefault"),
            ("appArmorProfile", "the node's default AppArmor profile stays on every container"),
            ("seLinuxOptions", "SELinux labels are the node's"),
            ("procMount", "the default /proc mask stays"),
            ("sysctls", "sysctls change the node's kernel for every pod on it"),
            ("windowsOptions", "TPU nodes run Linux"),
        )
    },
    (ContainerPort, "hostPort"): "refused: a host port is the node's, shared with every pod on it; remove it "
    "(the pods' own ports reach each other through the job's Service)",
    (Volume, "hostPath"): "refused: a hostPath volume reaches the node's filesystem; use emptyDir, a "
    "PersistentVolumeClaim or a CSI volume",
    (TrainerSpec, "name"): f"the trainer's container is always named {c.TRAINER_CONTAINER}; remove it",
    (TrainerSpec, "ports"): f"the operator sets the trainer's ports ({OPERATOR_PORT_LIST}); remove it",
    (TPUJobSpec, "template"): "a TPUJob takes no pod template: the trainer's container is spec.trainer, the "
    "rest of the pod spec.pod (volumes, sidecars, labels, ...)",
}


def env_reserved(name: str) -> bool:
    """TPU_* and MEGASCALE_* (bar libtpu's log levels), and the TPUJOB_* names the operator sets; the other
    TPUJOB_* are the default trainer's settings."""
    if name in contract.OPERATOR_TPUJOB_ENV:
        return True
    return name.startswith(RESERVED_ENV_PREFIXES) and name not in USER_TPU_ENV


def operator_label(key: str) -> bool:
    """The pod labels the operator finds its pods by."""
    return key.startswith(OPERATOR_LABEL_PREFIX) or key == c.LABEL_MANAGED_BY


def operator_annotation(key: str) -> bool:
    return key.startswith(OPERATOR_LABEL_PREFIX)


def operator_node_label(key: str) -> bool:
    """The labels on the nodes of the operator's pools: another job's, whatever their value."""
    return key.startswith(OPERATOR_NODE_LABEL_PREFIXES)


def unconfined(annotations: Mapping[str, str]) -> list[str]:
    """The annotations that lift a container's seccomp or AppArmor profile."""
    return sorted(
        key
        for key, value in annotations.items()
        if value == UNCONFINED and (key in PROFILE_ANNOTATIONS or key.startswith(PROFILE_ANNOTATION_PREFIXES))
    )


def pod_problems(spec: TPUJobSpec) -> Iterator[Problem]:
    """Every problem of spec.trainer's container fields and of spec.pod. A name or path given twice is
    named by the second item, as the API server names it in a keyed list (x-kubernetes-list-map-keys)."""
    pod = spec.pod
    volumes = [volume.name for volume in pod.volumes]
    containers = [
        *((f"spec.pod.initContainers[{i}]", x) for i, x in enumerate(pod.init_containers)),
        *((f"spec.pod.containers[{i}]", x) for i, x in enumerate(pod.containers)),
    ]
    names = {c.TRAINER_CONTAINER, *(container.name for _, container in containers)}
    trainer = spec.trainer
    yield from _trainer_env_problems(trainer.env, trainer.env_from)
    yield from _container_problems("spec.trainer", trainer, names, trainer=True)
    # A mount of a missing volume is named by its list: the API server's rule, across spec.pod.volumes and
    # the list, can report no item of it (a CEL fieldPath takes no index).
    yield from _missing_volume_problems("spec.trainer.volumeMounts", [trainer], volumes)
    yield from _missing_volume_problems("spec.pod.initContainers", pod.init_containers, volumes)
    yield from _missing_volume_problems("spec.pod.containers", pod.containers, volumes)
    init_names = {container.name for container in pod.init_containers}
    across = next((x.name for x in pod.containers if x.name in init_names), None)
    if across is not None:  # named by the list, as the API server's rule on spec.pod names it
        yield Problem("spec.pod.containers", m.CONTAINER_NAME_TWICE.format(name=across))
    seen: dict[str, set[str]] = {}  # names by list: a keyed list's Duplicate value names the item
    for path, container in containers:
        in_list = seen.setdefault(path.rsplit("[", 1)[0], set())
        if container.name == c.TRAINER_CONTAINER:
            yield Problem(f"{path}.name", m.TRAINER_NAME_TAKEN.format(name=c.TRAINER_CONTAINER))
        elif container.name in in_list:
            yield Problem(path, m.CONTAINER_NAME_TWICE.format(name=container.name))
        in_list.add(container.name)
        yield from _container_problems(path, container, names, trainer=False)
        for index, port in enumerate(container.ports):
            if port.container_port in OPERATOR_PORTS:
                yield Problem(
                    f"{path}.ports[{index}].containerPort",
                    m.OPERATOR_PORT.format(
                        port=port.container_port,
                        what=OPERATOR_PORTS[port.container_port],
                        ports=OPERATOR_PORT_LIST,
                    ),
                )
    yield from _pod_problems(pod)


def _trainer_env_problems(env: Sequence[EnvVar], env_from: Sequence[EnvFromSource]) -> Iterator[Problem]:
    for index, var in enumerate(env):
        if env_reserved(var.name):
            setting = ENV_SETTINGS.get(var.name)
            fix = f"set {setting} instead" if setting else "remove it"
            yield Problem(f"spec.trainer.env[{index}].name", m.ENV_RESERVED.format(name=var.name, fix=fix))
    for index, source in enumerate(env_from):
        # The operator's own variables win over envFrom's (env beats envFrom in Kubernetes), but a TPU_ or
        # MEGASCALE_ prefix would hand libtpu variables the operator does not set.
        prefix = source.prefix or ""
        if prefix and any(prefix.startswith(p) or p.startswith(prefix) for p in RESERVED_ENV_PREFIXES):
            yield Problem(
                f"spec.trainer.envFrom[{index}].prefix", m.ENV_PREFIX_RESERVED.format(prefix=prefix)
            )


def _container_problems(
    path: str, container: TrainerSpec | Container, containers: set[str], *, trainer: bool
) -> Iterator[Problem]:
    yield from _resource_problems(f"{path}.resources", container.resources, trainer)
    yield from _env_problems(path, container.env, containers)
    for index, source in enumerate(container.env_from):
        if (source.secret_ref is None) == (source.config_map_ref is None):
            yield Problem(f"{path}.envFrom[{index}]", m.exactly_one(["secretRef", "configMapRef"]))
    yield from _mount_problems(path, container.volume_mounts)
    yield from _security_problems(f"{path}.securityContext", container.security_context)


def _resource_problems(path: str, resources: ResourceRequirements, trainer: bool) -> Iterator[Problem]:
    for section, quantities in (("requests", resources.requests), ("limits", resources.limits)):
        if c.TPU_RESOURCE in quantities:
            template = m.TPU_ON_TRAINER if trainer else m.TPU_ON_SIDECAR
            yield Problem(f"{path}.{section}", template.format(resource=c.TPU_RESOURCE))


def _env_problems(path: str, env: Sequence[EnvVar], containers: set[str]) -> Iterator[Problem]:
    seen: set[str] = set()
    for index, var in enumerate(env):
        here = f"{path}.env[{index}]"
        if var.name in seen:
            yield Problem(here, f"{var.name} is set twice; keep one")
        seen.add(var.name)
        source = var.value_from
        if source is None:
            continue
        if var.value is not None:
            yield Problem(here, m.VALUE_AND_VALUE_FROM)
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
        yield Problem(path, m.RELATIVE_PATH.format(path=value))


def _missing_volume_problems(
    path: str, containers: Sequence[TrainerSpec | Container], volumes: Sequence[str]
) -> Iterator[Problem]:
    """The first mount in these containers of a volume spec.pod.volumes lacks, as the API server names it."""
    missing = next((x.name for ct in containers for x in ct.volume_mounts if x.name not in volumes), None)
    if missing is not None:
        known = f"volumes: {', '.join(volumes) or 'none'}"
        yield Problem(path, m.NO_SUCH_VOLUME.format(name=missing, volumes=known))


def _mount_problems(path: str, mounts: Sequence[VolumeMount]) -> Iterator[Problem]:
    paths: set[str] = set()
    for index, mount in enumerate(mounts):
        here = f"{path}.volumeMounts[{index}]"
        if mount.mount_path in paths:
            yield Problem(here, f"{mount.mount_path} is mounted twice in this container")
        paths.add(mount.mount_path)
        if mount.sub_path:
            yield from _relative_path_problem(f"{here}.subPath", mount.sub_path)


def _security_problems(path: str, context: ContainerSecurityContext | None) -> Iterator[Problem]:
    """Kubernetes refuses a pod whose container cannot escalate yet is privileged or adds CAP_SYS_ADMIN
    (pkg/apis/core/validation ValidateSecurityContext)."""
    if context is None or context.allow_privilege_escalation is not False:
        return
    if context.privileged:
        yield Problem(path, m.NO_ESCALATION_BUT_PRIVILEGED)
    if "CAP_SYS_ADMIN" in ((context.capabilities and context.capabilities.add) or []):
        yield Problem(path, m.NO_ESCALATION_BUT_SYS_ADMIN)


def _qualified_name_problems(path: str, key: str, what: str) -> Iterator[Problem]:
    prefix, _, name = key.rpartition("/")
    if len(name) > 63 or len(prefix) > 253 or not re.match(QUALIFIED_NAME_PATTERN, key):
        yield Problem(path, m.QUALIFIED_KEY.format(key=key, what=what))


def _key_problems(path: str, keys: Mapping[str, str], what: str) -> Iterator[Problem]:
    for key in keys:
        yield from _qualified_name_problems(f"{path}.{key}", key, what)


def _pod_problems(pod: WorkerPodSpec) -> Iterator[Problem]:
    yield from _key_problems("spec.pod.labels", pod.labels, "label")
    yield from _key_problems("spec.pod.annotations", pod.annotations, "annotation")
    yield from _key_problems("spec.pod.nodeSelector", pod.node_selector, "label")
    # The operator's keys are named by their map (the API server's rule on a map can report no key of it).
    for section, owned, keys in (
        ("labels", OPERATOR_LABELS_OWNED, [k for k in pod.labels if operator_label(k)]),
        ("annotations", OPERATOR_ANNOTATIONS_OWNED, [k for k in pod.annotations if operator_annotation(k)]),
    ):
        if keys:
            yield Problem(
                f"spec.pod.{section}", f"{', '.join(sorted(keys))}: {m.OPERATOR_KEYS.format(owned=owned)}"
            )
    selected = next((key for key in pod.node_selector if key in OPERATOR_NODE_LABELS), None)
    if selected is not None:
        yield Problem(
            "spec.pod.nodeSelector",
            m.OPERATOR_NODE_LABEL.format(key=selected, field=OPERATOR_NODE_LABELS[selected]),
        )
    if others := sorted(key for key in pod.node_selector if operator_node_label(key)):
        yield Problem("spec.pod.nodeSelector", m.OPERATOR_NODE_LABEL_PREFIX.format(keys=", ".join(others)))
    if lifted := unconfined(pod.annotations):
        yield Problem("spec.pod.annotations", m.UNCONFINED_PROFILE.format(keys=", ".join(lifted)))
    for index, toleration in enumerate(pod.tolerations):
        here = f"spec.pod.tolerations[{index}]"
        if toleration.key in OPERATOR_TAINTS:
            yield Problem(
                f"{here}.key",
                m.OPERATOR_TAINT.format(key=toleration.key, why=OPERATOR_TAINTS[toleration.key]),
            )
        elif toleration.key and toleration.key.startswith(OPERATOR_LABEL_PREFIX):
            yield Problem(f"{here}.key", m.OPERATOR_TAINT_PREFIX)
        if toleration.key:
            yield from _qualified_name_problems(f"{here}.key", toleration.key, "toleration")
        else:
            yield Problem(f"{here}.key", m.TOLERATION_WITHOUT_KEY)
        if toleration.operator == "Exists" and toleration.value:
            yield Problem(f"{here}.value", m.EXISTS_WITH_VALUE)
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            yield Problem(f"{here}.tolerationSeconds", m.SECONDS_WITHOUT_NO_EXECUTE)
    yield from _volume_problems(pod)


def _exactly_one(path: str, **sources: object) -> Iterator[Problem]:
    """Kubernetes takes one source where it lists several (an env var's valueFrom, a volume)."""
    if sum(source is not None for source in sources.values()) != 1:
        yield Problem(path, m.exactly_one(list(sources)))


def _volume_problems(pod: WorkerPodSpec) -> Iterator[Problem]:
    seen: set[str] = set()
    for index, volume in enumerate(pod.volumes):
        here = f"spec.pod.volumes[{index}]"
        if volume.name in seen:
            yield Problem(here, f"{volume.name} names two volumes; volume names are unique")
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
    gcsfuse = any(v.csi is not None and v.csi.driver == c.GCSFUSE_CSI_DRIVER for v in pod.volumes)
    if gcsfuse and pod.annotations.get(c.GCSFUSE_VOLUMES_ANNOTATION) != "true":
        # GKE's webhook injects the gcsfuse sidecar only into annotated pods; without it the mount never
        # serves and the pod cannot start (GKE: Mount Cloud Storage buckets as CSI ephemeral volumes). Named
        # where the fix goes, as the API server's rule names it.
        yield Problem(
            "spec.pod.annotations", m.GCSFUSE_ANNOTATION.format(annotation=c.GCSFUSE_VOLUMES_ANNOTATION)
        )
