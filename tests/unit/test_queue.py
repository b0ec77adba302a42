"""Kueue, decided purely: a job labelled kueue.x-k8s.io/queue-name holds TPUs only while its Workload is
admitted, and tells the Workload what a Kueue job integration tells it (jobframework's reconciler)."""

import dataclasses
import datetime as dt

import pytest

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Reason
from tpujob.reconciler.kueue import workload_view
from tpujob.render import naming
from tpujob.render.cluster import Cluster
from tpujob.render.plan import pod
from tpujob.render.pools import node_pool
from tpujob.render.workload import KueueApi, PriorityFact, job_pod_set_facts
from tpujob.render.workload import workload as render_workload

NOW = dt.datetime(2026, 11, 27, 12, 0, 0, tzinfo=dt.UTC)
EARLIER = "2026-11-27T11:59:00Z"
QUEUE = "team-a"


def queued_job(status=None, **spec):
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid="u1", generation=1, labels={c.LABEL_QUEUE_NAME: QUEUE})
    job = parse_tpujob(manifest)
    return job.model_copy(update={"status": status}) if status is not None else job


def condition(type_, status, reason, message="", at=EARLIER):
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def workload(*conditions, admission=None, **fields):
    return s.WorkloadView(
        name="tpujob-train-abcde",
        resource_version="7",
        owner_uid="u1",
        conditions=tuple(conditions),
        admission=admission,
        finalizers=(c.KUEUE_FINALIZER,),
        generation=1,
        **fields,
    )


def admission(slices=1, flavor="v5p-flavor"):
    return {
        "clusterQueue": "tpu-cq",
        "podSetAssignments": [
            {"name": f"slice-{i}", "flavors": {"google.com/tpu": flavor}, "count": 4} for i in range(slices)
        ],
    }


ADMITTED = (
    condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue tpu-cq"),
    condition("Admitted", "True", "Admitted", "The workload is admitted"),
)
FLAVOR = s.FlavorView(
    "v5p-flavor",
    node_labels={"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "example.com/team": "a"},
    node_taints=({"key": "example.com/reserved", "value": "a", "effect": "NoSchedule"},),
    tolerations=({"key": "example.com/reserved", "operator": "Equal", "value": "a", "effect": "NoSchedule"},),
)


def step(job, queue, **observed):
    """A pass; a Workload given without pod sets has the job's own (one per slice, of its hosts)."""
    observed.setdefault("now", NOW)
    if queue is not None and queue.workload is not None and not queue.workload.pod_sets:
        own = job_pod_set_facts(job)
        queue = dataclasses.replace(queue, workload=dataclasses.replace(queue.workload, pod_sets=own))
    return s.decide(s.Observed(job=job, queue=queue, **observed))


def advance(job, decision):
    return job.model_copy(update={"status": decision.status})


def pods(job, attempt, phase, ready=None):
    """The job's pods in `phase`; a Running one Ready unless `ready` says otherwise (the kubelet's)."""
    ready = phase == "Running" if ready is None else ready
    return tuple(
        s.PodView(
            naming.pod_name(job, sl, w, attempt),
            sl,
            w,
            attempt,
            phase,
            ready=ready,
        )
        for sl, w in s.expected_workers(job)
    )


def ready_pools(job):
    return tuple(s.PoolView(i, naming.node_pool_name(job, i), "RUNNING") for i in range(job.spec.tpu.slices))


def admitted_queue(*extra_conditions):
    return s.QueueView(
        QUEUE,
        workload=workload(*ADMITTED, *extra_conditions, admission=admission()),
        flavors={FLAVOR.name: FLAVOR},
    )


def running(job):
    """The job admitted and all its workers running, as the status after such a pass says."""
    first = step(job, admitted_queue(), pools=ready_pools(job))
    return step(advance(job, first), admitted_queue(), pods=pods(job, 0, "Running"))


def test_a_job_without_a_workload_creates_one_and_nothing_else():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    queue = s.QueueView(QUEUE, cluster_queue="tpu-cq", priority=PriorityFact(100))
    decision = step(job, queue, pools=(s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),))
    assert decision.workload.create and decision.workload.priority == PriorityFact(100)
    assert (decision.create_pools, decision.create_pods, decision.create_service) == ([], [], False)
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, Reason.WORKLOAD_CREATED)
    assert "ClusterQueue tpu-cq" in decision.status.message
    assert (
        decision.status.queue.name == QUEUE and decision.status.queue.queued_since == "2026-11-27T12:00:00Z"
    )
    assert decision.status.start_time is None  # activeDeadlineSeconds counts from the admission


