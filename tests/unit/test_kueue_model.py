"""The test bed's Kueue model (tpujob_sandbox.kueue.model) on tables: what Kueue v0.19.2 would write."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.model import Plan, World, reconcile
from tpujob_sandbox.kueue.objects import find_condition, format_time
from tpujob_sandbox.kueue.quantity import format_value, resource_value

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
TPU = "google.com/tpu"


def flavor(
    name: str, labels: dict[str, str] | None = None, taints: list[dict] | None = None
) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": labels or {}, "nodeTaints": taints or []}}


def cluster_queue(
    name: str = "cq",
    quotas: dict[str, dict[str, Any]] | None = None,
    strategy: str = "BestEffortFIFO",
    preemption: str = "Never",
    stop: str | None = None,
) -> dict[str, Any]:
    quotas = quotas if quotas is not None else {"f": {TPU: 8}}
    covered = sorted({r for q in quotas.values() for r in q})
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [
                    {"name": f, "resources": [{"name": r, "nominalQuota": str(v)} for r, v in q.items()]}
                    for f, q in quotas.items()
                ],
            }
        ],
        "queueingStrategy": strategy,
        "preemption": {"withinClusterQueue": preemption},
    }
    if stop:
        spec["stopPolicy"] = stop
    return {"metadata": {"name": name}, "spec": spec}


def local_queue(name: str = "q", cq: str = "cq", namespace: str = "ns", stop: str | None = None) -> dict:
    spec: dict[str, Any] = {"clusterQueue": cq}
    if stop:
        spec["stopPolicy"] = stop
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def workload(
    name: str,
    tpus: int = 4,
    hosts: int = 1,
    priority: int = 0,
    age: int = 0,
    queue: str = "q",
    selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
    extra: dict[str, str] | None = None,
    slices: int = 1,
    status: dict | None = None,
    active: bool = True,
) -> dict[str, Any]:
    requests = {TPU: str(tpus), **(extra or {})}
    pod = {"containers": [{"name": "c", "resources": {"requests": requests}}], "nodeSelector": selector or {}}
    if tolerations:
        pod["tolerations"] = tolerations
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": format_time(NOW - timedelta(seconds=1000 - age)),
            "ownerReferences": [{"kind": "TPUJob", "name": name, "uid": "j", "controller": True}],
        },
        "spec": {
            "queueName": queue,
            "priority": priority,
            "active": active,
            "podSets": [
                {"name": f"slice-{i}", "count": hosts, "template": {"spec": pod}} for i in range(slices)
            ],
        },
        "status": status or {},
    }


def run(
    *workloads: dict,
    cq: dict | None = None,
    flavors: list[dict] | None = None,
    lqs: list[dict] | None = None,
    config: KueueConfig | None = None,
    now: datetime = NOW,
) -> Plan:
    world = World(
        flavors=flavors if flavors is not None else [flavor("f")],
        cluster_queues=[cq or cluster_queue()],
        local_queues=lqs if lqs is not None else [local_queue()],
        workloads=list(workloads),
    )
    return reconcile(world, config or KueueConfig(), now)


def cond(plan: Plan, name: str, kind: str) -> dict | None:
    return find_condition({"status": plan.workload_status.get(("ns", name), {})}, kind)


def admitted(plan: Plan) -> set[str]:
    return {n for (_, n), s in plan.workload_status.items() if s.get("admission")}


def apply(plan: Plan, *workloads: dict) -> list[dict]:
    """The next state, as if every write the plan holds had landed."""
    out = []
    for wl in workloads:
        new = dict(wl)
        new["status"] = plan.workload_status.get(("ns", wl["metadata"]["name"]), wl["status"])
        out.append(new)
    return out


# --- quantities -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "text", "value", "printed"),
    [
        ("cpu", "500m", 500, "500m"),
        ("cpu", "2", 2000, "2"),
        ("memory", "16Gi", 16 * 2**30, "16Gi"),
        (TPU, "4", 4, "4"),
        ("memory", "1G", 10**9, "1G"),
    ],
)
def test_quantities_are_counted_and_printed_as_kueue_does(resource, text, value, printed):
    assert resource_value(resource, text) == value
    assert format_value(resource, value) == printed


# --- admission ------------------------------------------------------------------------------------------


def test_a_workload_that_fits_is_admitted_with_kueues_conditions_and_assignment():
    plan = run(
        workload("a", tpus=4, hosts=2, extra={"cpu": "1500m"}),
        cq=cluster_queue(quotas={"f": {TPU: 8, "cpu": 10}}),
    )
    status = plan.workload_status[("ns", "a")]
    assert status["admission"] == {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {
                "name": "slice-0",
                "flavors": {TPU: "f", "cpu": "f"},
                "resourceUsage": {TPU: "8", "cpu": "3"},
                "count": 2,
            }
        ],
    }
    assert cond(plan, "a", "QuotaReserved")["message"] == "Quota reserved in ClusterQueue cq"
    assert cond(plan, "a", "QuotaReserved")["reason"] == "QuotaReserved"
    assert cond(plan, "a", "Admitted")["message"] == "The workload is admitted"


def test_one_podset_per_slice_counts_against_the_quota_together():
    plan = run(workload("a", tpus=4, slices=3))  # 12 chips in an 8-chip queue
    message = cond(plan, "a", "QuotaReserved")["message"]
    assert message == (
        "couldn't assign flavors to pod set slice-2: insufficient quota for google.com/tpu in flavor f, "
        "previously considered podsets requests (8) + current podset request (4) > maximum capacity (8)"
    )
    assert cond(plan, "a", "QuotaReserved")["reason"] == "Pending"


def test_a_workload_that_does_not_fit_waits_with_the_more_needed_message():
    first = run(workload("a", tpus=6))
    (a,) = apply(first, workload("a", tpus=6))
    plan = run(a, workload("b", tpus=4, age=1))
    assert cond(plan, "b", "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set slice-0: insufficient unused quota for google.com/tpu in flavor "
        "f, 2 more needed"
    )


def test_an_uncovered_resource_makes_the_workload_inadmissible():
    plan = run(workload("a", extra={"nvidia.com/gpu": "1"}))
    assert cond(plan, "a", "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set slice-0: resource nvidia.com/gpu unavailable in ClusterQueue"
    )


def test_flavors_are_tried_in_order_by_node_labels_and_taints():
    flavors = [
        flavor("v5e", {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"}),
        flavor(
            "tainted",
            {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
            [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}],
        ),
    ]
    cq = cluster_queue(quotas={"v5e": {TPU: 8}, "tainted": {TPU: 8}})
    v6e = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
    plan = run(workload("a", selector=v6e), cq=cq, flavors=flavors)
    assert cond(plan, "a", "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set slice-0: flavor v5e doesn't match node affinity, "
        "untolerated taint google.com/tpu=present:NoSchedule in flavor tainted"
    )
    tolerated = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    plan = run(workload("a", selector=v6e, tolerations=tolerated), cq=cq, flavors=flavors)
    assert plan.workload_status[("ns", "a")]["admission"]["podSetAssignments"][0]["flavors"] == {
        TPU: "tainted"
    }


def test_a_full_first_flavor_passes_to_the_next():
    cq = cluster_queue(quotas={"f": {TPU: 4}, "g": {TPU: 8}})
    plan = run(workload("a", tpus=4), workload("b", tpus=4, age=1), cq=cq, flavors=[flavor("f"), flavor("g")])
    flavors = {
        n: s["admission"]["podSetAssignments"][0]["flavors"][TPU]
        for (_, n), s in plan.workload_status.items()
    }
    assert flavors == {"a": "f", "b": "g"}


def test_priority_orders_the_queue_then_creation_time():
    plan = run(
        workload("old", tpus=8, age=0),
        workload("new-high", tpus=8, age=5, priority=10),
        workload("newer", tpus=8, age=9),
    )
    assert admitted(plan) == {"new-high"}


@pytest.mark.parametrize(("strategy", "expected"), [("StrictFIFO", set()), ("BestEffortFIFO", {"small"})])
def test_strict_fifo_blocks_behind_its_head_best_effort_lets_later_ones_pass(strategy, expected):
    big = workload("big", tpus=4, hosts=3, age=0)  # 12 chips: waits in an 8-chip queue
    plan = run(big, workload("small", tpus=4, age=5), cq=cluster_queue(strategy=strategy))
    assert admitted(plan) == expected
    assert cond(plan, "big", "QuotaReserved")["status"] == "False"


def test_a_missing_local_queue_is_inadmissible_with_kueues_message():
    plan = run(workload("a", queue="nope"))
    found = cond(plan, "a", "QuotaReserved")
    assert (found["reason"], found["message"]) == ("Inadmissible", "LocalQueue nope doesn't exist")


# --- preemption -----------------------------------------------------------------------------------------


def _admitted_pair(policy: str) -> tuple[dict, dict]:
    cq = cluster_queue(preemption=policy)
    low = workload("low", tpus=8, priority=1)
    (low,) = apply(run(low, cq=cq), low)
    return low, cq


@pytest.mark.parametrize(
    ("policy", "preempts"), [("Never", False), ("LowerPriority", True), ("LowerOrNewerEqualPriority", True)]
)
def test_a_higher_priority_workload_preempts_by_the_policy(policy, preempts):
    low, cq = _admitted_pair(policy)
    plan = run(low, workload("high", tpus=8, priority=5, age=3), cq=cq)
    evicted = cond(plan, "low", "Evicted")
    assert (evicted is not None) is preempts
    assert "high" not in admitted(plan)  # the victim keeps its quota until its job controller lets go
    if preempts:
        assert evicted["reason"] == "Preempted"
        assert evicted["message"] == (
            "Preempted to accommodate a workload (UID: uid-high, JobUID: UNKNOWN) due to prioritization in "
            "the ClusterQueue; preemptor path: /cq; preemptee path: /cq"
        )
        assert cond(plan, "low", "Preempted")["reason"] == "InClusterQueue"
        assert cond(plan, "high", "QuotaReserved")["message"].endswith(
            ". Pending the preemption of 1 workload(s)"
        )


def test_the_preemptor_is_admitted_once_the_victim_releases_its_quota():
    low, cq = _admitted_pair("LowerPriority")
    high = workload("high", tpus=8, priority=5, age=3)
    low, high = apply(run(low, high, cq=cq), low, high)
    # The job controller's part: stop the pods, then clear the admission (jobframework step 6).
    low["status"] = {**low["status"], "admission": None}
    low["status"]["conditions"] = [
        {**c, "status": "False", "reason": "Pending"} if c["type"] in ("QuotaReserved", "Admitted") else c
        for c in low["status"]["conditions"]
    ]
    plan = run(low, high, cq=cq)
    assert admitted(plan) == {"high"}
    assert cond(plan, "low", "QuotaReserved")["message"].startswith("couldn't assign flavors")


def test_equal_priority_is_preempted_only_when_newer_under_lower_or_newer_equal():
    low, cq = _admitted_pair("LowerOrNewerEqualPriority")
    older = workload("older", tpus=8, priority=1, age=-5)  # created before the admitted one
    plan = run(low, older, cq=cq)
    assert cond(plan, "low", "Evicted") is not None
    newer = workload("newer", tpus=8, priority=1, age=5)
    assert cond(run(low, newer, cq=cq), "low", "Evicted") is None


def test_the_fewest_lowest_priority_victims_are_chosen():
    cq = cluster_queue(preemption="LowerPriority")
    a, b = (workload(n, tpus=4, priority=p, age=i) for i, (n, p) in enumerate([("a", 1), ("b", 2)]))
    a, b = apply(run(a, b, cq=cq), a, b)
    plan = run(a, b, workload("p", tpus=4, priority=9, age=9), cq=cq)
    assert cond(plan, "a", "Evicted") is not None and cond(plan, "b", "Evicted") is None


# --- waitForPodsReady, deactivation, stop policies, finishing ---------------------------------------------


FAST = KueueConfig(pods_ready_timeout_seconds=10, backoff_base_seconds=2, backoff_max_seconds=5)


def _admitted(name: str = "a", **kwargs: Any) -> dict:
    wl = workload(name, **kwargs)
    (wl,) = apply(run(wl, config=FAST), wl)
    return wl


def test_pods_not_ready_in_time_evict_with_kueues_message_and_backoff():
    wl = _admitted()
    assert run(wl, config=FAST, now=NOW + timedelta(seconds=5)).wake_at == NOW + timedelta(seconds=10)
    plan = run(wl, config=FAST, now=NOW + timedelta(seconds=11))
    evicted = cond(plan, "a", "Evicted")
    assert (evicted["reason"], evicted["message"]) == (
        "PodsReadyTimeout",
        "Exceeded the PodsReady timeout ns/a",
    )
    later = NOW + timedelta(seconds=11)
    assert plan.workload_status[("ns", "a")]["requeueState"] == {
        "count": 1,
        "requeueAt": format_time(later + timedelta(seconds=2)),
    }


def test_backoff_doubles_up_to_its_cap():
    assert [FAST.backoff_seconds(n) for n in (1, 2, 3, 4)] == [2, 4, 5, 5]


def test_pods_ready_in_time_keep_the_admission():
    wl = _admitted()
    wl["status"]["conditions"].append(
        {
            "type": "PodsReady",
            "status": "True",
            "reason": "PodsReady",
            "message": "All pods reached readiness and the workload is running",
            "lastTransitionTime": format_time(NOW),
        }
    )
    assert cond(run(wl, config=FAST, now=NOW + timedelta(seconds=60)), "a", "Evicted") is None


def test_a_requeued_workload_waits_out_its_backoff():
    wl = workload(
        "a",
        status={
            "requeueState": {"count": 1, "requeueAt": format_time(NOW + timedelta(seconds=3))},
            "conditions": [
                {
                    "type": "Requeued",
                    "status": "False",
                    "reason": "PodsReadyTimeout",
                    "message": "x",
                    "lastTransitionTime": format_time(NOW),
                }
            ],
        },
    )
    plan = run(wl, config=FAST)
    assert admitted(plan) == set() and plan.wake_at == NOW + timedelta(seconds=3)
    plan = run(wl, config=FAST, now=NOW + timedelta(seconds=3))
    assert admitted(plan) == {"a"}
    assert cond(plan, "a", "Requeued")["reason"] == "BackoffFinished"


def test_deactivation_evicts():
    wl = _admitted()
    wl["spec"]["active"] = False
    found = cond(run(wl), "a", "Evicted")
    assert (found["reason"], found["message"]) == ("Deactivated", "The workload is deactivated")


@pytest.mark.parametrize(
    ("stop", "evicted", "admits"), [("Hold", False, False), ("HoldAndDrain", True, False)]
)
def test_cluster_queue_stop_policies(stop, evicted, admits):
    wl = _admitted()
    plan = run(wl, workload("b", age=5), cq=cluster_queue(stop=stop))
    assert (cond(plan, "a", "Evicted") is not None) is evicted
    if evicted:
        assert cond(plan, "a", "Evicted")["reason"] == "ClusterQueueStopped"
    assert cond(plan, "b", "QuotaReserved")["message"] == "ClusterQueue cq is inactive"
    assert (
        plan.cluster_queue_status["cq"]["conditions"][0]["message"]
        == "Can't admit new workloads: is stopped."
    )


def test_finished_releases_the_quota():
    a = _admitted("a", tpus=8)
    b = workload("b", tpus=8, age=5)
    assert admitted(run(a, b)) == set()
    a["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "done",
            "lastTransitionTime": format_time(NOW),
        }
    )
    assert admitted(run(a, b)) == {"b"}


def test_an_orphan_being_deleted_loses_kueues_finalizer():
    wl = workload("a")
    wl["metadata"]["ownerReferences"] = []
    wl["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert run(wl).remove_finalizer == [("ns", "a")]
    owned = workload("b")
    owned["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert run(owned).remove_finalizer == []


def test_queue_statuses_count_pending_reserving_and_admitted():
    a = _admitted("a", tpus=4)
    plan = run(a, workload("b", tpus=8, age=5))
    cq = plan.cluster_queue_status["cq"]
    assert (cq["pendingWorkloads"], cq["reservingWorkloads"], cq["admittedWorkloads"]) == (1, 1, 1)
    assert cq["flavorsReservation"] == [
        {"name": "f", "resources": [{"name": TPU, "total": "4", "borrowed": "0"}]}
    ]
    assert cq["conditions"][0]["reason"] == "Ready"
    lq = plan.local_queue_status[("ns", "q")]
    assert (lq["pendingWorkloads"], lq["reservingWorkloads"], lq["admittedWorkloads"]) == (1, 1, 1)
    assert lq["conditions"][0]["message"] == "Can submit new workloads to localQueue"


# --- where the CRDs come from -----------------------------------------------------------------------------


def test_the_crds_default_beside_the_repository(monkeypatch, tmp_path):
    from tpujob_sandbox.kueue import crds

    assert crds.REPOSITORY_ROOT.parent / "shared" / "kueue" / "crds" == crds.DEFAULT_KUEUE_CRDS
    (tmp_path / "kueue.x-k8s.io_workloads.yaml").write_text("")
    monkeypatch.setattr(crds, "DEFAULT_KUEUE_CRDS", tmp_path)  # a clone may have no ../shared
    monkeypatch.delenv(crds.ENV_KUEUE_CRDS, raising=False)
    assert crds.crds_path() == tmp_path


def test_past_the_backoff_limit_kueue_deactivates_the_workload_with_its_cause():
    """triggerDeactivation: a PodsReady timeout past requeuingStrategy.backoffLimitCount marks the Workload
    DeactivationTarget; the next Reconcile sets spec.active false, the one after evicts it with the cause
    (DeactivatedDueToRequeuingLimitExceeded) and drops the mark."""
    limited = KueueConfig(
        pods_ready_timeout_seconds=10, backoff_base_seconds=2, backoff_max_seconds=5, backoff_limit_count=1
    )
    wl = _admitted()
    wl["status"]["requeueState"] = {"count": 1}  # requeued once already
    later = NOW + timedelta(seconds=11)
    plan = run(wl, config=limited, now=later)
    assert cond(plan, "a", "Evicted") is None and cond(plan, "a", "DeactivationTarget")["status"] == "True"
    (wl,) = apply(plan, wl)
    plan = run(wl, config=limited, now=later)
    assert plan.deactivate == [("ns", "a")]
    wl["spec"]["active"] = False
    plan = run(wl, config=limited, now=later)
    evicted = cond(plan, "a", "Evicted")
    assert (evicted["reason"], evicted["message"]) == (
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
    )
    assert cond(plan, "a", "DeactivationTarget") is None


def test_a_v1beta1_local_queue_counts_its_admitted_usage_in_v1beta1s_field():
    a = _admitted("a", tpus=4)
    world = World([flavor("f")], [cluster_queue()], [local_queue()], [a], version="v1beta1")
    lq = reconcile(world, KueueConfig(), NOW).local_queue_status[("ns", "q")]
    assert "flavorUsage" in lq and "flavorsUsage" not in lq


@pytest.mark.parametrize(
    ("kueue_release", "served", "pod_sets"),
    [("v0.19.2", "v1beta2", 18), ("v0.17.1", "v1beta2", 8), ("v0.14.8", "v1beta1", 8)],
    indirect=["kueue_release"],
)
def test_the_crds_serve_their_storage_version_only(kueue_release, kueue_crd_folder, served, pod_sets):
    """No conversion webhook: one version served, the release's storage version; the pod-set cap the
    operator reads is the CRD's own (spec.podSets maxItems)."""
    from tpujob.reconciler.kueue import max_pod_sets
    from tpujob_sandbox.kueue import crds

    definitions = crds.load_crds(kueue_crd_folder, kueue_release)
    assert len(definitions) >= 9
    assert all([v["name"] for v in d["spec"]["versions"] if v["served"]] == [served] for d in definitions)
    assert all(d["metadata"]["annotations"][crds.RELEASE_ANNOTATION] == kueue_release for d in definitions)
    (workloads,) = [d for d in definitions if d["metadata"]["name"] == "workloads.kueue.x-k8s.io"]
    assert max_pod_sets(workloads, served) == pod_sets


