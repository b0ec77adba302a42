"""The malformed manifests of the API table, applied through the real API server: each is rejected
at apply time, or ends InvalidSpec with an event naming the field; nothing is created for any."""

from __future__ import annotations

import copy

from kubernetes import client as k8s

from tests.manifests import MALFORMED, PLAIN_IMAGE, plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for

# The API server prunes fields its schema does not know (kubectl rejects them before they get there).
PRUNED = {"unknown-field-in-spec": "replicas", "unknown-field-in-tpu": "topolgy"}


def test_malformed_manifests_are_rejected_or_reported(jobs, gke):
    accepted: dict[str, str] = {}  # job name -> field the operator must name
    rejected = []
    for index, (case, manifest, field, _fragment) in enumerate(MALFORMED):
        if not isinstance(manifest, dict) or manifest.get("kind") != c.KIND or case == "name-too-long":
            continue  # not a TPUJob the tpujobs endpoint could take
        if manifest.get("apiVersion") != c.API_VERSION:
            continue
        body = copy.deepcopy(manifest)
        body["metadata"]["name"] = f"bad-{index}"
        if case in PRUNED:
            # Valid once pruned, so its pods may start before the test ends: a plain image (no real trainer).
            body["spec"].setdefault("trainer", {})["image"] = PLAIN_IMAGE
        try:
            jobs.create(body)
        except k8s.ApiException as error:
            assert error.status in (400, 422), (case, error.status)
            rejected.append(case)
            continue
        accepted[f"bad-{index}"] = (case, field)

    assert len(rejected) >= 15, rejected
    for name, (case, field) in accepted.items():
        if case in PRUNED:
            stored = jobs.get(name)["spec"]
            assert PRUNED[case] not in stored and PRUNED[case] not in stored["tpu"]
            continue
        status = jobs.wait_phase(name, "Failed", timeout=30)
        assert status["reason"] == "InvalidSpec", (case, status)
        assert field in status["message"], (case, status["message"])
        wait_for(
            lambda name=name, field=field: any(
                e.reason == "InvalidSpec" and field in e.message for e in jobs.events(name)
            ),
            timeout=30,
            what=f"an InvalidSpec event for {case}",
        )
    invalid = [n for n, (case, _) in accepted.items() if case not in PRUNED]
    assert invalid, "some manifests only the operator can judge (no CEL on this API server)"
    pool_owners = {
        r.body["nodePool"]["config"]["labels"][c.POOL_LABEL_JOB]
        for r in gke.recorded
        if r.rpc == "CreateNodePool"
    }
    assert not pool_owners & set(invalid)
    assert not [
        p
        for p in jobs.core.list_namespaced_pod(jobs.namespace).items
        if p.metadata.labels.get(c.LABEL_JOB_NAME) in invalid
    ]


def test_a_running_job_edited_into_an_invalid_spec_releases_what_it_held(jobs, gke):
    jobs.create(plain_job("train"))
    jobs.wait_pods_running("train", 1)
    # A fault only the operator judges (the format of a label key: CEL has no cost bound for a regex over map
    # keys); the API server's CEL refuses the others at the edit itself (tests/e2e/test_apply_cases.py).
    patch = {"spec": {"pod": {"labels": {"bad key": "x"}}}}
    jobs.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, "train", patch)
    status = jobs.wait_phase("train", "Failed", timeout=30)
    assert status["reason"] == "InvalidSpec" and "spec.pod.labels" in status["message"], status
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to be deleted")
    wait_for(lambda: not jobs.pods("train"), timeout=30, what="the pods to be deleted")
