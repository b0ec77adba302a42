"""One snapshot per pass (reconciler/snapshot.py): what the watches and loops show is taken once, at the
pass's start, and a watch event that lands mid-pass changes the next pass, never this one; the pass reads
facts only from it; and the namespace chip limit is the pure core's gate, its chips reserved when acting."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import tpujob
from tests.unit.test_reconciler import RecordingKube, RecordingPools, job_body, reconciler
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.api.tenancy import TenancyPolicy
from tpujob.gke_cluster import ClusterCheck
from tpujob.handlers import nodes
from tpujob.reconciler import Settings
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.observe import Observer
from tpujob.reconciler.snapshot import Snapshot, Watched
from tpujob.records import JobRecords
from tpujob.render import Cluster
from tpujob.render.workload import KueueApi

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
FAULT = (s.NodeFault("MegascaleHangDetected", "2026-11-21T12:00:00Z", "libtpu says so"),)


def running_existing_job() -> dict[str, Any]:
    body = job_body(status={"phase": "Running", "startTime": "2026-11-21T11:00:00Z", "attempt": 0})
    body["spec"]["nodePool"] = {"policy": "existing"}
    return body


def node_event(name: str, faulty: bool) -> dict[str, Any]:
    conditions = [
        {
            "type": "MegascaleHangDetected",
            "status": "True" if faulty else "False",
            "lastHeartbeatTime": "2026-11-21T12:00:00Z",
            "message": "libtpu says so",
        }
    ]
    return {"type": "MODIFIED", "object": {"metadata": {"name": name}, "status": {"conditions": conditions}}}


class FakeRuntime:
    """What handlers/nodes.node_changed reads of the runtime: the reconciler's facts and the pods' index."""

    def __init__(self, watched: Watched) -> None:
        self.reconciler = type("R", (), {"watched": watched})()
        self.indexes = type("I", (), {"pods": {}})()


def test_a_watch_event_that_lands_mid_pass_does_not_change_what_the_pass_sees() -> None:
    """The pass reads a node's fault, the maintenance notices, GetCluster's answer and Kueue's problem
    from its snapshot: the node watch clearing the fault, the resync's new notices and a new GetCluster
    landing while the pass observes (here: while it looks at its pods' Events) change none of them. Before
    the snapshot, a fault cleared between the pass's membership test and its read was a KeyError."""
    watched = Watched()
    runtime = FakeRuntime(watched)
    nodes.node_changed(runtime, node_event("n-0", faulty=True))  # type: ignore[arg-type]
    watched.set_maintenance({"n-0": 1_900_000_000})
    watched.set_cluster_check(ClusterCheck(version="1.33.1-gke.1"))
    pod = s.PodView(name="train-0-0", slice=0, worker=0, attempt=0, phase="Running", node="n-0")
    snapshot = watched.take(json.dumps(running_existing_job()), [pod], service_exists=True)

    observer = Observer(Cluster(), RecordingKube(), None, JobMemory(JobRecords()), Settings(), None, watched)
    looked = []
    original = observer.volume_problems

    def events_land_meanwhile(*args: Any) -> Any:
        nodes.node_changed(runtime, node_event("n-0", faulty=False))  # type: ignore[arg-type]
        watched.set_maintenance({})
        watched.set_cluster_check(ClusterCheck(problem="gone"))
        watched.set_kueue_problem("the Workload watch failed")
        gone = s.PodView("train-1-0", 1, 0, 0, "Failed", deleting=True, message="last words")
        observer.memory.pod_departing("uid-1", gone)  # a worker's deletion, seen by the pods' watch
        looked.append(True)
        return original(*args)

    observer.volume_problems = events_land_meanwhile  # type: ignore[method-assign]
    job = parse_tpujob(snapshot.body())
    observed = observer.observe(job, snapshot, NOW)

    assert looked, "the events landed during the pass"
    assert observed.node_faults == {"n-0": FAULT}
    assert observed.maintenance == {"n-0": 1_900_000_000}
    assert observed.cluster_version == "1.33.1-gke.1"
    assert snapshot.kueue_problem == "" and observed.departed == ()
    # The next pass sees them.
    after = observer.observe(job, watched.take(snapshot.wire, [pod], True), NOW)
    assert after.node_faults == {} and after.maintenance == {} and after.cluster_version == ""


def test_a_snapshot_holds_the_watches_objects_not_copies() -> None:
    """Cheap to take: references to the index's job text and pod views and to the facts' maps, which are
    replaced whole when they change, never changed in place."""
    watched = Watched()
    watched.set_node_faults("n-0", FAULT)
    watched.set_kueue(KueueApi("v1beta2", 18), "")
    pods = [s.PodView(name="p", slice=0, worker=0, attempt=0, phase="Running", node="n-0")]
    wire = json.dumps(running_existing_job())
    first = watched.take(wire, pods)
    assert first.wire is wire and first.pods[0] is pods[0]
    assert watched.take(wire).node_faults is first.node_faults  # unchanged: the same map
    assert not watched.set_node_faults("n-0", FAULT), "the same faults again change nothing"
    watched.set_node_faults("n-1", FAULT)
    assert dict(first.node_faults) == {"n-0": FAULT}, "the first snapshot's map is as it was"
    assert first.kueue == KueueApi("v1beta2", 18)
    try:
        first.node_faults["n-2"] = FAULT  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("a snapshot's maps are read-only")
    assert dataclasses.is_dataclass(first) and Snapshot.__dataclass_params__.frozen  # type: ignore[attr-defined]


# The facts a pass must read from its snapshot only; every module of the reconciler is held to it.
FACTS = {"maintenance", "node_faults", "cluster_check", "kueue_problem", "workloads", "network_policy_seen"}
# What the loops run between passes to refresh the facts (GetCluster, the nodes' notices): no pass.
WRITERS = {"check_cluster", "refresh_maintenance"}
RECONCILER = Path(tpujob.__file__).parent / "reconciler"
PASS_MODULES = sorted(p.name for p in RECONCILER.glob("*.py") if p.name != "snapshot.py")


def test_the_pass_reads_the_watches_facts_only_from_its_snapshot() -> None:
    """In the modules of a pass, every read of a watched fact is `snapshot.<fact>`: no attribute of the
    Observer, the Reconciler or another object carries one into a pass; the cluster's facts are kept by
    `Watched`, whose only reader is `take`."""
    found = []
    for name in PASS_MODULES:
        tree = ast.parse((RECONCILER / name).read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or function.name in WRITERS:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Attribute) and node.attr in FACTS:
                    owner = ast.unparse(node.value)
                    if owner != "snapshot":
                        found.append(f"{name}:{node.lineno}: {owner}.{node.attr}")
    assert found == []
    # Watched's own state is private, read in one method.
    tree = ast.parse((RECONCILER / "snapshot.py").read_text())
    (watched,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Watched"]
    readers = {
        method.name
        for method in watched.body
        if isinstance(method, ast.FunctionDef)
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Load)
        and node.attr.startswith("_")
        and node.attr.lstrip("_") in {"maintenance", "node_faults", "cluster_check", "kueue", "kueue_problem"}
    }
    assert readers <= {"take", "set_node_faults", "set_cluster_check"}  # the last two: copy on write
    # The pass's one entry point takes one argument.
    passes = ast.parse((RECONCILER / "passes.py").read_text())
    (cls,) = [n for n in passes.body if isinstance(n, ast.ClassDef) and n.name == "Reconciler"]
    (entry,) = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "reconcile"]
    assert [a.arg for a in entry.args.args] == ["self", "snapshot"]