def test_an_older_releases_crds_are_beside_the_newest(monkeypatch, tmp_path):
    from tpujob_sandbox.kueue import crds

    older = tmp_path / "v0.17.1" / "crds"
    older.mkdir(parents=True)
    (older / "kueue.x-k8s.io_workloads.yaml").write_text("")
    monkeypatch.setenv(crds.ENV_KUEUE_CRDS, str(tmp_path / "crds"))
    assert crds.crds_path("v0.17.1") == older
    with pytest.raises(crds.KueueCrdsMissing, match=r"Kueue v0\.14\.8's CRDs are not at .*v0\.14\.8/crds"):
        crds.crds_path("v0.14.8")


def test_a_missing_crd_folder_names_the_setting_and_the_fix(monkeypatch, tmp_path):
    from tpujob_sandbox.kueue import crds

    monkeypatch.setenv(crds.ENV_KUEUE_CRDS, str(tmp_path / "nowhere"))
    with pytest.raises(
        crds.KueueCrdsMissing,
        match=r"set TPUJOB_KUEUE_CRDS to a folder holding Kueue v0\.19\.2's config/components/crd/bases/"
        r"\*\.yaml \(https://github\.com/kubernetes-sigs/kueue/tree/v0\.19\.2/config/components/crd/bases\)$",
    ):
        crds.crds_path()
    # An older release's folder is named with where that release publishes its CRDs.
    with pytest.raises(
        crds.KueueCrdsMissing,
        match=r"with Kueue v0\.17\.1's in <that folder>/\.\./v0\.17\.1/crds "
        r"\(https://github\.com/kubernetes-sigs/kueue/tree/v0\.17\.1/config/components/crd/bases\)$",
    ):
        crds.crds_path("v0.17.1")


@pytest.mark.slow  # a pytest process each (seconds: the test bed's plugin imports the Kubernetes client)
@pytest.mark.parametrize(
    ("ci", "outcome"), [("", "1 skipped"), ("true", "1 error")], ids=["a clone anywhere", "CI"]
)
def test_without_the_crds_a_test_is_skipped_naming_the_setting_but_fails_under_ci(tmp_path, ci, outcome):
    """What a clone with no ../shared meets (one line naming TPUJOB_KUEUE_CRDS and Kueue's folder), and what
    .ci/run (CI=true, where ../shared is beside the clone) meets instead: a failure, not a silent skip."""
    (tmp_path / "test_needs_crds.py").write_text("def test_it(kueue_crd_folder):\n    pass\n")
    env = {**os.environ, "CI": ci, "TPUJOB_KUEUE_CRDS": str(tmp_path / "nowhere")}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert outcome in ran.stdout, ran.stdout + ran.stderr
    (said,) = [line for line in ran.stdout.splitlines() if line.startswith(("SKIPPED", "ERROR"))]
    assert "set TPUJOB_KUEUE_CRDS to a folder holding" in said, said
    assert "github.com/kubernetes-sigs/kueue/tree/v0.19.2/config/components/crd/bases" in said, said
