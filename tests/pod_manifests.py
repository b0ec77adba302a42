"""The pod parts of a TPUJob (spec.trainer's container fields, spec.pod): manifests a real team writes, the
fields the operator sets and refuses (PROTECTED), and the rules Kubernetes would otherwise enforce only when
the operator creates the pods (POD_RULES). Each row: (id, manifest, field path the problem names, a fragment
of its message)."""

from __future__ import annotations

import copy
from typing import Any

from tests.manifests import base_job
from tpujob.api import constants as c

SIDECAR = {"name": "log-shipper", "image": "fluent/fluent-bit:3.0"}


def with_pod(**pod: Any) -> dict[str, Any]:
    return base_job(pod=pod)


def with_trainer(**fields: Any) -> dict[str, Any]:
    job = base_job()
    job["spec"]["trainer"].update(fields)
    return job


def sidecar(**fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(SIDECAR), **fields}


def secret_env(name: str = "HF_TOKEN") -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}


EMPTY_DIR = {"name": "scratch", "emptyDir": {}}

# A real team's pod: private image, a token from a Secret, data through Cloud Storage FUSE, a config file,
# /dev/shm in RAM, a native sidecar, a priority class, an extra node label and toleration.
TEAM_JOB: dict[str, Any] = base_job(
    "team",
    trainer={
        "image": "us-docker.pkg.dev/team/trainers/llm:1.4",
        "args": ["--config", "/etc/train/config.yaml"],
        "env": [
            {"name": "WANDB_PROJECT", "value": "llm"},
            secret_env(),
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TPU_MIN_LOG_LEVEL", "value": "0"},
        ],
        "envFrom": [{"configMapRef": {"name": "train-env"}, "prefix": "TRAIN_"}],
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "config", "mountPath": "/etc/train"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
        "serviceAccountName": "llm-trainer",
    },
    pod={
        "labels": {"team": "llm"},
        "annotations": {c.GCSFUSE_VOLUMES_ANNOTATION: "true", "gke-gcsfuse/memory-limit": "2Gi"},
        "priorityClassName": "training-high",
        "imagePullSecrets": [{"name": "artifact-registry"}],
        "volumes": [
            {
                "name": "data",
                "csi": {
                    "driver": c.GCSFUSE_CSI_DRIVER,
                    "readOnly": True,
                    "volumeAttributes": {"bucketName": "team-data", "mountOptions": "implicit-dirs"},
                },
            },
            {"name": "config", "configMap": {"name": "train-config"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
        ],
        "nodeSelector": {"team.example.com/pool": "llm"},
        "tolerations": [{"key": "team.example.com/dedicated", "operator": "Equal", "value": "llm"}],
        "initContainers": [
            {
                "name": "metrics-agent",
                "image": "otel/opentelemetry-collector:0.100.0",
                "restartPolicy": "Always",
            }
        ],
        "securityContext": {"fsGroup": 1000},
    },
)

_NODE_LABEL_FIELDS = {
    c.NODE_LABEL_ACCELERATOR: "spec.tpu.type",
    c.NODE_LABEL_TOPOLOGY: "spec.tpu.topology",
    c.NODE_LABEL_NODEPOOL: "spec.nodePool",
    c.NODE_LABEL_INSTANCE_TYPE: "spec.tpu.machineType",
    c.NODE_LABEL_SPOT: "spec.capacity.mode",
    c.NODE_LABEL_FLEX_START: "spec.capacity.mode",
}

PROTECTED: list[tuple[str, Any, str, str]] = [
    # The TPU chips are the trainer's, counted by the operator.
    (
        "tpu-chips-on-the-trainer",
        with_trainer(resources={"requests": {c.TPU_RESOURCE: "4"}}),
        "spec.trainer.resources.requests",
        "set by the operator from the topology",
    ),
    (
        "tpu-chips-on-a-sidecar",
        with_pod(containers=[sidecar(resources={"limits": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.containers[0].resources.limits",
        "google.com/tpu is the trainer's",
    ),
    (
        "tpu-chips-on-an-init-container",
        with_pod(initContainers=[sidecar(resources={"requests": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.initContainers[0].resources.requests",
        "google.com/tpu is the trainer's",
    ),
    # The node selector keys and tolerations the operator sets.
    *(
        (
            f"node-selector-{key.rsplit('/', 1)[-1]}",
            with_pod(nodeSelector={key: "x"}),
            "spec.pod.nodeSelector",
            f"the operator selects {key} from {field}",
        )
        for key, field in _NODE_LABEL_FIELDS.items()
    ),
    (
        "toleration-of-the-tpu-taint",
        with_pod(tolerations=[{"key": c.TPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]),
        "spec.pod.tolerations[0].key",
        "the operator tolerates it on every worker",
    ),
    (
        "toleration-of-the-spot-taint",
        with_pod(tolerations=[{"key": c.SPOT_TAINT_KEY, "operator": "Equal", "value": "true"}]),
        "spec.pod.tolerations[0].key",
        "when spec.capacity.mode is spot",
    ),
    # The operator's labels (it finds its pods by them) and its annotation prefix.
    *(
        (f"label-{key}", with_pod(labels={key: "x"}), "spec.pod.labels", f"{key}: tpujob.dev/* and")
        for key in (c.LABEL_JOB_NAME, c.LABEL_WORKER, "tpujob.dev/anything", c.LABEL_MANAGED_BY)
    ),
    (
        "annotation-in-the-operators-prefix",
        with_pod(annotations={"tpujob.dev/note": "x"}),
        "spec.pod.annotations",
        "are the operator's",
    ),
    # The worker env: TPU_*, MEGASCALE_*, TPUJOB_* on the trainer, also through an envFrom prefix.
    *(
        (
            f"env-{name}",
            with_trainer(env=[{"name": "OK", "value": "1"}, {"name": name, "value": "x"}]),
            "spec.trainer.env[1].name",
            f"{name} is set by the operator",
        )
        for name in (
            "TPU_WORKER_ID",
            "TPU_WORKER_HOSTNAMES",
            "TPU_ACCELERATOR_TYPE",
            "MEGASCALE_COORDINATOR_ADDRESS",
            "MEGASCALE_ANYTHING",
            "TPUJOB_ATTEMPT",
            "TPUJOB_NAME",
        )
    ),
    (
        "env-checkpoint-dir-names-its-field",
        with_trainer(env=[{"name": "TPUJOB_CHECKPOINT_DIR", "value": "gs://other"}]),
        "spec.trainer.env[0].name",
        "set spec.trainer.checkpointDir instead",
    ),
    (
        "env-export-dir-from-a-secret",
        with_trainer(env=[secret_env("TPUJOB_EXPORT_DIR")]),
        "spec.trainer.env[0].name",
        "set spec.trainer.exportDir instead",
    ),
    *(
        (
            f"env-from-prefix-{prefix}",
            with_trainer(envFrom=[{"prefix": prefix, "configMapRef": {"name": "cm"}}]),
            "spec.trainer.envFrom[0].prefix",
            "which the operator and libtpu own",
        )
        for prefix in ("TPU_", "MEGASCALE_X", "TPU", "MEGA")
    ),
    # The trainer's container name and ports.
    (
        "sidecar-named-trainer",
        with_pod(containers=[sidecar(name="trainer")]),
        "spec.pod.containers[0].name",
        "trainer is the trainer's container",
    ),
    (
        "init-container-named-trainer",
        with_pod(initContainers=[sidecar(name="trainer")]),
        "spec.pod.initContainers[0].name",
        "trainer is the trainer's container",
    ),
    *(
        (
            f"sidecar-port-{port}",
            with_pod(containers=[sidecar(ports=[{"containerPort": 2020}, {"containerPort": port}])]),
            "spec.pod.containers[0].ports[1].containerPort",
            f"{port} is the trainer's",
        )
        for port in (c.PORT_TPU_ICI, c.PORT_TF_WORKER, c.PORT_TPU_RUNTIME_METRICS, c.PORT_TRAINER_METRICS)
    ),
    (
        "native-sidecar-on-the-megascale-port",
        with_pod(
            initContainers=[sidecar(restartPolicy="Always", ports=[{"containerPort": c.PORT_MEGASCALE}])]
        ),
        "spec.pod.initContainers[0].ports[0].containerPort",
        "Megascale port",
    ),
    (
        "trainer-ports",
        with_trainer(ports=[{"containerPort": 8888}]),
        "spec.trainer.ports",
        "the operator sets the trainer's ports (8471, 8470",
    ),
    ("trainer-name", with_trainer(name="main"), "spec.trainer.name", "always named trainer"),
    # Pod fields the operator sets, or that spec.trainer holds.
    ("pod-hostname", with_pod(hostname="w0"), "spec.pod.hostname", "names each worker"),
    ("pod-subdomain", with_pod(subdomain="s"), "spec.pod.subdomain", "headless Service"),
    ("pod-restart-policy", with_pod(restartPolicy="OnFailure"), "spec.pod.restartPolicy", "sets Never"),
    ("pod-node-name", with_pod(nodeName="gke-node-1"), "spec.pod.nodeName", "spec.pod.nodeSelector"),
    ("pod-host-network", with_pod(hostNetwork=True), "spec.pod.hostNetwork", "set spec.trainer.hostNetwork"),
    # Host namespaces, profiles and kernel settings: no job gets them (Pod Security's baseline list).
    ("pod-host-pid", with_pod(hostPID=True), "spec.pod.hostPID", "never shares the node's process namespace"),
    ("pod-host-ipc", with_pod(hostIPC=True), "spec.pod.hostIPC", "never shares the node's IPC namespace"),
    (
        "sidecar-host-port",
        with_pod(containers=[sidecar(ports=[{"containerPort": 2020, "hostPort": 2020}])]),
        "spec.pod.containers[0].ports[0].hostPort",
        "refused: a host port is the node's",
    ),
    (
        "host-path-volume",
        with_pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        "spec.pod.volumes[0].hostPath",
        "refused: a hostPath volume reaches the node's filesystem",
    ),
    *(
        (
            f"{where}-{field}",
            fields,
            f"{path}.securityContext.{field}",
            "refused: ",
        )
        for field, value in (
            ("seccompProfile", {"type": "Unconfined"}),
            ("appArmorProfile", {"type": "Unconfined"}),
            ("seLinuxOptions", {"type": "spc_t"}),
            ("procMount", "Unmasked"),
            ("sysctls", [{"name": "kernel.shm_rmid_forced", "value": "0"}]),
            ("windowsOptions", {"hostProcess": True}),
        )
        for where, fields, path in (
            ("trainer", with_trainer(securityContext={field: value}), "spec.trainer"),
            ("pod", with_pod(securityContext={field: value}), "spec.pod"),
        )
    ),
    (
        "pod-service-account",
        with_pod(serviceAccountName="sa"),
        "spec.pod.serviceAccountName",
        "set spec.trainer.serviceAccountName",
    ),
    (
        "pod-service-account-deprecated-name",
        with_pod(serviceAccount="sa"),
        "spec.pod.serviceAccount",
        "set spec.trainer.serviceAccountName",
    ),
    ("pod-affinity", with_pod(affinity={}), "spec.pod.affinity", "the operator sets the node affinity"),
    (
        "pod-grace-period",
        with_pod(terminationGracePeriodSeconds=120),
        "spec.pod.terminationGracePeriodSeconds",
        "the notice a spot VM gets",
    ),
    ("pod-dns-policy", with_pod(dnsPolicy="Default"), "spec.pod.dnsPolicy", "ClusterFirstWithHostNet"),
    (
        "a-pod-template",
        base_job(template={"spec": {"containers": []}}),
        "spec.template",
        "the trainer's container is spec.trainer, the rest of the pod spec.pod",
    ),
]

POD_RULES: list[tuple[str, Any, str, str]] = [
    (
        "env-twice-on-the-trainer",
        with_trainer(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        "spec.trainer.env[1]",
        "A is set twice",
    ),
    (
        "env-twice-on-a-sidecar",
        with_pod(containers=[sidecar(env=[{"name": "A"}, secret_env("A")])]),
        "spec.pod.containers[0].env[1]",
        "A is set twice",
    ),
    (
        "env-value-and-value-from",
        with_trainer(env=[{**secret_env(), "value": "x"}]),
        "spec.trainer.env[0]",
        "set value or valueFrom, not both",
    ),
    (
        "env-value-from-nothing",
        with_trainer(env=[{"name": "A", "valueFrom": {}}]),
        "spec.trainer.env[0].valueFrom",
        "set exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef",
    ),
    (
        "env-value-from-two-sources",
        with_trainer(
            env=[
                {
                    "name": "A",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "m", "key": "k"},
                    },
                }
            ]
        ),
        "spec.trainer.env[0].valueFrom",
        "set exactly one of",
    ),
    (
        "env-field-the-downward-api-lacks",
        with_trainer(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]),
        "spec.trainer.env[0].valueFrom.fieldRef.fieldPath",
        "does not match",
    ),
    (
        "env-resource-of-an-unknown-container",
        with_trainer(
            env=[
                {
                    "name": "MEM",
                    "valueFrom": {"resourceFieldRef": {"containerName": "nope", "resource": "limits.memory"}},
                }
            ]
        ),
        "spec.trainer.env[0].valueFrom.resourceFieldRef.containerName",
        "no container nope in the pod; containers: trainer",
    ),
    (
        "env-from-nothing",
        with_trainer(envFrom=[{"prefix": "A_"}]),
        "spec.trainer.envFrom[0]",
        "set exactly one of secretRef or configMapRef",
    ),
    (
        "env-from-both",
        with_pod(containers=[sidecar(envFrom=[{"secretRef": {"name": "s"}, "configMapRef": {"name": "m"}}])]),
        "spec.pod.containers[0].envFrom[0]",
        "set exactly one of secretRef or configMapRef",
    ),
    (
        "secret-name-not-an-object-name",
        with_trainer(env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "My_Secret", "key": "k"}}}]),
        "spec.trainer.env[0].valueFrom.secretKeyRef.name",
        "must be a Kubernetes object name",
    ),
    (
        "mount-of-an-unknown-volume",
        with_trainer(volumeMounts=[{"name": "data", "mountPath": "/data"}]),
        "spec.trainer.volumeMounts",
        "data names no volume in spec.pod.volumes (volumes: none); add it",
    ),
    (
        "sidecar-mount-of-an-unknown-volume",
        base_job(
            pod={
                "volumes": [EMPTY_DIR],
                "containers": [sidecar(volumeMounts=[{"name": "x", "mountPath": "/x"}])],
            }
        ),
        "spec.pod.containers",
        "x names no volume in spec.pod.volumes (volumes: scratch)",
    ),
    (
        "one-path-mounted-twice",
        base_job(
            pod={"volumes": [EMPTY_DIR]},
            trainer={
                "image": "img:1",
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/s"},
                    {"name": "scratch", "mountPath": "/s"},
                ],
            },
        ),
        "spec.trainer.volumeMounts[1]",
        "/s is mounted twice",
    ),
    (
        "absolute-sub-path",
        base_job(
            pod={"volumes": [EMPTY_DIR]},
            trainer={
                "image": "img:1",
                "volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "/etc"}],
            },
        ),
        "spec.trainer.volumeMounts[0].subPath",
        "must be a relative path without '..'",
    ),
    (
        "two-volumes-one-name",
        with_pod(volumes=[EMPTY_DIR, {"name": "scratch", "configMap": {"name": "m"}}]),
        "spec.pod.volumes[1]",
        "scratch names two volumes",
    ),
    (
        "volume-without-a-source",
        with_pod(volumes=[{"name": "v"}]),
        "spec.pod.volumes[0]",
        "set exactly one of emptyDir, secret, configMap, persistentVolumeClaim or csi",
    ),
    (
        "volume-with-two-sources",
        with_pod(volumes=[{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]),
        "spec.pod.volumes[0]",
        "set exactly one of",
    ),
    (
        "secret-item-escapes-the-volume",
        with_pod(
            volumes=[{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}}]
        ),
        "spec.pod.volumes[0].secret.items[0].path",
        "without '..'",
    ),
    (
        "gcsfuse-without-the-annotation",
        with_pod(volumes=[{"name": "data", "csi": {"driver": c.GCSFUSE_CSI_DRIVER}}]),
        "spec.pod.annotations",
        'need the pod annotation gke-gcsfuse/volumes: "true"',
    ),
    (
        "gcsfuse-with-the-annotation-false",
        with_pod(
            annotations={c.GCSFUSE_VOLUMES_ANNOTATION: "false"},
            volumes=[{"name": "data", "csi": {"driver": c.GCSFUSE_CSI_DRIVER}}],
        ),
        "spec.pod.annotations",
        "add it to spec.pod.annotations",
    ),
    (
        "two-containers-one-name",
        with_pod(initContainers=[sidecar()], containers=[sidecar()]),
        "spec.pod.containers",
        "log-shipper names two containers",
    ),
    (
        "container-name-not-a-dns-label",
        with_pod(containers=[sidecar(name="Log_Shipper")]),
        "spec.pod.containers[0].name",
        "must be a DNS label",
    ),
    (
        "init-container-restart-policy-other-than-always",
        with_pod(initContainers=[sidecar(restartPolicy="OnFailure")]),
        "spec.pod.initContainers[0].restartPolicy",
        "'Always'",
    ),
    (
        "privileged-without-escalation",
        with_trainer(securityContext={"privileged": True, "allowPrivilegeEscalation": False}),
        "spec.trainer.securityContext",
        "allowPrivilegeEscalation false and privileged true cannot go together",
    ),
    (
        "sys-admin-without-escalation",
        with_pod(
            containers=[
                sidecar(
                    securityContext={
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"add": ["CAP_SYS_ADMIN"]},
                    }
                )
            ]
        ),
        "spec.pod.containers[0].securityContext",
        "adding CAP_SYS_ADMIN cannot go together",
    ),
    (
        "run-as-a-negative-user",
        with_pod(securityContext={"runAsUser": -1}),
        "spec.pod.securityContext.runAsUser",
        "greater than or equal to 0",
    ),
    (
        "label-key-with-a-space",
        with_pod(labels={"my team": "x"}),
        "spec.pod.labels.my team",
        "is not a valid label key",
    ),
    (
        "label-value-too-long",
        with_pod(labels={"team": "x" * 64}),
        "spec.pod.labels.team",
        "at most 63 characters",
    ),
    (
        "toleration-exists-with-a-value",
        with_pod(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "spec.pod.tolerations[0].value",
        "operator Exists takes no value",
    ),
    (
        "toleration-seconds-without-no-execute",
        with_pod(tolerations=[{"key": "k", "tolerationSeconds": 60, "effect": "NoSchedule"}]),
        "spec.pod.tolerations[0].tolerationSeconds",
        "only used with effect NoExecute",
    ),
    (
        "toleration-without-key",
        with_pod(tolerations=[{"operator": "Equal", "value": "v"}]),
        "spec.pod.tolerations[0].key",
        "a toleration without a key tolerates every taint",
    ),
    (
        "pull-secret-without-name",
        with_pod(imagePullSecrets=[{}]),
        "spec.pod.imagePullSecrets[0].name",
        "required",
    ),
    (
        "priority-class-not-an-object-name",
        with_pod(priorityClassName="High Priority"),
        "spec.pod.priorityClassName",
        "must be a Kubernetes object name",
    ),
]