def test_a_pending_workload_keeps_the_job_queued_with_kueues_words():
    message = (
        "couldn't assign flavors to pod set slice-0: insufficient unused quota for google.com/tpu in flavor "
        "v5p-flavor, 16 more needed"
    )
    queue = s.QueueView(
        QUEUE,
        workload=workload(condition("QuotaReserved", "False", "Pending", message)),
        cluster_queue="tpu-cq",
        pending_workloads=2,
    )
    decision = step(queued_job(), queue)
    assert (decision.create_pools, decision.create_pods, decision.workload.create) == ([], [], False)
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, "Pending")
    assert decision.status.message == (
        f"queued in ClusterQueue tpu-cq: {message}; 2 workload(s) pending in LocalQueue {QUEUE}"
    )
    assert decision.status.queue.cluster_queue == "tpu-cq"
    assert not decision.workload  # nothing to tell Kueue


def test_admitted_job_creates_pools_and_pods_on_its_flavors_nodes():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    first = step(job, admitted_queue(), pools=(s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_MISSING),))
    assert first.create_pools == [0]
    assert [e.reason for e in first.events] == [Reason.ADMITTED, "Provisioning"]
    assert first.status.queue.flavors == {"slice-0": "v5p-flavor"}
    assert first.status.queue.admitted_time == EARLIER and first.status.queue.queued_since is None
    placement = first.placement[0]
    request = node_pool(job, Cluster(), 0, placement=placement)
    assert request["config"]["labels"]["example.com/team"] == "a"
    assert "cloud.google.com/gke-tpu-accelerator" not in request["config"]["labels"]  # GKE's own label
    assert "example.com/team" not in request["config"]["resourceLabels"]
    assert request["config"]["taints"] == [
        {"key": "tpujob.dev/job-uid", "value": job.metadata.uid, "effect": "NO_SCHEDULE"},  # the job's own
        {"key": "example.com/reserved", "value": "a", "effect": "NO_SCHEDULE"},
    ]
    worker = pod(job, Cluster(), 0, 0, placement=placement)["spec"]
    assert worker["nodeSelector"]["example.com/team"] == "a"
    assert FLAVOR.tolerations[0] in worker["tolerations"]
    second = step(advance(job, first), admitted_queue(), pools=ready_pools(job))
    assert second.create_pods == s.expected_workers(job) and second.placement[0] == placement


def test_all_workers_running_reports_pods_ready_once():
    job = queued_job()
    decision = running(job)
    assert decision.status.phase == Phase.RUNNING
    (ready,) = [c for c in decision.workload.conditions if c["type"] == "PodsReady"]
    assert (ready["status"], ready["reason"]) == ("True", "Started")
    assert decision.workload.resource_version == "7"
    told = admitted_queue(ready)
    again = step(advance(job, decision), told, pods=pods(job, 0, "Running"))
    assert again.workload.conditions is None  # already said


def test_a_failed_worker_after_ready_reports_waiting_for_recovery():
    job = queued_job()
    ready = condition("PodsReady", "True", "Started")
    done = running(job)
    failed = pods(job, 0, "Failed")
    decision = step(advance(job, done), admitted_queue(ready), pods=failed)
    assert decision.status.phase == Phase.RESTARTING
    (pods_ready,) = [c for c in decision.workload.conditions if c["type"] == "PodsReady"]
    assert (pods_ready["status"], pods_ready["reason"]) == ("False", "WaitForRecovery")


