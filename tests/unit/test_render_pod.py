"""The team's part of a worker pod, merged over the operator's: table-tested, without a cluster."""

import copy
import json

import pytest

from tests.manifests import base_job
from tests.pod_manifests import TEAM_JOB, sidecar
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.api.pod import ContainerSecurityContext
from tpujob.render import Cluster, render_plan
from tpujob.render.plan import pod as render_pod
from tpujob.render.pod_parts import DEFAULT_SECURITY_CONTEXT, merge_pod, security_context


def worker_pod(manifest, slice_index=0, worker=0):
    return render_pod(parse_tpujob(copy.deepcopy(manifest)), Cluster(), slice_index, worker)


def test_a_job_without_pod_parts_renders_no_new_fields():
    spec = worker_pod(base_job())["spec"]
    absent = {"volumes", "initContainers", "imagePullSecrets", "priorityClassName", "securityContext"}
    assert not absent & spec.keys()
    (trainer,) = spec["containers"]
    assert not {"envFrom", "volumeMounts"} & trainer.keys()
    # base_job runs the shipped trainer: non-root by default (its image's user 1000).
    assert trainer["securityContext"] == {**DEFAULT_SECURITY_CONTEXT, "runAsNonRoot": True}
    assert "annotations" not in worker_pod(base_job())["metadata"]