def limited(max_chips: int) -> Settings:
    policy = TenancyPolicy.model_validate({"defaults": {"maxChips": max_chips}})
    return Settings(tenancy=policy, confirm_before_create=False)


def v5e_job(name: str, uid: str) -> dict[str, Any]:
    body = job_body(name=name, uid=uid)
    body["spec"]["tpu"] = {"type": "v5e", "topology": "4x4"}  # 16 chips
    return body


def another_pass_reserves_meanwhile(passes: Any) -> None:
    """Between this pass's read of the namespace's counts and its reservation, another job's pass reserves
    all 16 chips of the limit (two passes side by side)."""
    counts = passes.chips.counts

    def the_other_reserves_meanwhile(job: Any, limit: int) -> s.ChipCounts:
        found = counts(job, limit)
        passes.chips.reserve("uid-other", s.ChipReservation("default", 16, 16))
        return found

    passes.chips.counts = the_other_reserves_meanwhile


def test_a_job_whose_chips_a_pass_side_by_side_took_is_held_and_nothing_is_created() -> None:
    """Both jobs fit when each pass counts; the other's pass reserves first: this one's reservation
    finds no room, so it creates nothing (no finalizer, no pool) and settles held with ChipLimit."""
    api, pools = RecordingKube(), RecordingPools()
    passes = reconciler(pools, api, limited(16))
    another_pass_reserves_meanwhile(passes)
    passes.run(v5e_job("late", "uid-late"), [], False)

    assert pools.created == [] and api.of("patch_tpujob") == []
    ((_, written),) = api.of("patch_tpujob_status")
    assert written["status"]["phase"] == Phase.PENDING and written["status"]["reason"] == Reason.CHIP_LIMIT
    assert "startTime" not in written["status"] or written["status"]["startTime"] is None
    assert passes.records.namespace_chips("default") == 16, "only the other's chips are counted"


def test_a_job_that_fits_is_reserved_when_acting_and_released_when_it_ends() -> None:
    api, pools = RecordingKube(), RecordingPools()
    passes = reconciler(pools, api, limited(32))
    passes.run(v5e_job("first", "uid-first"), [], False)
    assert len(pools.created) == 1
    assert passes.records.namespace_chips("default") == 16
    passes.chips.settled("uid-first", TPUJobStatus(phase=Phase.FAILED))  # as its last pass settles
    assert passes.records.namespace_chips("default") == 0


def test_a_claimed_admission_whose_chips_a_pass_side_by_side_took_is_held_and_its_clock_taken_back() -> None:
    """A status that claims an admission nothing vouches for is judged again (budget.recheck); when the
    reservation then finds the room taken, the job is held as any other, its startTime taken back, not left
    admitted uncounted."""
    api, pools = RecordingKube(), RecordingPools()
    passes = reconciler(pools, api, limited(16))
    another_pass_reserves_meanwhile(passes)
    body = v5e_job("forged", "uid-forged")
    body["status"] = {"phase": "Provisioning", "startTime": "2026-11-21T11:00:00Z"}
    passes.run(body, [], False)

    assert pools.created == []
    ((_, written),) = api.of("patch_tpujob_status")
    assert written["status"]["reason"] == Reason.CHIP_LIMIT and written["status"].get("startTime") is None
    assert passes.records.namespace_chips("default") == 16