def test_eviction_stops_the_job_uncounted_then_clears_the_admission():
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4"})
    live = advance(job, running(job))
    evicted = condition(
        "Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: x) due to prioritization"
    )
    queue = admitted_queue(condition("PodsReady", "True", "Started"), evicted)
    stopping = step(live, queue, pods=pods(job, 0, "Running"), pools=ready_pools(job))
    assert sorted(stopping.delete_pods) == sorted(p.name for p in pods(job, 0, "Running"))
    assert stopping.delete_pools == [naming.node_pool_name(job, 0)]
    assert (stopping.status.phase, stopping.status.reason) == (Phase.QUEUED, "Preempted")
    assert stopping.status.restarts == 0 and stopping.status.application_restarts == 0
    assert stopping.status.attempt == 1 and stopping.status.queue.evictions == 1
    assert stopping.workload.conditions is None  # the quota stays reserved while the TPUs are held
    # The pods gone, the pool going: the admission is cleared as Kueue's integration clears it.
    gone = (s.PoolView(0, naming.node_pool_name(job, 0), s.POOL_STOPPING),)
    cleared = step(advance(job, stopping), queue, pools=gone)
    assert cleared.status.queue.evictions == 1 and cleared.status.attempt == 1
    assert cleared.workload.clear_admission
    by_type = {c["type"]: c for c in cleared.workload.conditions}
    assert (by_type["Requeued"]["status"], by_type["Requeued"]["reason"]) == ("True", "Preempted")
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert (by_type["Admitted"]["status"], by_type["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (by_type["PodsReady"]["status"], by_type["PodsReady"]["reason"]) == ("False", "WaitForStart")
    assert by_type["Evicted"] == evicted  # Kueue's own, untouched


def test_a_pods_ready_timeout_is_not_requeued_as_true():
    job = queued_job(nodePool={"policy": "existing"})
    timeout = condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/wl")
    decision = step(advance(job, running(job)), admitted_queue(timeout))
    by_type = {c["type"]: c for c in decision.workload.conditions}
    assert by_type["Requeued"]["status"] == "False" and decision.status.reason == "PodsReadyTimeout"


def test_a_finished_job_finishes_its_workload_and_releases_it():
    job = queued_job(nodePool={"policy": "existing"})
    live = advance(job, running(job))
    decision = step(live, admitted_queue(), pods=pods(job, 0, "Succeeded"))
    assert decision.status.phase == Phase.SUCCEEDED
    (finished,) = [c for c in decision.workload.conditions if c["type"] == "Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    assert decision.workload.release_finalizer


def test_a_suspended_job_deactivates_its_workload_and_reactivates_it_on_resume():
    job = queued_job(runPolicy={"suspend": True})
    decision = step(job, admitted_queue())
    assert decision.status.phase == Phase.SUSPENDED and decision.workload.active is False
    resumed = queued_job(status=decision.status)
    inactive = dataclasses.replace(
        admitted_queue(), workload=dataclasses.replace(admitted_queue().workload, active=False)
    )
    assert step(resumed, inactive).workload.active is True


def test_a_running_job_keeps_running_until_the_workload_watch_has_listed():
    job = queued_job(nodePool={"policy": "existing"})
    live = advance(job, running(job))
    decision = step(live, s.QueueView(QUEUE, known=False), pods=pods(job, 0, "Running"))
    assert (decision.delete_pods, decision.create_pods, decision.workload.create) == ([], [], False)
    assert decision.status.phase == Phase.RUNNING


def test_without_kueue_in_the_operator_a_queued_job_never_runs():
    decision = step(queued_job(), s.QueueView(QUEUE, enabled=False))
    assert (decision.create_pools, decision.create_pods, decision.workload.create) == ([], [], False)
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, Reason.KUEUE_NOT_ENABLED)
    assert "TPUJOB_KUEUE" in decision.status.message


@pytest.mark.parametrize(
    ("api", "slices", "refused"),
    [
        (KueueApi("v1beta1", 8), 9, True),  # Kueue v0.14: v1beta1 only, 8 pod sets
        (KueueApi("v1beta2", 8), 8, False),  # v0.15 to v0.17
        (KueueApi("v1beta2", 10), 10, False),  # v0.18
        (KueueApi("v1beta2", 10), 11, True),
        (KueueApi("v1beta2", 18), 19, True),  # v0.19
    ],
)
def test_more_slices_than_the_served_workload_holds_fails_with_the_fix(api, slices, refused):
    job = queued_job(tpu={"type": "v5e", "topology": "4x4", "slices": slices})
    decision = step(job, s.QueueView(QUEUE, api=api, priority=PriorityFact()))
    assert (decision.status.reason == Reason.INVALID_FOR_KUEUE) == refused
    if refused:
        assert decision.status.phase == Phase.FAILED and not decision.workload.create
        assert (
            f"at most {api.max_pod_sets}" in decision.status.message
            and api.version in decision.status.message
        )
    else:
        assert decision.workload.create and decision.workload.api == api


def test_running_pods_not_yet_ready_are_not_pods_ready():
    """PodsReady follows the pods' Ready condition, not their phase (a Running pod whose container is not
    ready, e.g. its readiness probe failing, is not ready)."""
    job = queued_job()
    first = step(job, admitted_queue(), pools=ready_pools(job))
    decision = step(advance(job, first), admitted_queue(), pods=pods(job, 0, "Running", ready=False))
    (ready,) = [c for c in decision.workload.conditions if c["type"] == "PodsReady"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart")


def test_a_workload_being_deleted_stops_the_job_then_releases_its_finalizer():
    job = queued_job(nodePool={"policy": "existing"})
    live = advance(job, running(job))
    deleting = s.QueueView(QUEUE, workload=workload(*ADMITTED, admission=admission(), deleting=True))
    stopping = step(live, deleting, pods=pods(job, 0, "Running"))
    assert stopping.delete_pods and not stopping.workload.release_finalizer
    released = step(advance(job, stopping), deleting)
    assert released.workload.release_finalizer and not released.workload.create


@pytest.mark.parametrize("missing", ["", "other-flavor"])
def test_an_admission_whose_flavor_cannot_be_read_waits(missing):
    queue = s.QueueView(QUEUE, workload=workload(*ADMITTED, admission=admission(flavor="other-flavor")))
    if not missing:
        queue = dataclasses.replace(queue, flavors={"other-flavor": s.FlavorView("other-flavor")})
    decision = step(queued_job(nodePool={"policy": "existing"}), queue)
    assert bool(decision.create_pods) == (not missing)
    if missing:
        assert decision.status.reason == Reason.KUEUE_UNAVAILABLE and missing in decision.status.message


def test_a_workload_that_no_longer_fits_the_job_is_replaced_once_the_job_holds_nothing():
    """spec.tpu changed (2 slices now, the Workload has 1): what Kueue admitted is not what the job needs."""
    job = queued_job(tpu={"type": "v5p", "topology": "2x2x4", "slices": 2})
    one_slice = job_pod_set_facts(queued_job(tpu={"type": "v5p", "topology": "2x2x4", "slices": 1}))
    stale = s.QueueView(QUEUE, workload=workload(*ADMITTED, admission=admission(), pod_sets=one_slice))
    decision = step(job, stale)
    assert (decision.status.phase, decision.status.reason) == (Phase.QUEUED, Reason.WORKLOAD_REPLACED)
    assert decision.workload.delete and not decision.create_pools and not decision.create_pods
    running_pods = step(job, stale, pods=pods(job, 0, "Running"))
    assert running_pods.delete_pods and not running_pods.workload.delete  # stopped first


def test_a_workload_create_counts_as_a_create_a_standby_confirms_first():
    """Reconciler.confirm_before_create reads the job before any create: a Workload is one."""
    decision = step(queued_job(), s.QueueView(QUEUE, priority=PriorityFact()))
    assert decision.workload.create and decision.creates


def test_a_namespace_that_requires_a_queue_holds_an_unlabelled_job_before_it_holds_anything():
    """Tenancy requireQueue (Kueue's manageJobsWithoutQueueName): a job without the queue label waits as
    Queued, saying which label to add; nothing is asked of GKE. A job that runs already is not stopped."""
    job = parse_tpujob(base_job())
    held = s.decide(s.Observed(job=job, now=NOW, queue_required=True))
    assert (held.status.phase, held.status.reason) == (Phase.QUEUED, Reason.QUEUE_REQUIRED)
    assert c.LABEL_QUEUE_NAME in held.status.message and not held.create_pools
    running_job = advance(job, s.decide(s.Observed(job=job, now=NOW)))
    assert running_job.status.phase == Phase.PROVISIONING
    still = s.decide(s.Observed(job=running_job, now=NOW, queue_required=True))
    assert still.status.reason != Reason.QUEUE_REQUIRED


def test_a_workload_admitted_for_another_tpu_with_the_same_counts_is_replaced():
    """Names and counts are not enough: an admitted v5e 4-chip Workload never runs a v6e 8-chip job (one host
    each). The Workload's pod sets are read from its own templates, as the watch gives them."""
    v5e = queued_job(tpu={"type": "v5e", "topology": "2x2"})
    v6e = queued_job(tpu={"type": "v6e", "topology": "2x4", "machineType": "ct6e-standard-8t"})
    made_for_v5e = workload_view(render_workload(v5e, Cluster(), PriorityFact()))
    assert [(p.name, dict(p.fields)["count"]) for p in made_for_v5e.pod_sets] == [("slice-0", "1")]
    admitted = dataclasses.replace(made_for_v5e, conditions=ADMITTED, admission=admission(flavor="v5e"))
    replaced = step(v6e, s.QueueView(QUEUE, workload=admitted))
    assert (replaced.status.phase, replaced.status.reason) == (Phase.QUEUED, Reason.WORKLOAD_REPLACED)
    assert not replaced.create_pools
    kept = step(v5e, s.QueueView(QUEUE, workload=admitted))
    assert kept.status.reason != Reason.WORKLOAD_REPLACED