def test_a_teams_pod_has_every_part_in_place():
    pod = worker_pod(TEAM_JOB, worker=0)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "llm" and meta["labels"][c.LABEL_JOB_NAME] == "team"
    assert meta["annotations"] == {c.GCSFUSE_VOLUMES_ANNOTATION: "true", "gke-gcsfuse/memory-limit": "2Gi"}
    assert spec["priorityClassName"] == "training-high"
    assert spec["imagePullSecrets"] == [{"name": "artifact-registry"}]
    assert spec["securityContext"] == {"fsGroup": 1000}
    assert spec["serviceAccountName"] == "llm-trainer"
    assert spec["volumes"] == [
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
    ]
    # The operator's selector and tolerations first and whole; the team's added.
    assert spec["nodeSelector"]["team.example.com/pool"] == "llm"
    assert spec["nodeSelector"][c.NODE_LABEL_ACCELERATOR] == "tpu-v5-lite-podslice"
    assert spec["tolerations"][0]["key"] == c.TPU_TAINT_KEY
    assert spec["tolerations"][-1] == {
        "key": "team.example.com/dedicated",
        "operator": "Equal",
        "value": "llm",
    }
    (init,) = spec["initContainers"]
    assert init["name"] == "metrics-agent" and init["restartPolicy"] == "Always"
    assert init["securityContext"] == DEFAULT_SECURITY_CONTEXT

    (trainer,) = spec["containers"]
    assert trainer["name"] == "trainer"
    names = [e["name"] for e in trainer["env"]]
    assert names[0] == "TPU_WORKER_ID"  # the worker env first, the team's after it
    assert names[-4:] == ["WANDB_PROJECT", "HF_TOKEN", "POD_NAME", "TPU_MIN_LOG_LEVEL"]
    assert names.index("TPUJOB_ATTEMPT") < names.index("WANDB_PROJECT")
    by_name = {e["name"]: e for e in trainer["env"]}
    assert by_name["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    }
    assert by_name["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert trainer["envFrom"] == [{"prefix": "TRAIN_", "configMapRef": {"name": "train-env"}}]
    assert trainer["volumeMounts"] == [
        {"name": "data", "mountPath": "/data", "readOnly": True},
        {"name": "config", "mountPath": "/etc/train"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert trainer["securityContext"] == {**DEFAULT_SECURITY_CONTEXT, "runAsUser": 1000, "runAsNonRoot": True}
    assert trainer["resources"]["limits"][c.TPU_RESOURCE] == "4"


def test_sidecars_follow_the_trainer_in_the_order_given_and_take_no_chips():
    manifest = base_job(
        pod={
            "containers": [
                sidecar(name="b", env=[{"name": "X", "value": "1"}], ports=[{"containerPort": 2020}]),
                sidecar(name="a", resources={"requests": {"cpu": "100m"}}, imagePullPolicy="IfNotPresent"),
            ]
        }
    )
    containers = worker_pod(manifest)["spec"]["containers"]
    assert [x["name"] for x in containers] == ["trainer", "b", "a"]
    assert containers[1] == {
        "name": "b",
        "image": "fluent/fluent-bit:3.0",
        "env": [{"name": "X", "value": "1"}],
        "ports": [{"containerPort": 2020, "protocol": "TCP"}],
        "securityContext": DEFAULT_SECURITY_CONTEXT,
    }
    assert containers[2]["resources"] == {"requests": {"cpu": "100m"}}
    assert containers[2]["imagePullPolicy"] == "IfNotPresent"


# (the user's securityContext) -> (the container's), over allowPrivilegeEscalation: false, drop ALL, seccomp.
SECURITY = [
    (None, DEFAULT_SECURITY_CONTEXT),
    ({"runAsUser": 1000}, {**DEFAULT_SECURITY_CONTEXT, "runAsUser": 1000}),
    ({"readOnlyRootFilesystem": True}, {**DEFAULT_SECURITY_CONTEXT, "readOnlyRootFilesystem": True}),
    # add joins the default drop; drop replaces it, an empty drop drops nothing.
    (
        {"capabilities": {"add": ["NET_ADMIN"]}},
        {**DEFAULT_SECURITY_CONTEXT, "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]}},
    ),
    # A job's drop list adds to ALL, never replaces it (`drop: []` would give back the runtime's defaults).
    ({"capabilities": {"drop": []}}, DEFAULT_SECURITY_CONTEXT),
    (
        {"capabilities": {"drop": ["NET_RAW", "ALL"]}},
        {**DEFAULT_SECURITY_CONTEXT, "capabilities": {"drop": ["ALL", "NET_RAW"]}},
    ),
    ({"allowPrivilegeEscalation": True}, {**DEFAULT_SECURITY_CONTEXT, "allowPrivilegeEscalation": True}),
    # Kubernetes refuses privileged or CAP_SYS_ADMIN with allowPrivilegeEscalation false: the default yields.
    (
        {"privileged": True},
        {"capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}, "privileged": True},
    ),
    (
        {"capabilities": {"add": ["CAP_SYS_ADMIN"]}},
        {
            "capabilities": {"drop": ["ALL"], "add": ["CAP_SYS_ADMIN"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    ),
    (
        {"privileged": True, "allowPrivilegeEscalation": True},
        {**DEFAULT_SECURITY_CONTEXT, "allowPrivilegeEscalation": True, "privileged": True},
    ),
]


@pytest.mark.parametrize(("user", "expected"), SECURITY)
def test_the_users_security_context_goes_over_the_defaults_field_by_field(user, expected):
    given = None if user is None else ContainerSecurityContext.model_validate(user)
    assert security_context(given) == expected
    manifest = base_job()
    if user is not None:
        manifest["spec"]["trainer"]["securityContext"] = user
    # The shipped trainer (base_job's image) adds runAsNonRoot: true under the user's fields.
    assert worker_pod(manifest)["spec"]["containers"][0]["securityContext"] == {
        "runAsNonRoot": True,
        **expected,
    }


def test_a_recreate_slice_pod_keeps_its_restart_attempt_beside_the_teams_annotations_and_volumes():
    """RecreateSlice's annotation and its downward API volume are the operator's: a team's annotations and
    volumes join them instead of replacing them (the trainer's mount would name a volume the pod lacks)."""
    manifest = copy.deepcopy(TEAM_JOB)
    manifest["spec"].setdefault("runPolicy", {})["restartStrategy"] = "RecreateSlice"
    pod = render_pod(parse_tpujob(manifest), Cluster(), 0, 0, attempt=3)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["annotations"][c.ANNOTATION_RESTART_ATTEMPT] == "3"
    assert meta["annotations"][c.GCSFUSE_VOLUMES_ANNOTATION] == "true"
    volumes = [volume["name"] for volume in spec["volumes"]]
    mounted = {
        mount["name"] for container in spec["containers"] for mount in container.get("volumeMounts", [])
    }
    assert "tpujob-restart-attempt" in volumes and mounted <= set(volumes)
    assert len(volumes) == len(set(volumes)) and len(volumes) == 1 + len(TEAM_JOB["spec"]["pod"]["volumes"])


def test_the_operators_labels_selector_and_tolerations_win_a_clash():
    """Validation refuses these keys; if one got through, the operator's value would still be the one."""
    from tpujob.api.pod import WorkerPodSpec

    spec = {
        "nodeSelector": {c.NODE_LABEL_TOPOLOGY: "2x2"},
        "tolerations": [{"key": c.TPU_TAINT_KEY}],
        "containers": [],
    }
    metadata = {"labels": {c.LABEL_JOB_NAME: "train"}}
    extra = WorkerPodSpec.model_validate(
        {
            "labels": {c.LABEL_JOB_NAME: "other", "team": "a"},
            "nodeSelector": {c.NODE_LABEL_TOPOLOGY: "4x4", "zone": "b"},
            "tolerations": [{"key": "t", "operator": "Exists"}],
        }
    )
    merge_pod(spec, metadata, extra)
    assert metadata["labels"] == {c.LABEL_JOB_NAME: "train", "team": "a"}
    assert spec["nodeSelector"] == {"zone": "b", c.NODE_LABEL_TOPOLOGY: "2x2"}
    assert spec["tolerations"] == [{"key": c.TPU_TAINT_KEY}, {"key": "t", "operator": "Exists"}]


def test_every_worker_gets_the_same_team_parts_and_rendering_is_deterministic():
    manifest = copy.deepcopy(TEAM_JOB)
    manifest["spec"]["tpu"] = {"type": "v5p", "topology": "2x2x4", "slices": 2}
    job = parse_tpujob(manifest)
    first = json.dumps(render_plan(job, Cluster()).to_dict())
    assert first == json.dumps(render_plan(parse_tpujob(copy.deepcopy(manifest)), Cluster()).to_dict())
    pods = [r for r in render_plan(job, Cluster()).resources if r["kind"] == "Pod"]
    assert len(pods) == 8
    assert len({json.dumps(p["spec"]["volumes"]) for p in pods}) == 1
    assert len({json.dumps(p["spec"]["initContainers"]) for p in pods}) == 1
