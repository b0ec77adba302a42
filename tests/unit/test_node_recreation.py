"""GKE upgrading or repairing a slice's nodes: which operations mean it, what the GKE client reads of them,
when the operator looks, what the cluster's maintenance policy says, and the restart the decision makes of
it (NodeUpgrade, NodeRepair: never counted)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from google.cloud import container_v1

from tests.manifests import base_job
from tpujob import gke, gke_cluster
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Reason, TPUJobStatus, WorkerCounts
from tpujob.reconciler.observe import needs_gke_look, workers_disturbed
from tpujob.render import Cluster, naming

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
RECREATING = {"UPGRADE_NODES": Reason.NODE_UPGRADE, "AUTO_UPGRADE_NODES": Reason.NODE_UPGRADE,
              "AUTO_REPAIR_NODES": Reason.NODE_REPAIR}  # fmt: skip


@pytest.mark.parametrize(
    "kind", [*(t.name for t in container_v1.Operation.Type), "", None, "SOME_FUTURE_TYPE"]
)
def test_only_node_upgrades_and_auto_repairs_recreate_a_pools_nodes(kind):
    assert s.node_recreation(kind) == RECREATING.get(kind or "")
    assert s.recreates_nodes(kind) is (kind in RECREATING)


# --- the decision ------------------------------------------------------------------------------------


def running_job(**run_policy):
    manifest = base_job(
        "train", tpu={"type": "v5p", "topology": "2x2x2"}, runPolicy={"maxRestarts": 0, **run_policy}
    )
    manifest["metadata"].update(uid="u1", generation=1)
    job = parse_tpujob(manifest)
    pool = naming.node_pool_name(job, 0)
    status = TPUJobStatus(
        phase=Phase.RUNNING,
        reason="Running",
        start_time="2026-11-21T11:00:00Z",
        running_time="2026-11-21T11:05:00Z",
        workers=WorkerCounts(expected=2, running=2),
        node_pools=[{"name": pool, "slice": 0, "state": "RUNNING"}],
    )
    return job.model_copy(update={"status": status})


def workers(job, phase: str, attempt: int = 0, **extra):
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, attempt), sl, w, attempt, phase, **extra)
        for sl, w in s.expected_workers(job)
    )


def pool(job, state: str, disruption: str = "") -> tuple[s.PoolView, ...]:
    name = naming.node_pool_name(job, 0)
    return (
        s.PoolView(
            0, name, state, disruption=disruption, disruption_operation="operation-9" * bool(disruption)
        ),
    )


def step(job, now=NOW, **observed):
    return s.decide(s.Observed(job=job, now=now, **observed))


def advance(job, decision):
    return job.model_copy(update={"status": decision.status})


@pytest.mark.parametrize(
    ("kind", "reason"), [("UPGRADE_NODES", "NodeUpgrade"), ("AUTO_REPAIR_NODES", "NodeRepair")]
)
def test_a_slice_gke_recreates_restarts_the_job_uncounted_and_waits_for_the_pool(kind, reason):
    job = running_job()  # maxRestarts 0: a counted restart would fail the job
    evicted = workers(job, "Running", deleting=True)
    decision = step(job, pods=evicted, pools=pool(job, "RECONCILING", kind))
    status = decision.status
    assert (status.phase, status.reason) == (Phase.PROVISIONING, reason)
    assert f"{kind} operation operation-9" in status.message
    assert status.restarts_by_reason == {reason: 1} and status.application_restarts == 0
    assert status.attempt == 1 and decision.create_pods == []
    assert [e.reason for e in decision.events] == [reason] and decision.events[0].type == "Warning"

    # Still recreating, long past any provisioning timeout: the job waits, restarts no more.
    later = step(
        advance(job, decision), now=NOW + dt.timedelta(hours=3), pools=pool(job, "RECONCILING", kind)
    )
    assert (later.status.phase, later.status.reason, later.status.restarts) == (Phase.PROVISIONING, reason, 1)
    # GKE is done: the new attempt's workers are created.
    back = step(advance(job, later), pools=pool(job, "RUNNING"))
    assert back.create_pods == [(0, 0), (0, 1)] and back.status.attempt == 1
    assert back.status.restarts == 1


def test_a_provisioning_timeout_does_not_end_a_job_whose_slice_gke_recreates():
    job = running_job(provisioningTimeoutSeconds=60)
    first = step(
        job, pods=workers(job, "Running", deleting=True), pools=pool(job, "RECONCILING", "UPGRADE_NODES")
    )
    later = step(
        advance(job, first), now=NOW + dt.timedelta(hours=1), pools=pool(job, "RECONCILING", "UPGRADE_NODES")
    )
    assert later.status.phase == Phase.PROVISIONING and later.status.reason == Reason.NODE_UPGRADE
    assert later.status.provisioning_since == "2026-11-21T12:00:00Z"  # the wait shows, for the stuck alert


def test_a_failure_on_a_pool_gke_leaves_alone_is_judged_as_before():
    job = running_job()
    preempted = workers(job, "Failed", reason="Terminated", exit_code=143)
    decision = step(job, pods=preempted, pools=pool(job, "RUNNING"))
    assert decision.status.restarts_by_reason == {Reason.PREEMPTED: 1}


# --- when the operator asks GKE ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "in_flight", "looks"),
    [
        ("running", 0, False),  # a settled running job's pools are watched through its pods
        ("deleting", 0, True),  # a drain evicts them
        ("failed", 0, True),
        ("one gone", 0, True),  # gone before the watch showed it going
        ("one gone", 1, False),  # created, not yet seen: not gone
    ],
)
def test_a_running_job_asks_gke_about_its_pools_when_a_worker_fails_or_goes(pods, in_flight, looks):
    job = running_job()
    views = {
        "running": workers(job, "Running"),
        "deleting": workers(job, "Running", deleting=True),
        "failed": workers(job, "Failed"),
        "one gone": workers(job, "Running")[:1],
    }[pods]
    flying = frozenset(f"in-flight-{i}" for i in range(in_flight))
    assert job.status is not None
    assert workers_disturbed(job.status, list(views), flying) is looks
    assert needs_gke_look(job, job.status, list(views), flying) is looks


# --- what the GKE client reads --------------------------------------------------------------------------


class _ReconcilingPool:
    """GetNodePool and ListOperations as GKE answers them while it works on pool `p` (real container_v1
    types)."""

    def __init__(self, *operations: container_v1.Operation, status=container_v1.NodePool.Status.RECONCILING):
        self.operations, self.status = list(operations), status

    def get_node_pool(self, name: str, timeout: float) -> container_v1.NodePool:
        return container_v1.NodePool(name="p", status=self.status)

    def list_operations(self, parent: str, timeout: float) -> container_v1.ListOperationsResponse:
        return container_v1.ListOperationsResponse(operations=self.operations)


LINK = "https://container.googleapis.com/v1/projects/my-project/zones/us-central1-a/clusters/my-cluster/nodePools"
Type, OpStatus = container_v1.Operation.Type, container_v1.Operation.Status


def op(kind, target: str, status=OpStatus.RUNNING, name: str = "operation-9") -> container_v1.Operation:
    return container_v1.Operation(name=name, operation_type=kind, target_link=target, status=status)


@pytest.mark.parametrize(
    ("operations", "seen"),
    [
        ([op(Type.UPGRADE_NODES, f"{LINK}/p")], ("UPGRADE_NODES", "operation-9")),
        (
            [op(Type.AUTO_REPAIR_NODES, f"{LINK}/p/node/gke-x-1")],
            ("AUTO_REPAIR_NODES", "operation-9"),
        ),  # a node
        ([op(Type.UPGRADE_NODES, f"{LINK}/p", OpStatus.DONE)], ("", "")),  # over
        ([op(Type.UPGRADE_NODES, f"{LINK}/p2")], ("", "")),  # another pool's
        ([op(Type.SET_LABELS, f"{LINK}/p")], ("", "")),  # work that leaves the nodes be
        ([], ("", "")),
    ],
)
def test_a_reconciling_pool_names_the_operation_recreating_its_nodes(operations, seen):
    """Whatever the workers (status.pools says why the job waits for a RECONCILING pool)."""
    client = _ReconcilingPool(*operations)
    view = gke.NodePools(Cluster(), client).state(0, "p")  # type: ignore[arg-type]
    assert (view.state, view.disruption, view.disruption_operation) == ("RECONCILING", *seen)


def test_a_running_pool_of_a_slice_not_disrupted_is_not_asked_about_operations():
    client = _ReconcilingPool(
        op(Type.UPGRADE_NODES, f"{LINK}/p"), status=container_v1.NodePool.Status.RUNNING
    )
    client.list_operations = None  # type: ignore[assignment,method-assign]  # a read would raise
    assert gke.NodePools(Cluster(), client).state(0, "p").disruption == ""  # type: ignore[arg-type]


# --- the cluster's maintenance policy, as the cluster check reports it ---------------------------------


def exclusion(scope: str, start: dt.datetime, end: dt.datetime) -> container_v1.TimeWindow:
    options = container_v1.MaintenanceExclusionOptions(scope=scope)
    return container_v1.TimeWindow(start_time=start, end_time=end, maintenance_exclusion_options=options)


DAY = dt.timedelta(days=1)


@pytest.mark.parametrize(
    ("exclusions", "said"),
    [
        ({}, "no exclusion holds node upgrades now"),
        ({"f": exclusion("NO_MINOR_OR_NODE_UPGRADES", NOW - DAY, NOW + DAY)},
         "node upgrades held until 2026-11-22T12:00:00Z (exclusion f)"),
        ({"a": exclusion("NO_UPGRADES", NOW - DAY, NOW + DAY),
          "b": exclusion("NO_UPGRADES", NOW, NOW + 2 * DAY)},
         "node upgrades held until 2026-11-23T12:00:00Z (exclusion b)"),  # the last to end
        ({"m": exclusion("NO_MINOR_UPGRADES", NOW - DAY, NOW + DAY)}, "no exclusion holds node upgrades now"),
        ({"old": exclusion("NO_UPGRADES", NOW - 2 * DAY, NOW - DAY)},
         "no exclusion holds node upgrades now"),
        ({"soon": exclusion("NO_UPGRADES", NOW + DAY, NOW + 2 * DAY)},
         "no exclusion holds node upgrades now"),
    ],
)  # fmt: skip
def test_the_cluster_check_says_until_when_node_upgrades_are_held(exclusions, said):
    policy = container_v1.MaintenancePolicy()
    for name, window in exclusions.items():
        policy.window.maintenance_exclusions[name] = window
    summary = gke_cluster.maintenance_summary(policy, NOW)
    assert summary == f"no maintenance window (GKE may upgrade nodes at any time); {said}"


def test_the_cluster_check_names_the_maintenance_window():
    policy = container_v1.MaintenancePolicy()
    policy.window.recurring_window.recurrence = "FREQ=WEEKLY;BYDAY=SA,SU"
    policy.window.recurring_window.window.start_time = NOW
    summary = gke_cluster.maintenance_summary(policy, NOW)
    assert summary.startswith("maintenance window FREQ=WEEKLY;BYDAY=SA,SU from 2026-11-21T12:00:00Z;")


# --- precisely: an operation on the pool restarts nothing unless the workers were disrupted -----------------


@pytest.mark.parametrize("kind", ["UPGRADE_NODES", "AUTO_REPAIR_NODES"])
def test_an_operation_on_the_pool_that_leaves_the_workers_running_restarts_nothing(kind):
    """UPGRADE_NODES covers metadata-only updates ("The nodes are generally still usable during this
    operation": container_v1 Operation.Type): with every worker running, the job runs on."""
    job = running_job()
    decision = step(job, pods=workers(job, "Running"), pools=pool(job, "RECONCILING", kind))
    assert (decision.status.phase, decision.status.restarts) == (Phase.RUNNING, 0)
    assert decision.delete_pods == [] and decision.create_pods == []
    assert not any(e.reason in (Reason.NODE_UPGRADE, Reason.NODE_REPAIR) for e in decision.events)


def test_a_worker_failing_on_its_own_while_gke_updates_the_pool_is_the_applications_failure():
    job = running_job(maxRestarts=1)
    failed = (*workers(job, "Running")[:1], *(
        dataclasses.replace(p, phase="Failed", exit_code=1) for p in workers(job, "Running")[1:]
    ))  # fmt: skip
    decision = step(job, pods=failed, pools=pool(job, "RECONCILING", "UPGRADE_NODES"))
    assert decision.status.restarts_by_reason == {Reason.WORKER_FAILED: 1}
    assert decision.status.application_restarts == 1


@pytest.mark.parametrize(
    ("disrupted", "restarted_as"),
    [
        ({"deleting": True}, Reason.NODE_REPAIR),  # drained by the repair
        # Failed on nodes still there: the ended repair does not explain it; judged as before.
        ({"phase": "Failed", "reason": "Terminated", "exit_code": 143}, Reason.PREEMPTED),
    ],
)
def test_a_repair_that_ended_before_the_operator_looked_is_still_node_repair(disrupted, restarted_as):
    job = running_job()
    pods = tuple(dataclasses.replace(p, **disrupted) for p in workers(job, "Running"))
    (view,) = pool(job, "RUNNING", "AUTO_REPAIR_NODES")
    ended = dataclasses.replace(view, disruption_running=False)
    decision = step(job, pods=pods, pools=(ended,))
    assert decision.status.restarts_by_reason == {restarted_as: 1}
    assert ("ended since the attempt began" in decision.status.message) == (
        restarted_as == Reason.NODE_REPAIR
    )
    assert decision.status.application_restarts == 0


def test_workers_gone_after_a_repair_that_ended_are_node_repair():
    job = running_job()
    (view,) = pool(job, "RUNNING", "AUTO_REPAIR_NODES")
    decision = step(job, pods=(), pools=(dataclasses.replace(view, disruption_running=False),))
    assert decision.status.restarts_by_reason == {Reason.NODE_REPAIR: 1}


@pytest.mark.parametrize(
    "disrupted",
    [{"phase": "Failed", "reason": "Terminated", "exit_code": 143},
     {"phase": "Failed", "exit_code": 1, "conditions": (("DisruptionTarget", "True"),)}],
)  # fmt: skip
def test_a_running_repair_explains_workers_failed_for_their_nodes(disrupted):
    job = running_job()
    pods = tuple(dataclasses.replace(p, **disrupted) for p in workers(job, "Running"))
    decision = step(job, pods=pods, pools=pool(job, "RECONCILING", "AUTO_REPAIR_NODES"))
    assert decision.status.restarts_by_reason == {Reason.NODE_REPAIR: 1}


def test_workers_gone_with_no_operation_on_the_pool_are_node_lost_as_before():
    job = running_job()
    decision = step(job, pods=workers(job, "Running")[:1], pools=pool(job, "RUNNING"))
    assert decision.status.restarts_by_reason == {Reason.NODE_LOST: 1}


BEFORE, AFTER = "2026-11-21T11:55:00Z", "2026-11-21T12:05:00Z"  # the attempt began at NOW (12:00)


def operation(kind: str, target: str, *, done: bool, end: str = "") -> container_v1.Operation:
    status = container_v1.Operation.Status.DONE if done else container_v1.Operation.Status.RUNNING
    return container_v1.Operation(
        name=f"op-{kind}-{end or 'running'}",
        operation_type=kind,
        status=status,
        target_link=target,
        end_time=end,
    )


@pytest.mark.parametrize(
    ("operations", "since", "found"),
    [
        ([], NOW, ("", "", True)),
        ([operation("UPGRADE_NODES", "/nodePools/p", done=False)], None,
         ("UPGRADE_NODES", "op-UPGRADE_NODES-running", True)),
        # A repair of one node under the pool that ended after the attempt began.
        ([operation("AUTO_REPAIR_NODES", "/nodePools/p/node/n1", done=True, end=AFTER)], NOW,
         ("AUTO_REPAIR_NODES", "op-AUTO_REPAIR_NODES-2026-11-21T12:05:00Z", False)),
        # Ended before it: an earlier attempt's.
        ([operation("AUTO_REPAIR_NODES", "/nodePools/p", done=True, end=BEFORE)], NOW, ("", "", True)),
        # Not asked about ended operations: only a running one counts.
        ([operation("AUTO_REPAIR_NODES", "/nodePools/p", done=True, end=AFTER)], None, ("", "", True)),
        # Another pool's, or a type that does not touch nodes.
        ([operation("UPGRADE_NODES", "/nodePools/other", done=False),
          operation("SET_LABELS", "/nodePools/p", done=False)], NOW, ("", "", True)),
    ],
)  # fmt: skip
def test_the_gke_client_reads_the_pools_operations_running_or_ended_since_the_attempt(
    operations, since, found
):
    class Client:
        def list_operations(self, parent: str, timeout: float) -> container_v1.ListOperationsResponse:
            prefix = f"https://container.googleapis.com/v1/{Cluster().parent}"
            for op in operations:
                op.target_link = prefix + op.target_link
            return container_v1.ListOperationsResponse(operations=operations)

    pools = gke.NodePools(Cluster(), Client())  # type: ignore[arg-type]
    assert pools._node_recreation("p", since) == found


def test_an_application_restart_during_an_update_starts_its_new_attempt_on_the_pools_usable_nodes():
    job = running_job(maxRestarts=1)
    failed = (
        *workers(job, "Running")[:1],
        dataclasses.replace(workers(job, "Running")[1], phase="Failed", exit_code=1),
    )
    restarted = step(job, pods=failed, pools=pool(job, "RECONCILING", "UPGRADE_NODES"))
    assert restarted.status.reason == Reason.WORKER_FAILED
    later = step(advance(job, restarted), now=NOW + dt.timedelta(seconds=30),
                 pools=pool(job, "RECONCILING", "UPGRADE_NODES"))  # fmt: skip
    assert later.create_pods == [(0, 0), (0, 1)] and later.status.reason != Reason.NODE_UPGRADE


class _CountingClient:
    """A RUNNING pool whose node GKE repaired after the attempt began; counts the ListOperations reads."""

    def __init__(self) -> None:
        self.lists = 0

    def get_node_pool(self, name: str, timeout: float) -> container_v1.NodePool:
        config = container_v1.NodeConfig(labels={c.POOL_LABEL_JOB_UID: "u1"})  # running_job's
        return container_v1.NodePool(name=name, status=container_v1.NodePool.Status.RUNNING, config=config)

    def list_operations(self, parent: str, timeout: float) -> container_v1.ListOperationsResponse:
        self.lists += 1
        pool = naming.node_pool_name(running_job(), 0)
        target = f"https://container.googleapis.com/v1/{Cluster().parent}/nodePools/{pool}/node/n1"
        repair = operation("AUTO_REPAIR_NODES", target, done=True, end=AFTER)
        return container_v1.ListOperationsResponse(operations=[repair])


@pytest.mark.parametrize(
    ("worker", "reads"),
    [
        ({"phase": "Failed", "exit_code": 1}, 0),  # on its own, its node intact: the application's failure
        ({"phase": "Failed", "exit_code": 1, "conditions": (("DisruptionTarget", "True"),)}, 1),
        ({"phase": "Failed", "reason": "Terminated"}, 1),  # a node shutdown
        ({"deleting": True}, 1),  # drained
        (None, 1),  # gone since the status counted it
    ],
)  # fmt: skip
def test_the_operations_list_is_read_only_for_a_slice_whose_workers_were_disrupted(worker, reads):
    """ListOperations has no filter and is as long as GKE's history: an application's failure does not need
    it (status.recreation restarts for GKE's work only when the slice was disrupted)."""
    from tpujob.reconciler.memory import JobMemory
    from tpujob.reconciler.observe import Observer, Settings

    job = running_job()
    job = job.model_copy(update={"status": job.status.model_copy(update={"start_time": s.timestamp(NOW)})})
    first, second = workers(job, "Running")
    pods = [first] if worker is None else [first, dataclasses.replace(second, **worker)]
    client = _CountingClient()
    observer = Observer(Cluster(), None, gke.NodePools(Cluster(), client), JobMemory(), Settings())  # type: ignore[arg-type]
    (view,) = observer.pool_views(job, pods)
    assert client.lists == reads
    assert view.disruption == ("AUTO_REPAIR_NODES" if reads else "")
    decision = step(job, pods=tuple(pods), pools=(view,))
    repaired = decision.status.restarts_by_reason.get(Reason.NODE_REPAIR, 0)
    assert repaired == (1 if worker is None or worker.get("deleting") else 0)  # an ended repair: drained only
