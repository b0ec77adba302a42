"""The pod parts of a TPUJob: what the operator sets is refused with its path, the reason and the fix; the
rules Kubernetes would apply only when the pods are created are applied before anything is made."""

import copy

import pytest

from tests.manifests import base_job
from tests.pod_manifests import POD_RULES, PROTECTED, TEAM_JOB, with_trainer
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api.crd import crd
from tpujob.api.pod_validation import OPERATOR_FIELDS, env_reserved

TABLE = PROTECTED + POD_RULES


def test_the_tables_cover_every_protected_kind_of_field():
    assert len(PROTECTED) >= 40 and len(POD_RULES) >= 30
    paths = " ".join(row[2] for row in PROTECTED)
    for field in (
        "resources",
        "nodeSelector",
        "tolerations",
        "labels",
        "env",
        "envFrom",
        "ports",
        "hostname",
    ):
        assert field in paths, field
    # Every operator-set field the API names has a row that shows its reason.
    named = {row[2].rsplit(".", 1)[-1] for row in PROTECTED}
    assert {field for _, field in OPERATOR_FIELDS} <= named


@pytest.mark.parametrize(("manifest", "path", "fragment"), [r[1:] for r in TABLE], ids=[r[0] for r in TABLE])
def test_refused_with_the_field_path_and_the_reason(manifest, path, fragment):
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(manifest)
    problems = caught.value.problems
    assert any(p.path == path and fragment in p.message for p in problems), [str(p) for p in problems]


def test_a_real_teams_job_is_valid():
    job = parse_tpujob(copy.deepcopy(TEAM_JOB))
    assert [v.name for v in job.spec.pod.volumes] == ["data", "config", "dshm"]
    assert job.spec.pod.init_containers[0].restart_policy == "Always"
    assert job.spec.trainer.env[1].value_from is not None


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("TPU_WORKER_ID", True),
        ("TPU_ANYTHING_NEW", True),
        ("MEGASCALE_PORT", True),
        ("TPUJOB_ATTEMPT", True),
        ("TPUJOB_METRICS_PORT", True),
        # The default trainer's settings share the prefix: TPUJOB_* is reserved by the operator's names.
        ("TPUJOB_BATCH_SIZE", False),
        # libtpu's logging knobs (xpk --enable-debug-logs sets them) say nothing about the slice.
        ("TPU_STDERR_LOG_LEVEL", False),
        ("TPU_MIN_LOG_LEVEL", False),
        ("TPU_VMODULE", False),
        ("LIBTPU_INIT_ARGS", False),
        ("XLA_FLAGS", False),
        ("HF_TOKEN", False),
    ],
)
def test_the_worker_env_is_reserved_by_prefix(name, reserved):
    assert env_reserved(name) is reserved
    manifest = with_trainer(env=[{"name": name, "value": "1"}])
    if reserved:
        with pytest.raises(InvalidTPUJob):
            parse_tpujob(manifest)
    else:
        parse_tpujob(manifest)


def test_an_env_from_prefix_may_name_the_trainers_settings():
    parse_tpujob(with_trainer(envFrom=[{"prefix": "TPUJOB_", "configMapRef": {"name": "trainer-settings"}}]))


def test_sidecars_may_use_any_env_name_and_read_the_worker_id_from_the_pod():
    sidecar = {
        "name": "exporter",
        "image": "exporter:1",
        "env": [
            {
                "name": "TPU_WORKER_ID",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tpujob.dev/worker']"}},
            }
        ],
    }
    parse_tpujob(base_job(pod={"containers": [sidecar]}))


def test_every_pod_field_explains_itself():
    """`kubectl explain tpujob.spec.pod...` reads these descriptions: none may be missing."""
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]

    def undescribed(node, path):
        missing = [] if node.get("description") else [path]
        for name, child in node.get("properties", {}).items():
            missing += undescribed(child, f"{path}.{name}")
        if node.get("items", {}).get("type") == "object":
            missing += undescribed(node["items"], f"{path}[]")
        return missing

    assert undescribed(spec["pod"], "spec.pod") == []
    assert undescribed(spec["trainer"], "spec.trainer") == []
