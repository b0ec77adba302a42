"""What `kubectl apply` of a TPUJob answers: one table for the API server (its schema and CEL rules) and the
operator (`parse_tpujob`), which must give the same verdict and name the same field.

Each case is one whole manifest with at most one fault. `refused_at` is the field path both report (the API
server in `details.causes[].field`, the operator in `Problem.path`); None: accepted. `message_part` is in
both messages: the CEL rules use the operator's own templates, so for them it is the operator's words; for a
schema refusal (enum, pattern, bounds) it is what both quote (the value, the bound).

tests/unit/test_apply_cases.py runs every case through the operator, tests/unit/test_cel.py through the
CRD's CEL rules (and fails when a rule has no case it refuses), an e2e test through a real API server.
Unknown fields are not here: the API server refuses them under strict field validation and prunes them
otherwise, so the verdict depends on the client's mode (the operator refuses them always).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.manifests import base_job
from tests.pod_manifests import SIDECAR, TEAM_JOB
from tpujob.api import constants as c
from tpujob.api.pod_validation import OPERATOR_NODE_LABELS

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


@dataclass(frozen=True)
class Case:
    name: str
    manifest: dict[str, Any]
    refused_at: str | None = None
    message_part: str = ""


JAX_IMAGE = "us-docker.pkg.dev/my-project/trainers/maxtext:latest"
GCSFUSE_VOLUME = {
    "name": "data",
    "csi": {"driver": c.GCSFUSE_CSI_DRIVER, "volumeAttributes": {"bucketName": "team-data"}},
}
SCRATCH = {"name": "scratch", "emptyDir": {}}
APPARMOR = "container.apparmor.security.beta.kubernetes.io/"


def job(**spec: Any) -> dict[str, Any]:
    return base_job("train", **spec)


def tpu(type_: str, topology: str, **more: Any) -> dict[str, Any]:
    return job(tpu={"type": type_, "topology": topology, **more})


def trainer(**fields: Any) -> dict[str, Any]:
    manifest = job()
    manifest["spec"]["trainer"].update(fields)
    return manifest


def pod(trainer_fields: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    manifest = job(pod=fields)
    manifest["spec"]["trainer"].update(trainer_fields or {})
    return manifest


def sidecar(**fields: Any) -> dict[str, Any]:
    return {**copy.deepcopy(SIDECAR), **fields}


def failure_rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return job(runPolicy={"failurePolicy": {"rules": list(rules)}})


def _examples() -> list[Case]:
    return [
        Case(f"example-{path.stem}", yaml.safe_load(path.read_text()))
        for path in sorted(EXAMPLES_DIR.glob("*.yaml"))
    ]


FAIL_ON_CONFIG = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}}
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
TPU7X_JOB = job(
    tpu={"type": "tpu7x", "topology": "2x2x2"},
    nodePool={"workloadPolicy": "ironwood-wp"},
    trainer={"image": JAX_IMAGE},
)

ACCEPTED: list[Case] = [
    *_examples(),
    Case("team-job", TEAM_JOB),
    Case("tpu7x-multi-host-with-workload-policy", TPU7X_JOB),
    Case("tpu7x-one-chip-jax", job(tpu={"type": "tpu7x", "topology": "1x1x1"}, trainer={"image": JAX_IMAGE})),
    Case("v4-large-shape-any-order", tpu("v4", "8x4x4")),
    Case("v5p-large-shape", tpu("v5p", "4x4x8")),
    Case("v5e-largest", tpu("v5e", "16x16")),
    Case("v6e-2x4-multislice-of-4-chip-hosts", tpu("v6e", "2x4", slices=2, machineType="ct6e-standard-4t")),
    Case("v5e-2x4-one-8-chip-host", tpu("v5e", "2x4", machineType="ct5lp-hightpu-8t")),
    Case("v5p-multislice", tpu("v5p", "2x2x2", slices=4)),
    Case("name-48-characters", base_job("n" * 48)),
    Case(
        "shared-reservation",
        job(capacity={"mode": "reservation", "reservation": "projects/other-project/reservations/r-1"}),
    ),
    Case("flex-start-default-duration", job(capacity={"mode": "flexStart"})),
    Case("zone-list", job(capacity={"zones": ["us-central1-a", "us-west1-c"]})),
    Case("existing-pools", job(nodePool={"policy": "existing"})),
    Case("failure-rules", failure_rules(FAIL_ON_CONFIG, IGNORE_DISRUPTION)),
    Case(
        "not-in-with-zero",
        failure_rules({"action": "Ignore", "onExitCodes": {"operator": "NotIn", "values": [0, 1]}}),
    ),
    Case("libtpu-log-level", trainer(env=[{"name": "TPU_MIN_LOG_LEVEL", "value": "0"}])),
    Case("env-from-own-prefix", trainer(envFrom=[{"prefix": "TRAIN_", "configMapRef": {"name": "cm"}}])),
    Case("sidecar-own-port", pod(containers=[sidecar(ports=[{"containerPort": 2020}])])),
    Case(
        "relative-sub-path",
        pod(
            {"volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "a/b..c"}]}, volumes=[SCRATCH]
        ),
    ),
    Case("toleration-by-key", pod(tolerations=[{"key": "team.example.com/pool", "operator": "Exists"}])),
    Case("apparmor-runtime-default", pod(annotations={f"{APPARMOR}log-shipper": "runtime/default"})),
    Case(
        "toleration-no-execute-seconds",
        pod(tolerations=[{"key": "k", "effect": "NoExecute", "tolerationSeconds": 60}]),
    ),
    Case(
        "own-labels-and-selector", pod(labels={"team": "llm"}, nodeSelector={"team.example.com/pool": "llm"})
    ),
    Case("escalation-unset-privileged", pod(containers=[sidecar(securityContext={"privileged": True})])),
]


def refused(name: str, manifest: dict[str, Any], at: str, part: str) -> Case:
    return Case(name, manifest, at, part)


TOPOLOGY = "spec.tpu.topology"
MACHINE = "spec.tpu.machineType"

REFUSED: list[Case] = [
    # spec.tpu: the catalog
    refused(
        "v5e-topology-that-does-not-exist",
        tpu("v5e", "3x3"),
        TOPOLOGY,
        "'3x3' is not a v5e topology; valid: 1x1, 2x2",
    ),
    refused("v6e-topology-that-does-not-exist", tpu("v6e", "4x2"), TOPOLOGY, "'4x2' is not a v6e topology"),
    refused(
        "v5e-3d-topology", tpu("v5e", "2x2x1"), TOPOLOGY, "'2x2x1' is not a v5e topology: v5e takes AxB (2D)"
    ),
    refused("v5p-2d-topology", tpu("v5p", "2x2"), TOPOLOGY, "v5p takes AxBxC (3D)"),
    refused("tpu7x-2d-topology", tpu("tpu7x", "2x2"), TOPOLOGY, "tpu7x takes AxBxC (3D)"),
    refused("v4-2d-topology", tpu("v4", "4x4"), TOPOLOGY, "v4 takes AxBxC (3D)"),
    refused(
        "v5e-too-large",
        tpu("v5e", "16x32"),
        TOPOLOGY,
        "chips, more than the largest v5e slice (256 chips); use more slices instead",
    ),
    refused(
        "v5p-too-large",
        tpu("v5p", "16x16x64"),
        TOPOLOGY,
        "chips, more than the largest v5p slice (8960 chips)",
    ),
    refused("v5p-descending", tpu("v5p", "4x2x2"), TOPOLOGY, "'4x2x2' is not a v5p topology"),
    refused("v4-not-multiples-of-4", tpu("v4", "4x4x6"), TOPOLOGY, "'4x4x6' is not a v4 topology; valid:"),
    refused("topology-not-a-topology", tpu("v5e", "big"), TOPOLOGY, "big"),
    refused(
        "machine-type-of-another-type",
        tpu("v5e", "2x2", machineType="ct4p-hightpu-4t"),
        MACHINE,
        "'ct4p-hightpu-4t' is not a v5e machine type; valid: ct5lp-hightpu-1t",
    ),
    refused(
        "one-chip-machine-on-2x2",
        tpu("v5e", "2x2", machineType="ct5lp-hightpu-1t"),
        MACHINE,
        "ct5lp-hightpu-1t has 1 chip and serves only topology 1x1, not 2x2",
    ),
    refused(
        "tpu7x-one-chip-machine-on-2x2x1",
        tpu("tpu7x", "2x2x1", machineType="tpu7x-standard-1t"),
        MACHINE,
        "serves only topology 1x1x1, not 2x2x1",
    ),
    refused(
        "eight-chip-machine-on-4x4",
        tpu("v6e", "4x4", machineType="ct6e-standard-8t"),
        MACHINE,
        "ct6e-standard-8t has 8 chips and serves only topology 2x4, not 4x4",
    ),
    refused(
        "four-chip-machine-on-1x1",
        tpu("v5e", "1x1", machineType="ct5lp-hightpu-4t"),
        MACHINE,
        "ct5lp-hightpu-4t has 4 chips and cannot serve topology 1x1",
    ),
    refused(
        "multislice-of-single-host-slices",
        tpu("v5e", "2x2", slices=2),
        "spec.tpu.slices",
        "2 slices need multi-host slices, but 2x2 is one ct5lp-hightpu-4t host; use a larger topology or "
        "slices: 1",
    ),
    refused(
        "multislice-of-one-8-chip-host",
        tpu("v6e", "2x4", slices=4),
        "spec.tpu.slices",
        "set spec.tpu.machineType: ct6e-standard-4t (2 hosts of 4 chips)",
    ),
    refused(
        "multislice-of-v5p-2x2x1",
        tpu("v5p", "2x2x1", slices=2),
        "spec.tpu.slices",
        "2x2x1 is one ct5p-hightpu-4t host",
    ),
    refused("slices-zero", tpu("v5e", "4x4", slices=0), "spec.tpu.slices", "greater than or equal to 1"),
    refused("slices-over-64", tpu("v5e", "4x4", slices=65), "spec.tpu.slices", "less than or equal to 64"),
    refused("tpu-type-that-does-not-exist", tpu("v3", "2x2x1"), "spec.tpu.type", "v3"),
    refused(
        "tensorflow-trainer-on-tpu7x",
        tpu("tpu7x", "1x1x1"),
        "spec.trainer.image",
        "'tpujob-trainer:test' is the TensorFlow trainer, and TensorFlow does not run on tpu7x",
    ),
    refused(
        "tpu7x-multi-host-without-workload-policy",
        job(tpu={"type": "tpu7x", "topology": "2x2x2"}, trainer={"image": JAX_IMAGE}),
        "spec.nodePool.workloadPolicy",
        "multi-host tpu7x pools are placed by a workload policy: name one",
    ),
    refused(
        "workload-policy-on-v5e",
        job(nodePool={"workloadPolicy": "wp-1"}),
        "spec.nodePool.workloadPolicy",
        "only used for multi-host tpu7x pools",
    ),
    refused(
        "workload-policy-on-existing-pools",
        job(
            tpu={"type": "tpu7x", "topology": "2x2x2"},
            trainer={"image": JAX_IMAGE},
            nodePool={"policy": "existing", "workloadPolicy": "wp-1"},
        ),
        "spec.nodePool.workloadPolicy",
        "only used for multi-host tpu7x pools made by the operator (policy create)",
    ),
    # metadata
    refused(
        "name-too-long",
        base_job("llm-pretraining-v6e-multislice-2025-06-01-retry-3"),
        "metadata.name",
        "is longer than 48 characters",
    ),
    # spec.capacity and spec.nodePool
    refused(
        "reservation-mode-without-reservation",
        job(capacity={"mode": "reservation"}),
        "spec.capacity.reservation",
        "required when mode is reservation",
    ),
    refused(
        "reservation-with-spot",
        job(capacity={"mode": "spot", "reservation": "r1"}),
        "spec.capacity.reservation",
        "only used when mode is reservation (mode is spot)",
    ),
    refused(
        "reservation-without-mode",
        job(capacity={"reservation": "my-v5e-reservation"}),
        "spec.capacity.reservation",
        "(mode is onDemand); remove it or set mode: reservation",
    ),
    refused(
        "run-duration-with-spot",
        job(capacity={"mode": "spot", "maxRunDurationSeconds": 3600}),
        "spec.capacity.maxRunDurationSeconds",
        "only used when mode is flexStart (mode is spot)",
    ),
    refused(
        "run-duration-without-mode",
        job(capacity={"maxRunDurationSeconds": 86400}),
        "spec.capacity.maxRunDurationSeconds",
        "(mode is onDemand)",
    ),
    refused(
        "run-duration-over-7-days",
        job(capacity={"mode": "flexStart", "maxRunDurationSeconds": 8 * 86400}),
        "spec.capacity.maxRunDurationSeconds",
        "less than or equal to 604800",
    ),
    refused(
        "flex-start-on-v4",
        job(tpu={"type": "v4", "topology": "2x2x2"}, capacity={"mode": "flexStart"}),
        "spec.capacity.mode",
        "flexStart offers v5e, v5p, v6e, tpu7x TPUs, not v4",
    ),
    refused(
        "capacity-mode-that-does-not-exist",
        job(capacity={"mode": "preemptible"}),
        "spec.capacity.mode",
        "preemptible",
    ),
    refused(
        "zone-with-existing-pools",
        job(nodePool={"policy": "existing", "zone": "us-central1-a"}),
        "spec.nodePool.zone",
        "only used with policy create; remove it",
    ),
    refused(
        "zones-with-existing-pools",
        job(nodePool={"policy": "existing"}, capacity={"zones": ["us-central1-a"]}),
        "spec.capacity.zones",
        "only used with policy create; remove it",
    ),
    refused(
        "zone-and-zones",
        job(nodePool={"zone": "us-central1-a"}, capacity={"zones": ["us-west1-c"]}),
        "spec.capacity.zones",
        "set either spec.nodePool.zone (one zone) or spec.capacity.zones, not both",
    ),
    refused(
        "zone-without-the-tpu-type",
        job(nodePool={"zone": "us-central1-b"}),
        "spec.nodePool.zone",
        "us-central1-b does not offer v5e TPUs; zones that do: us-central1-a",
    ),
    refused("region-as-zone", job(nodePool={"zone": "us-central1"}), "spec.nodePool.zone", "us-central1"),
    refused(
        "oauth-scopes-from-a-job",
        job(nodePool={"oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"]}),
        "spec.nodePool.oauthScopes",
        "node pools' OAuth scopes are the operator's setting (the chart's gke.nodeOAuthScopes), not a job's",
    ),
    refused(
        "too-many-zones", job(capacity={"zones": ["us-central1-a"] * 11}), "spec.capacity.zones", "10 items"
    ),
    # spec.runPolicy.failurePolicy
    refused(
        "failure-rule-with-both-matchers",
        failure_rules({**FAIL_ON_CONFIG, **IGNORE_DISRUPTION}),
        "spec.runPolicy.failurePolicy.rules[0]",
        "set exactly one of onExitCodes or onPodConditions (both given)",
    ),
    refused(
        "failure-rule-without-matcher",
        failure_rules(FAIL_ON_CONFIG, {"action": "Count"}),
        "spec.runPolicy.failurePolicy.rules[1]",
        "(neither given)",
    ),
    refused(
        "exit-code-zero-with-in",
        failure_rules({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 0]}}),
        "spec.runPolicy.failurePolicy.rules[0].onExitCodes.values",
        "0 is not allowed with operator In",
    ),
    refused(
        "exit-code-listed-twice",
        failure_rules({"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2, 3, 2]}}),
        "spec.runPolicy.failurePolicy.rules[0].onExitCodes.values",
        "listed more than once; list each exit code once",
    ),
    refused(
        "too-many-failure-rules",
        failure_rules(*[FAIL_ON_CONFIG] * 21),
        "spec.runPolicy.failurePolicy.rules",
        "20 items",
    ),
    # spec.trainer
    refused(
        "reserved-env-name",
        trainer(env=[{"name": "TPU_WORKER_ID", "value": "3"}]),
        "spec.trainer.env[0].name",
        "TPU_WORKER_ID is set by the operator",
    ),
    refused(
        "reserved-megascale-env",
        trainer(env=[{"name": "A", "value": "1"}, {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": "h"}]),
        "spec.trainer.env[1].name",
        "MEGASCALE_COORDINATOR_ADDRESS is set by the operator",
    ),
    refused(
        "reserved-tpujob-env",
        trainer(env=[{"name": "TPUJOB_NAME", "value": "x"}]),
        "spec.trainer.env[0].name",
        "TPUJOB_NAME is set by the operator",
    ),
    refused(
        "checkpoint-dir-as-env",
        trainer(env=[{"name": "TPUJOB_CHECKPOINT_DIR", "value": "gs://b/c"}]),
        "spec.trainer.env[0].name",
        "set spec.trainer.checkpointDir instead",
    ),
    refused(
        "reserved-env-prefix",
        trainer(envFrom=[{"prefix": "TPU_", "configMapRef": {"name": "cm"}}]),
        "spec.trainer.envFrom[0].prefix",
        "'TPU_' would name variables TPU_* or MEGASCALE_*",
    ),
    refused(
        "env-prefix-of-a-reserved-prefix",
        trainer(envFrom=[{"prefix": "MEGA", "configMapRef": {"name": "cm"}}]),
        "spec.trainer.envFrom[0].prefix",
        "would name variables",
    ),
    refused(
        "env-value-and-value-from",
        trainer(env=[{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]),
        "spec.trainer.env[0]",
        "set value or valueFrom, not both",
    ),
    refused(
        "env-value-from-nothing",
        trainer(env=[{"name": "A", "valueFrom": {}}]),
        "spec.trainer.env[0].valueFrom",
        "set exactly one of secretKeyRef, configMapKeyRef, fieldRef or resourceFieldRef",
    ),
    refused(
        "env-from-nothing",
        trainer(envFrom=[{"prefix": "A_"}]),
        "spec.trainer.envFrom[0]",
        "set exactly one of secretRef or configMapRef",
    ),
    refused(
        "tpu-chips-on-the-trainer",
        trainer(resources={"limits": {c.TPU_RESOURCE: "4"}}),
        "spec.trainer.resources.limits",
        "google.com/tpu is set by the operator from the topology",
    ),
    refused(
        "trainer-cap-sys-admin-without-escalation",
        trainer(
            securityContext={"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_SYS_ADMIN"]}}
        ),
        "spec.trainer.securityContext",
        "adding CAP_SYS_ADMIN cannot go together",
    ),
    refused(
        "mount-of-an-undeclared-volume",
        trainer(volumeMounts=[{"name": "data", "mountPath": "/data"}]),
        "spec.trainer.volumeMounts",
        "names no volume in spec.pod.volumes (",
    ),
    refused(
        "absolute-sub-path",
        pod({"volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "/etc"}]}, volumes=[SCRATCH]),
        "spec.trainer.volumeMounts[0].subPath",
        "'/etc' must be a relative path without '..'",
    ),
    refused(
        "sub-path-up",
        pod(
            {"volumeMounts": [{"name": "scratch", "mountPath": "/s", "subPath": "a/../../etc"}]},
            volumes=[SCRATCH],
        ),
        "spec.trainer.volumeMounts[0].subPath",
        "must be a relative path without '..'",
    ),
    refused(
        "image-pull-policy-that-does-not-exist",
        trainer(imagePullPolicy="Sometimes"),
        "spec.trainer.imagePullPolicy",
        "Sometimes",
    ),
    # spec.pod
    refused(
        "sidecar-named-trainer",
        pod(containers=[sidecar(name="trainer")]),
        "spec.pod.containers[0].name",
        "trainer is the trainer's container; name it otherwise",
    ),
    refused(
        "init-container-named-trainer",
        pod(initContainers=[sidecar(name="trainer")]),
        "spec.pod.initContainers[0].name",
        "trainer is the trainer's container",
    ),
    refused(
        "tpu-chips-on-a-sidecar",
        pod(containers=[sidecar(resources={"limits": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.containers[0].resources.limits",
        "google.com/tpu is the trainer's",
    ),
    refused(
        "tpu-chips-on-an-init-container",
        pod(initContainers=[sidecar(resources={"requests": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.initContainers[0].resources.requests",
        "google.com/tpu is the trainer's",
    ),
    refused(
        "sidecar-on-the-ici-port",
        pod(containers=[sidecar(ports=[{"containerPort": 2020}, {"containerPort": c.PORT_TPU_ICI}])]),
        "spec.pod.containers[0].ports[1].containerPort",
        "8471 is the trainer's TPU ICI port",
    ),
    refused(
        "native-sidecar-on-the-megascale-port",
        pod(initContainers=[sidecar(restartPolicy="Always", ports=[{"containerPort": c.PORT_MEGASCALE}])]),
        "spec.pod.initContainers[0].ports[0].containerPort",
        "8080 is the trainer's Megascale port",
    ),
    refused(
        "sidecar-privileged-without-escalation",
        pod(containers=[sidecar(securityContext={"allowPrivilegeEscalation": False, "privileged": True})]),
        "spec.pod.containers[0].securityContext",
        "privileged true cannot go together",
    ),
    refused(
        "sidecar-env-from-both",
        pod(containers=[sidecar(envFrom=[{"secretRef": {"name": "s"}, "configMapRef": {"name": "m"}}])]),
        "spec.pod.containers[0].envFrom[0]",
        "set exactly one of secretRef or configMapRef",
    ),
    refused(
        "sidecar-mount-of-an-undeclared-volume",
        pod(volumes=[SCRATCH], containers=[sidecar(volumeMounts=[{"name": "x", "mountPath": "/x"}])]),
        "spec.pod.containers",
        "names no volume in spec.pod.volumes (",
    ),
    refused(
        "init-container-mount-of-an-undeclared-volume",
        pod(initContainers=[sidecar(volumeMounts=[{"name": "cache", "mountPath": "/c"}])]),
        "spec.pod.initContainers",
        "names no volume in spec.pod.volumes (",
    ),
    refused(
        "gcsfuse-volume-without-its-annotation",
        pod({"volumeMounts": [{"name": "data", "mountPath": "/data"}]}, volumes=[GCSFUSE_VOLUME]),
        "spec.pod.annotations",
        'need the pod annotation gke-gcsfuse/volumes: "true"',
    ),
    refused(
        "gcsfuse-annotation-false",
        pod(volumes=[GCSFUSE_VOLUME], annotations={c.GCSFUSE_VOLUMES_ANNOTATION: "false"}),
        "spec.pod.annotations",
        "Cloud Storage FUSE volumes need the pod annotation",
    ),
    refused(
        "volume-without-a-source",
        pod(volumes=[{"name": "v"}]),
        "spec.pod.volumes[0]",
        "set exactly one of emptyDir, secret, configMap, persistentVolumeClaim or csi",
    ),
    refused(
        "volume-with-two-sources",
        pod(volumes=[{"name": "v", "emptyDir": {}, "secret": {"secretName": "s"}}]),
        "spec.pod.volumes[0]",
        "set exactly one of emptyDir",
    ),
    refused(
        "secret-item-path-up",
        pod(volumes=[{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}}]),
        "spec.pod.volumes[0].secret.items[0].path",
        "'../k' must be a relative path",
    ),
    refused(
        "reserved-label",
        pod(labels={c.LABEL_WORKER: "0"}),
        "spec.pod.labels",
        "tpujob.dev/* and app.kubernetes.io/managed-by are the operator's",
    ),
    refused(
        "managed-by-label",
        pod(labels={c.LABEL_MANAGED_BY: "me"}),
        "spec.pod.labels",
        "tpujob.dev/* and app.kubernetes.io/managed-by are the operator's: it finds its pods by them",
    ),
    # Sizes: what the API server stores, Kubernetes makes a pod of (a pod's annotations take 256 KiB at most)
    # and Linux execs (one variable fits 128 KiB): refused at apply, not after the pools exist.
    refused(
        "annotation-of-300-kb",
        pod(annotations={"note": "x" * 300_000}),
        "spec.pod.annotations.note",
        "3072",
    ),
    refused(
        "env-value-longer-than-linux-takes",
        trainer(env=[{"name": "BLOB", "value": "x" * 140_000}]),
        "spec.trainer.env[0].value",
        "130814",
    ),
    refused(
        "reserved-annotation",
        pod(annotations={"tpujob.dev/note": "x"}),
        "spec.pod.annotations",
        "tpujob.dev/* are the operator's",
    ),
    refused(
        "tpu-node-selector",
        pod(nodeSelector={c.NODE_LABEL_TOPOLOGY: "4x4"}),
        "spec.pod.nodeSelector",
        "the operator selects cloud.google.com/gke-tpu-topology from spec.tpu.topology",
    ),
    *(
        refused(
            f"node-selector-{key.rsplit('/', 1)[-1]}",
            pod(nodeSelector={key: "x"}),
            "spec.pod.nodeSelector",
            f"the operator selects {key} from {field}; set that instead",
        )
        for key, field in OPERATOR_NODE_LABELS.items()
        if key != c.NODE_LABEL_TOPOLOGY
    ),
    refused(
        "toleration-of-the-tpu-taint",
        pod(tolerations=[{"key": c.TPU_TAINT_KEY, "operator": "Exists"}]),
        "spec.pod.tolerations[0].key",
        "google.com/tpu: the operator tolerates it on every worker",
    ),
    refused(
        "toleration-of-the-spot-taint",
        pod(tolerations=[{"key": c.SPOT_TAINT_KEY, "operator": "Equal", "value": "true"}]),
        "spec.pod.tolerations[0].key",
        "when spec.capacity.mode is spot",
    ),
    # names given twice in a keyed list (the API server: Duplicate value)
    refused(
        "env-set-twice",
        trainer(env=[{"name": "HF_TOKEN", "value": "a"}, {"name": "HF_TOKEN", "value": "b"}]),
        "spec.trainer.env[1]",
        "HF_TOKEN",
    ),
    refused(
        "sidecar-env-set-twice",
        pod(containers=[sidecar(env=[{"name": "LOG_LEVEL", "value": "1"}, {"name": "LOG_LEVEL"}])]),
        "spec.pod.containers[0].env[1]",
        "LOG_LEVEL",
    ),
    refused(
        "path-mounted-twice",
        pod(
            {
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/data"},
                    {"name": "scratch", "mountPath": "/data"},
                ]
            },
            volumes=[SCRATCH],
        ),
        "spec.trainer.volumeMounts[1]",
        "/data",
    ),
    refused(
        "volume-declared-twice",
        pod(volumes=[SCRATCH, {"name": "scratch", "emptyDir": {"medium": "Memory"}}]),
        "spec.pod.volumes[1]",
        "scratch",
    ),
    refused(
        "two-sidecars-one-name",
        pod(containers=[sidecar(), sidecar(image="busybox:1")]),
        "spec.pod.containers[1]",
        "log-shipper",
    ),
    refused(
        "sidecar-named-like-an-init-container",
        pod(initContainers=[sidecar()], containers=[sidecar()]),
        "spec.pod.containers",
        "names two containers; container names are unique in the pod",
    ),
    refused(
        "toleration-key-not-a-name",
        pod(tolerations=[{"key": "dedicated team", "operator": "Exists"}]),
        "spec.pod.tolerations[0].key",
        "'dedicated team' is not a valid toleration key",
    ),
    refused(
        "toleration-key-name-too-long",
        pod(tolerations=[{"key": "example.com/" + "n" * 64, "operator": "Exists"}]),
        "spec.pod.tolerations[0].key",
        "is not a valid toleration key: an optional DNS subdomain and '/', then at most 63",
    ),
    refused(
        "toleration-without-key-or-exists",
        pod(tolerations=[{"operator": "Equal", "value": "x"}]),
        "spec.pod.tolerations[0].key",
        "a toleration without a key tolerates every taint",
    ),
    # Escalations no namespace's tenancy policy allows (the rest depend on it: tests/tenancy_cases.py).
    refused(
        "toleration-of-every-taint",
        pod(tolerations=[{"operator": "Exists"}]),
        "spec.pod.tolerations[0].key",
        "a toleration without a key tolerates every taint",
    ),
    refused(
        "toleration-of-another-jobs-pool",
        pod(tolerations=[{"key": c.POOL_TAINT_KEY, "operator": "Exists"}]),
        "spec.pod.tolerations[0].key",
        "tpujob.dev/* taints are the operator's",
    ),
    refused(
        "selector-on-another-jobs-pool",
        pod(nodeSelector={c.POOL_LABEL_JOB: "their-job"}),
        "spec.pod.nodeSelector",
        "the operator's node labels (tpujob.dev/*, tpujob-*) belong to its jobs' own pools",
    ),
    refused(
        "selector-on-another-jobs-label",
        pod(nodeSelector={c.LABEL_JOB_NAME: "their-job"}),
        "spec.pod.nodeSelector",
        "the operator's node labels (tpujob.dev/*, tpujob-*) belong to its jobs' own pools",
    ),
    refused(
        "apparmor-unconfined",
        pod(annotations={f"{APPARMOR}trainer": "unconfined"}),
        "spec.pod.annotations",
        "an unconfined seccomp or AppArmor profile",
    ),
    refused(
        "seccomp-unconfined-pod-annotation",
        pod(annotations={"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}),
        "spec.pod.annotations",
        "an unconfined seccomp or AppArmor profile",
    ),
    refused(
        "seccomp-unconfined-container-annotation",
        pod(annotations={"container.seccomp.security.alpha.kubernetes.io/trainer": "unconfined"}),
        "spec.pod.annotations",
        "an unconfined seccomp or AppArmor profile",
    ),
    refused(
        "toleration-exists-with-value",
        pod(tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "spec.pod.tolerations[0].value",
        "operator Exists takes no value",
    ),
    refused(
        "toleration-seconds-without-no-execute",
        pod(tolerations=[{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]),
        "spec.pod.tolerations[0].tolerationSeconds",
        "only used with effect NoExecute",
    ),
    # the same rules in every container: the trainer, sidecars and init containers
    refused(
        "tpu-chips-requested-by-the-trainer",
        trainer(resources={"requests": {c.TPU_RESOURCE: "4"}}),
        "spec.trainer.resources.requests",
        "set by the operator from the topology",
    ),
    refused(
        "trainer-privileged-without-escalation",
        trainer(securityContext={"allowPrivilegeEscalation": False, "privileged": True}),
        "spec.trainer.securityContext",
        "privileged true cannot go together",
    ),
    refused(
        "sidecar-env-value-and-value-from",
        pod(
            containers=[
                sidecar(
                    env=[
                        {"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ]
                )
            ]
        ),
        "spec.pod.containers[0].env[0]",
        "set value or valueFrom, not both",
    ),
    refused(
        "sidecar-env-value-from-nothing",
        pod(containers=[sidecar(env=[{"name": "A", "valueFrom": {}}])]),
        "spec.pod.containers[0].env[0].valueFrom",
        "set exactly one of secretKeyRef",
    ),
    refused(
        "tpu-chips-requested-by-a-sidecar",
        pod(containers=[sidecar(resources={"requests": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.containers[0].resources.requests",
        "google.com/tpu is the trainer's",
    ),
    refused(
        "sidecar-cap-sys-admin-without-escalation",
        pod(
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
        "adding CAP_SYS_ADMIN",
    ),
    refused(
        "sidecar-absolute-sub-path",
        pod(
            volumes=[SCRATCH],
            containers=[sidecar(volumeMounts=[{"name": "scratch", "mountPath": "/s", "subPath": "/x"}])],
        ),
        "spec.pod.containers[0].volumeMounts[0].subPath",
        "'/x' must be a relative path",
    ),
    refused(
        "init-container-env-value-and-value-from",
        pod(
            initContainers=[
                sidecar(
                    env=[
                        {"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ]
                )
            ]
        ),
        "spec.pod.initContainers[0].env[0]",
        "set value or valueFrom, not both",
    ),
    refused(
        "init-container-env-value-from-two",
        pod(
            initContainers=[
                sidecar(
                    env=[
                        {
                            "name": "A",
                            "valueFrom": {
                                "secretKeyRef": {"name": "s", "key": "k"},
                                "configMapKeyRef": {"name": "m", "key": "k"},
                            },
                        }
                    ]
                )
            ]
        ),
        "spec.pod.initContainers[0].env[0].valueFrom",
        "set exactly one of secretKeyRef",
    ),
    refused(
        "init-container-env-from-nothing",
        pod(initContainers=[sidecar(envFrom=[{"prefix": "A_"}])]),
        "spec.pod.initContainers[0].envFrom[0]",
        "set exactly one of secretRef or configMapRef",
    ),
    refused(
        "tpu-chips-limited-on-an-init-container",
        pod(initContainers=[sidecar(resources={"limits": {c.TPU_RESOURCE: "1"}})]),
        "spec.pod.initContainers[0].resources.limits",
        "google.com/tpu is the trainer's",
    ),
    refused(
        "init-container-privileged-without-escalation",
        pod(
            initContainers=[sidecar(securityContext={"allowPrivilegeEscalation": False, "privileged": True})]
        ),
        "spec.pod.initContainers[0].securityContext",
        "privileged true cannot go together",
    ),
    refused(
        "init-container-cap-sys-admin-without-escalation",
        pod(
            initContainers=[
                sidecar(
                    securityContext={
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"add": ["CAP_SYS_ADMIN"]},
                    }
                )
            ]
        ),
        "spec.pod.initContainers[0].securityContext",
        "adding CAP_SYS_ADMIN",
    ),
    refused(
        "init-container-sub-path-up",
        pod(
            volumes=[SCRATCH],
            initContainers=[sidecar(volumeMounts=[{"name": "scratch", "mountPath": "/s", "subPath": ".."}])],
        ),
        "spec.pod.initContainers[0].volumeMounts[0].subPath",
        "'..' must be a relative path",
    ),
    refused(
        "config-map-item-absolute-path",
        pod(volumes=[{"name": "v", "configMap": {"name": "m", "items": [{"key": "k", "path": "/etc/k"}]}}]),
        "spec.pod.volumes[0].configMap.items[0].path",
        "'/etc/k' must be a relative path",
    ),
]

CASES: list[Case] = [*ACCEPTED, *REFUSED]


# --- Edits of a stored job: a running job's shape is fixed (status/shape.py) ---------------------------


@dataclass(frozen=True)
class Transition:
    """An update: `old` is the stored job (with the status the operator wrote), `new` the edit. Both judges
    give the same verdict: the CRD's transition rules at `kubectl apply`, and the operator, which runs the
    job as admitted and names the field. `cel`: whether the CRD can say it at all (a label: no)."""

    name: str
    old: dict[str, Any]
    new: dict[str, Any]
    refused_at: str | None = None
    message_part: str = ""
    cel: bool = True


def stored(phase: str | None, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    old = copy.deepcopy(manifest or job())
    if phase is not None:
        old["status"] = {"phase": phase}
    return old


def edited(old: dict[str, Any], **spec: Any) -> dict[str, Any]:
    new = copy.deepcopy({key: value for key, value in old.items() if key != "status"})
    new["spec"].update(spec)
    return new


def labelled(manifest: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    new = copy.deepcopy(manifest)
    new["metadata"]["labels"] = labels
    return new


FIXED = "cannot change once the job has left Pending and Queued"
QUEUED_JOB = labelled(job(), {c.LABEL_QUEUE_NAME: "team-queue"})
TRANSITIONS: list[Transition] = [
    *(
        Transition(
            f"{field}-of-a-{phase.lower()}-job",
            stored(phase),
            edited(stored(phase), **{field: value}),
            "spec." + field if phase not in ("Pending", "Queued") else None,
            FIXED if phase not in ("Pending", "Queued") else "",
        )
        for phase in ("Running", "Provisioning", "Suspended", "Pending", "Queued")
        for field, value in (
            ("tpu", {"type": "v5e", "topology": "2x4"}),
            ("capacity", {"mode": "spot"}),
            ("nodePool", {"policy": "existing"}),
        )
    ),
    Transition(
        "tpu-of-a-job-no-pass-has-written",
        stored(None),
        edited(stored(None), tpu={"type": "v6e", "topology": "2x2"}),
    ),
    # What may change while it runs: its suspension, its run policy's limits, its other labels.
    Transition(
        "suspend-a-running-job", stored("Running"), edited(stored("Running"), runPolicy={"suspend": True})
    ),
    Transition(
        "labels-of-a-running-job", stored("Running"), labelled(edited(stored("Running")), {"team": "b"})
    ),
    # The queue label: the operator's alone to hold (CEL cannot read labels).
    Transition(
        "queue-label-removed-from-a-running-job",
        stored("Running", QUEUED_JOB),
        labelled(edited(stored("Running", QUEUED_JOB)), {}),
        f"metadata.labels['{c.LABEL_QUEUE_NAME}']",
        FIXED,
        cel=False,
    ),
    Transition(
        "queue-label-changed-on-a-running-job",
        stored("Running", QUEUED_JOB),
        labelled(edited(stored("Running", QUEUED_JOB)), {c.LABEL_QUEUE_NAME: "other-queue"}),
        f"metadata.labels['{c.LABEL_QUEUE_NAME}']",
        FIXED,
        cel=False,
    ),
    Transition(
        "queue-label-added-to-a-running-job",
        stored("Running"),
        labelled(edited(stored("Running")), {c.LABEL_QUEUE_NAME: "team-queue"}),
        f"metadata.labels['{c.LABEL_QUEUE_NAME}']",
        FIXED,
        cel=False,
    ),
    Transition(
        "queue-label-of-a-queued-job",
        stored("Queued", QUEUED_JOB),
        labelled(edited(stored("Queued", QUEUED_JOB)), {c.LABEL_QUEUE_NAME: "other-queue"}),
        cel=False,
    ),
]
