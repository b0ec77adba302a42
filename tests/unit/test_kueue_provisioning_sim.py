"""The test bed's Kueue admission checks, decided purely: the workload controller's part (checks.py) and
the ProvisioningRequest check controller's (provisioning.decide), on tables of Kueue's wire objects."""

from datetime import UTC, datetime

import pytest

from tpujob_sandbox.kueue import checks
from tpujob_sandbox.kueue.objects import find_condition
from tpujob_sandbox.kueue.provisioning import CLASS_ANNOTATION, CONSUME_ANNOTATION, CONTROLLER_NAME, decide

NOW = datetime(2026, 11, 29, 5, 0, tzinfo=UTC)
QP = "queued-provisioning.gke.io"


def reserved(*states, admitted=False):
    conditions = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]
    if admitted:
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
    return {
        "metadata": {"name": "wl", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {
            "podSets": [
                {"name": "slice-0", "count": 4, "template": {"spec": {"containers": [{"name": "t"}]}}}
            ]
        },
        "status": {
            "conditions": conditions,
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "slice-0", "flavors": {"google.com/tpu": "f"}}],
            },
            "admissionChecks": list(states),
        },
    }


def state(value, **extra):
    return {"name": "dws", "state": value, "message": "", **extra}


@pytest.mark.parametrize(
    ("states", "admitted", "evicted", "deactivate"),
    [
        ([state("Pending")], False, None, False),
        ([state("Ready")], True, None, False),
        ([state("Retry", message="out of capacity")], False, "AdmissionCheck", False),
        ([state("Rejected", message="no")], False, "DeactivatedDueToAdmissionCheck", True),
    ],
)
def test_the_workload_controller_follows_its_checks(states, admitted, evicted, deactivate):
    wl = reserved(*states)
    assert checks.sync(wl, ["dws"], NOW) is deactivate
    assert (find_condition(wl, "Admitted") is not None) is admitted
    eviction = find_condition(wl, "Evicted")
    assert (eviction or {}).get("reason") == evicted
    if evicted:
        assert "dws" in eviction["message"] and states[0]["state"] in eviction["message"]


def test_a_reserved_workload_gets_a_pending_state_per_check_and_loses_them_with_its_quota():
    wl = reserved()
    checks.sync(wl, ["dws"], NOW)
    assert [s["state"] for s in wl["status"]["admissionChecks"]] == ["Pending"]
    wl["status"]["admissionChecks"] = [state("Ready", podSetUpdates=[{"name": "slice-0"}])]
    wl["status"]["conditions"] = []  # quota given back (the job integration cleared the admission)
    checks.sync(wl, ["dws"], NOW)
    assert wl["status"]["admissionChecks"][0]["state"] == "Pending"
    assert "podSetUpdates" not in wl["status"]["admissionChecks"][0]


CHECK = {
    "metadata": {"name": "dws"},
    "spec": {"controllerName": CONTROLLER_NAME, "parameters": {"name": "prc"}},
}


def config(limit=None):
    spec = {"provisioningClassName": QP}
    if limit is not None:
        spec["retryStrategy"] = {"backoffLimitCount": limit}
    return {"metadata": {"name": "prc"}, "spec": spec}


FLAVOR = {"metadata": {"name": "f"}, "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-topology": "4x4"}}}


def request(attempt, *conditions):
    name = f"wl-dws-{attempt}"
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "ownerReferences": [{"kind": "Workload", "name": "wl"}],
        },
        "spec": {
            "provisioningClassName": QP,
            "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-slice-0"}, "count": 4}],
        },
        "status": {"conditions": [{"type": t, "status": "True", "message": m} for t, m in conditions]},
    }


def test_a_pending_check_gets_a_request_with_the_flavors_selectors_in_its_pod_template():
    actions = decide([reserved(state("Pending"))], [CHECK], [config()], [], [FLAVOR], NOW)
    ((templates, body),) = actions.create
    assert body["metadata"]["name"] == "wl-dws-1" and body["spec"]["provisioningClassName"] == QP
    assert body["spec"]["podSets"] == [{"podTemplateRef": {"name": "ppt-wl-dws-1-slice-0"}, "count": 4}]
    assert templates[0]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-tpu-topology": "4x4"}
    assert body["metadata"]["ownerReferences"][0]["name"] == "wl"


@pytest.mark.parametrize(
    ("conditions", "limit", "expected"),
    [
        ([("Accepted", ""), ("Provisioned", "")], None, "Ready"),
        ([("Accepted", "")], None, None),  # still Pending: nothing to write
        ([("Failed", "stockout")], 0, "Rejected"),
        ([("Failed", "stockout")], 3, "Retry"),
        ([("BookingExpired", "expired")], 0, "Rejected"),
        ([("CapacityRevoked", "revoked")], 3, "Rejected"),
    ],
)
def test_the_checks_state_follows_its_request(conditions, limit, expected):
    wl = reserved(state("Pending"))
    actions = decide([wl], [CHECK], [config(limit)], [request(1, *conditions)], [FLAVOR], NOW)
    if expected is None:
        assert actions.check_states == {} and actions.create == []
        return
    ((new,),) = actions.check_states.values()
    assert new["state"] == expected
    if expected == "Ready":
        assert new["podSetUpdates"] == [
            {"name": "slice-0", "annotations": {CONSUME_ANNOTATION: "wl-dws-1", CLASS_ANNOTATION: QP}}
        ]
    if expected == "Retry":
        assert new["retryCount"] == 1 and "stockout" in new["message"]


def test_a_retry_makes_the_next_attempts_request_and_a_finished_workload_loses_its_requests():
    wl = reserved(state("Pending", retryCount=1))
    actions = decide([wl], [CHECK], [config()], [request(1, ("Failed", "x"))], [FLAVOR], NOW)
    assert [body["metadata"]["name"] for _, body in actions.create] == ["wl-dws-2"]
    wl["status"]["conditions"].append({"type": "Finished", "status": "True"})
    actions = decide([wl], [CHECK], [config()], [request(1), request(2)], [FLAVOR], NOW)
    assert actions.delete == [("ns", "wl-dws-1"), ("ns", "wl-dws-2")]
