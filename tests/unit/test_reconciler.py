"""The code that acts on the APIs, alone: the pass's writes (act), its memory between passes, what it
observes, and the Reconciler's orchestration, against in-memory stand-ins for the Kubernetes and GKE
clients that record every call. The e2e suite runs the same code against the real API server."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import pytest

from tests.manifests import base_job, with_change
from tests.unit.test_gke import gke_error
from tpujob import kube, metrics
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.api.spec import CapacityMode, CapacitySpec
from tpujob.api.status import Phase, Reason
from tpujob.gke import OwnedPool, classify_error, refuses_upgrade_shield
from tpujob.reconciler import Reconciler, Settings
from tpujob.reconciler import memory as memory_module
from tpujob.reconciler.act import Actions
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.parts import with_removals
from tpujob.reconciler.passes import Outcome
from tpujob.render import Cluster, naming
from tpujob.render import pools as render_pools
from tpujob.render.network import NAMESPACE_POLICY_NAME


class RecordingKube:
    """The Kubernetes calls a pass makes, in order, as (method, namespace, argument); `fail` maps a
    method's name to the error it raises. TPUJobs to be found by get_tpujob are in `jobs`; any other is
    found as the job under test (uid-1, as job_body makes it) unless its (namespace, name) is in `gone`."""

    def __init__(self, jobs: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.jobs = jobs or {}
        self.gone: set[tuple[str, str]] = set()
        self.fail: dict[str, Exception] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100

    def _call(self, method: str, namespace: str, argument: Any) -> None:
        self.calls.append((method, namespace, argument))
        if method in self.fail:
            raise self.fail[method]

    def create_pod(self, namespace: str, body: dict[str, Any]) -> bool:
        self._call("create_pod", namespace, body)
        return True

    def create_service(self, namespace: str, body: dict[str, Any]) -> bool:
        self._call("create_service", namespace, body)
        return True

    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> bool:
        self._call("create_network_policy", namespace, body)
        return True

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        self._call("create_event", namespace, body)
        return True

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> bool:
        self._call("create_config_map", namespace, body)
        name = body["metadata"]["name"]
        if (namespace, name) in self.config_maps:
            return False
        self.config_maps[namespace, name] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return True

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_config_map", namespace, name)
        return self.config_maps.get((namespace, name))

    def patch_config_map(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._call("patch_config_map", namespace, (name, patch))
        self.config_maps[namespace, name]["data"] = patch["data"]

    def delete_pod(self, namespace: str, name: str) -> bool:
        self._call("delete_pod", namespace, name)
        return True

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        self._call("list_nodes", "", label_selector)
        return []

    def get_tpujob(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._call("get_tpujob", namespace, name)
        if (namespace, name) in self.gone:
            return None
        return self.jobs.get((namespace, name), {"metadata": {"uid": "uid-1"}})

    def list_tpujob_uids(self, namespace: str | None) -> set[str]:
        self._call("list_tpujob_uids", namespace or "", None)
        return {
            job["metadata"]["uid"]
            for (ns, _), job in self.jobs.items()
            if namespace is None or ns == namespace
        }

    def _patched(self, method: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._call(method, namespace, (name, patch))
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}}

    def patch_tpujob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._patched("patch_tpujob", namespace, name, patch)

    def patch_tpujob_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._patched("patch_tpujob_status", namespace, name, patch)

    def delete_tpujob(self, namespace: str, name: str, propagation: str = "Background") -> bool:
        self._call("delete_tpujob", namespace, name)
        return True

    def of(self, method: str) -> list[Any]:
        """The arguments of every call of one method, in order."""
        return [argument for called, _, argument in self.calls if called == method]


class RecordingPools:
    """GKE node pools by name and state; creates and deletes recorded, refusals on demand."""

    def __init__(self, states: dict[str, str] | None = None, owned: list[OwnedPool] | None = None) -> None:
        self.states = states or {}
        self.owned_pools = owned or []
        self.create_error: s.GKEError | None = None
        self.refuse_shield: s.GKEError | None = None  # a create carrying the upgrade exclusion is refused so
        self.delete_error: s.GKEError | None = None
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.uids: dict[str, str] = {}  # a pool's job-uid label, when not the job under test's (uid-1)

    def state(self, slice_index: int, name: str, operation: str = "", since: Any = None) -> s.PoolView:
        state = self.states.get(name, s.POOL_MISSING)
        uid = None if state == s.POOL_MISSING else self.uids.get(name, "uid-1")
        return s.PoolView(slice_index, name, state, operation=operation, job_uid=uid)

    def create(self, pool: dict[str, Any]) -> tuple[str, s.GKEError | None]:
        self.created.append(pool)
        if self.refuse_shield is not None and "maintenancePolicy" in pool:
            return "", self.refuse_shield
        if self.create_error is None:
            self.states[pool["name"]] = "PROVISIONING"
            return f"operation-{len(self.created)}", None
        return "", self.create_error

    def delete(self, name: str, job_uid: str) -> s.GKEError | None:
        self.deleted.append(name)
        if self.delete_error is None and name in self.states:
            self.states[name] = s.POOL_STOPPING
        return self.delete_error

    def owned(self) -> list[OwnedPool]:
        return self.owned_pools


def sample(counter: Any, **labels: str) -> float:
    """A counter's current value for the labels, through the public collect() interface."""
    for family in counter.collect():
        for item in family.samples:
            if item.name.endswith("_total") and item.labels == labels:
                return float(item.value)
    return 0.0


def job_body(
    manifest: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    body = manifest or base_job()
    body["metadata"].update({"uid": "uid-1", "resourceVersion": "1", "generation": 1, **meta})
    if status is not None:
        body["status"] = status
    return body


def pool_name(body: dict[str, Any], slice_index: int) -> str:
    return naming.node_pool_name(parse_tpujob({**body, "status": None}), slice_index)


STOCKOUT = s.GKEError(Reason.STOCKOUT, "no capacity", permanent=False)
REJECTED = s.GKEError(Reason.POOL_REJECTED, "Invalid machine type", permanent=True)


# --- act: each write alone -------------------------------------------------------------------------


def test_a_pool_delete_is_counted_as_accepted_or_refused_and_says_which() -> None:
    pools = RecordingPools({"p": "RUNNING"})
    actions = Actions(RecordingKube(), pools, JobMemory())  # type: ignore[arg-type]
    accepted = sample(metrics.POOL_OPERATIONS_TOTAL, operation="delete", result="accepted")
    refused = sample(metrics.GKE_ERRORS, reason=Reason.GKE_UNAVAILABLE)

    assert actions.gke.delete_pool("p", "uid-1") is True
    pools.delete_error = s.GKEError(Reason.GKE_UNAVAILABLE, "503", permanent=False)
    assert actions.gke.delete_pool("p", "uid-1") is False

    assert sample(metrics.POOL_OPERATIONS_TOTAL, operation="delete", result="accepted") == accepted + 1
    assert sample(metrics.GKE_ERRORS, reason=Reason.GKE_UNAVAILABLE) == refused + 1
    assert pools.deleted == ["p", "p"]


def test_every_create_is_tried_and_the_first_failure_is_raised_after_all() -> None:
    api = RecordingKube()
    api.fail["create_pod"] = kube.ApiError(403, "Forbidden")
    actions = Actions(api, None, JobMemory())  # type: ignore[arg-type]
    pods = [{"metadata": {"name": f"w-{i}"}} for i in range(3)]

    with pytest.raises(kube.ApiError, match="Forbidden"):
        actions.workers.create_pods("ns", pods)

    created = [body["metadata"]["name"] for _, _, body in api.calls]
    assert sorted(created) == ["w-0", "w-1", "w-2"]


def test_the_service_comes_after_the_pods_and_a_refused_one_is_asked_again_by_the_next_pass() -> None:
    """The pass does not wait for its Service (reconciler/behind.py); one the API server refused is not
    taken as made: the job's next pass asks again, and once made it is not asked twice."""
    api = RecordingKube()
    api.fail["create_service"] = kube.ApiError(403, "exceeded quota: services")
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], False)
    creates = [m for m, _, _ in api.calls if m in ("create_pod", "create_service")]
    assert creates == ["create_pod", "create_service"]
    del api.fail["create_service"]
    passes.run(existing_job_body(), [], False)  # the pod is in flight; the Service is not
    passes.run(existing_job_body(), [], False)  # made and in flight: not asked again
    assert len(api.of("create_service")) == 2 and len(api.of("create_pod")) == 1


def test_a_status_write_to_a_deleted_job_is_nothing_and_other_errors_are_raised() -> None:
    api = RecordingKube()
    actions = Actions(api, None, JobMemory())  # type: ignore[arg-type]
    assert actions.patch_status("ns", "j", {"phase": "Running"}) == "101"

    api.fail["patch_tpujob_status"] = kube.ApiError(404, "NotFound")
    assert actions.patch_status("ns", "j", {"phase": "Running"}) is None

    api.fail["patch_tpujob_status"] = kube.ApiError(409, "Conflict")
    with pytest.raises(kube.ApiError):
        actions.patch_status("ns", "j", {"phase": "Running"})


def test_the_finalizer_is_added_once_guarded_by_the_resource_version() -> None:
    api = RecordingKube()
    actions = Actions(api, None, JobMemory())  # type: ignore[arg-type]
    meta = {"name": "j", "namespace": "ns", "resourceVersion": "41", "finalizers": ["other"]}
    actions.ensure_finalizer(meta)
    actions.ensure_finalizer({**meta, "finalizers": ["other", c.FINALIZER]})

    assert api.of("patch_tpujob") == [
        ("j", {"metadata": {"finalizers": ["other", c.FINALIZER], "resourceVersion": "41"}})
    ]


def test_a_lost_event_does_not_fail_the_pass() -> None:
    api = RecordingKube()
    api.fail["create_event"] = kube.ApiError(500, "InternalError")
    actions = Actions(api, None, JobMemory())  # type: ignore[arg-type]
    meta = {"name": "j", "namespace": "ns", "uid": "u"}
    actions.post_events(
        meta, [s.Event("Normal", "A", "a"), s.Event("Normal", "B", "b")], dt.datetime.now(dt.UTC)
    )
    assert actions.events.drain(timeout=10), "the poster goes on after a failed post"
    assert [body["reason"] for body in api.of("create_event")] == ["A", "B"]


# --- memory: what the watch has not shown yet, and GKE's refusals ----------------------------------


def test_permanent_refusals_back_off_longer_each_time_and_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(memory_module.time, "monotonic", lambda: clock[0])
    memory = JobMemory()

    first = memory.refused("u", {0: REJECTED}, poll_seconds=5)
    second = memory.refused("u", {0: REJECTED}, poll_seconds=5)
    assert (first, second) == (s.rejected_backoff_seconds(1), s.rejected_backoff_seconds(2))
    assert second > first
    assert memory.refusals("u") == {0: REJECTED}

    clock[0] += second
    assert memory.refusals("u") == {}
    memory.accepted("u")
    assert memory.refused("u", {0: REJECTED}, poll_seconds=5) == first  # the count started over
    assert memory.refused("u", {0: STOCKOUT}, poll_seconds=1.5) == 1.5  # TPUJOB_POLL_PROVISIONING_SECONDS


def test_pods_in_flight_are_dropped_once_the_watch_shows_them() -> None:
    memory = JobMemory()
    memory.pods_created("u", ["a", "b"])
    seen = [s.PodView(name="a", slice=0, worker=0, attempt=0, phase="Pending")]
    assert memory.pods_in_flight("u", seen) == frozenset({"b"})
    assert memory.pods_in_flight("u", []) == frozenset({"b"})
    both = [*seen, s.PodView(name="b", slice=0, worker=0, attempt=0, phase="Pending")]
    assert memory.pods_in_flight("u", both) == frozenset()
    assert memory.records.read("u", lambda r: r.pods_in_flight, None) == frozenset(), "none kept once seen"
    memory.pods_created("u", ["c"])
    memory.records.forget("u")
    assert memory.pods_in_flight("u", []) == frozenset()


def test_own_status_write_is_read_back_until_the_watch_has_it() -> None:
    memory = JobMemory()
    body = job_body(status={"phase": "Pending"})
    assert memory.current_status(body) == {"phase": "Pending"}
    memory.decided("uid-1", {"phase": "Provisioning"})
    assert memory.current_status(body) == {"phase": "Provisioning"}, "decided, not yet written"
    memory.written("uid-1", "7")
    assert memory.current_status(body) == {"phase": "Provisioning"}
    assert not memory.is_own_write(body)
    assert memory.is_own_write(job_body(resourceVersion="7"))
    memory.records.forget("uid-1")
    memory.written("uid-1", "8")  # a write that was in flight when the job was deleted
    assert memory.records.uids() == set()


def test_a_decided_status_is_forgotten_once_the_watch_shows_it() -> None:
    memory = JobMemory()
    memory.decided("uid-1", {"phase": "Provisioning"})
    memory.written("uid-1", "7")
    assert memory.current_status(job_body(status={"phase": "Pending"})) == {"phase": "Provisioning"}
    assert memory.records.read("uid-1", lambda r: r.written, None), "kept while the watch shows an older one"
    shown = job_body(resourceVersion="7", status={"phase": "Provisioning"})
    assert memory.current_status(shown) == {"phase": "Provisioning"}
    assert memory.records.read("uid-1", lambda r: r.written, None) is None, "the watched body holds it now"
    assert memory.is_own_write(shown), "its echo is still known as ours"


# --- the pass: observe, decide, act ----------------------------------------------------------------


class SettledReconciler(Reconciler):
    """Each pass returns once its status write, Events and Service, sent by background threads, were sent:
    the tests read what a pass wrote."""

    def run(
        self,
        body: dict[str, Any],
        pods: list[s.PodView],
        service_exists: bool,
        workloads: list[s.WorkloadView] | None = None,
        network_policy_seen: bool = False,
    ) -> Outcome:
        """A pass over a snapshot of these objects, as the work queue takes one."""
        wire = json.dumps(body, separators=(",", ":"))
        departed = self.memory.departed(body["metadata"]["uid"], pods)
        snapshot = self.watched.take(wire, pods, service_exists, workloads, network_policy_seen, departed)
        outcome = self.reconcile(snapshot)
        assert self.status_writer.drain(timeout=10) and self.actions.events.drain(timeout=10)
        assert self.actions.workers.behind.drain(timeout=10)
        return outcome


def reconciler(
    pools: RecordingPools | None, api: RecordingKube | None = None, settings: Settings | None = None
) -> SettledReconciler:
    return SettledReconciler(Cluster(), api or RecordingKube(), pools, settings)  # type: ignore[arg-type]


def test_a_new_job_gets_the_finalizer_before_its_pool_and_a_provisioning_status() -> None:
    api, pools = RecordingKube(), RecordingPools()
    outcome = reconciler(pools, api).run(job_body(), [], False)

    writes = [method for method, _, _ in api.calls if method.startswith("patch")]
    assert writes == ["patch_tpujob", "patch_tpujob_status"]  # the finalizer first
    assert [p["name"] for p in pools.created] == [pool_name(job_body(), 0)]
    ((name, status_patch),) = api.of("patch_tpujob_status")
    assert name == "train"
    assert status_patch["status"]["phase"] == Phase.PROVISIONING
    assert outcome.requeue_after is not None and outcome.requeue_after <= 1


def test_a_pass_on_a_job_the_api_server_no_longer_has_creates_nothing_and_reports_it_vanished() -> None:
    """The watch's cache of a replica that stood by may hold a job deleted meanwhile (finalizer still in the
    cached body): the pass reads the job before creating anything, and creates nothing."""
    api, pools = RecordingKube(), RecordingPools()
    api.gone.add(("default", "train"))
    body = job_body()
    body["metadata"]["finalizers"] = [c.FINALIZER]

    outcome = reconciler(pools, api).run(body, [], False)

    assert outcome.vanished and outcome.requeue_after is None
    assert pools.created == [] and api.of("create_pod") == [] and api.of("patch_tpujob_status") == []
    assert api.of("get_tpujob") == ["train"]


def test_a_job_gone_at_its_status_write_is_forgotten() -> None:
    api, pools = RecordingKube(), RecordingPools()
    api.fail["patch_tpujob_status"] = kube.ApiError(status=404, reason="Not Found")
    passes = reconciler(pools, api)
    body = job_body()
    body["metadata"]["finalizers"] = [c.FINALIZER]

    passes.run(body, [], False)

    assert len(api.of("patch_tpujob_status")) == 1
    assert passes.records.uids() == set()  # nothing remembered for it


def test_a_refused_create_is_not_asked_again_while_its_backoff_lasts() -> None:
    pools = RecordingPools()
    pools.create_error = REJECTED
    passes = reconciler(pools)
    passes.run(job_body(), [], False)
    passes.run(job_body(), [], False)

    # A refusal that is not about the upgrade exclusion is not asked again without it: one create, the
    # refusal stands, and the backoff holds the second pass back.
    assert [("maintenancePolicy" in pool) for pool in pools.created] == [True]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        # A zone that offers no v6e, as GKE refuses it (tpujob_sandbox/gke's zone check).
        ("INVALID_ARGUMENT", "Machine type ct6e-standard-4t is not available in zone us-east1-b"),
        # A FAILED_PRECONDITION in other words than GKE's "busy" ones (gke.BUSY_WORDS): a refusal for good.
        ("FAILED_PRECONDITION", "The requested node pool configuration is not supported."),
    ],
)
def test_a_permanent_refusal_is_asked_for_once_per_backoff_step(
    monkeypatch: pytest.MonkeyPatch, status: str, message: str
) -> None:
    """A pass every 0.2 s for 60 s (the passes a resync and the pool polls bring): GKE is asked once when
    each backoff step ends (1, 2, 4 ... s, capped), each time with the upgrade exclusion (the refusal does
    not name it), never twice in a row. Before the fix: a second create without the exclusion at once."""
    clock = [1000.0]
    monkeypatch.setattr(memory_module.time, "monotonic", lambda: clock[0])
    pools = RecordingPools()
    pools.create_error = classify_error(gke_error(400, status, message))
    assert pools.create_error.reason == Reason.POOL_REJECTED and pools.create_error.permanent
    passes = reconciler(pools, settings=Settings(refused_backoff_seconds=1.0))
    asked_at: list[float] = []
    for tick in range(300):
        clock[0] = 1000.0 + tick * 0.2
        before = len(pools.created)
        passes.run(job_body(), [], False)
        asked_at += [round(clock[0] - 1000.0, 1)] * (len(pools.created) - before)

    expected, when = [], 0.0
    while when < 60:
        expected.append(when)
        when = round(when + s.rejected_backoff_seconds(len(expected), 1.0), 1)
    assert asked_at == expected  # [0, 1, 3, 7, 15, 31, 51]: 7 creates, not 14 in pairs
    assert all("maintenancePolicy" in pool for pool in pools.created)


SHIELD_REFUSED = s.GKEError(
    Reason.POOL_REJECTED,
    'Invalid JSON payload received. Unknown name "exclusionUntilEndOfSupport" at '
    "'node_pool.maintenance_policy': Cannot find field.",
    permanent=True,
)


def test_a_create_gke_takes_only_without_the_upgrade_shield_is_made_so_said_and_remembered() -> None:
    api, pools = RecordingKube(), RecordingPools()
    pools.refuse_shield = SHIELD_REFUSED
    before = metrics.UPGRADE_SHIELD_REFUSED._value.get()
    passes = reconciler(pools, api)
    # Two slices: the first pool finds that GKE does not take the field; this process remembers it, and the
    # second pool (as any later one) is asked once, without it.
    passes.run(
        job_body(with_change("spec.tpu", {"type": "v5p", "topology": "2x2x4", "slices": 2})), [], False
    )
    passes.actions.events.stop(5)

    assert [("maintenancePolicy" in pool) for pool in pools.created] == [True, False, False]
    assert metrics.UPGRADE_SHIELD_REFUSED._value.get() == before + 1
    events = [e for e in api.of("create_event") if e["reason"] == "UpgradeShieldRefused"]
    assert events and all(e["type"] == "Warning" and SHIELD_REFUSED.message in e["message"] for e in events)


@pytest.mark.parametrize(
    ("message", "about_the_shield"),
    [
        (SHIELD_REFUSED.message, True),
        ("Invalid value at 'node_pool.maintenance_policy.exclusion_until_end_of_support'", True),
        ("Machine type ct6e-standard-4t is not available in zone us-east1-b", False),
        ("Invalid machine type", False),
    ],
)
def test_only_a_refusal_that_names_the_exclusion_is_read_as_refusing_it(
    message: str, about_the_shield: bool
) -> None:
    assert (
        refuses_upgrade_shield(s.GKEError(Reason.POOL_REJECTED, message, permanent=True)) is about_the_shield
    )
    assert not refuses_upgrade_shield(s.GKEError(Reason.GKE_BUSY, SHIELD_REFUSED.message))


def test_the_upgrade_shield_is_left_out_when_the_setting_is_off_and_on_flex_start_pools() -> None:
    job = parse_tpujob(job_body())
    assert "maintenancePolicy" in render_pools.node_pool(job, Cluster(), 0)
    assert "maintenancePolicy" not in render_pools.node_pool(job, Cluster(upgrade_shield=False), 0)
    flex = job.model_copy(
        update={"spec": job.spec.model_copy(update={"capacity": CapacitySpec(mode=CapacityMode.flex_start)})}
    )
    assert "maintenancePolicy" not in render_pools.node_pool(flex, Cluster(), 0)


def test_a_job_edited_into_an_invalid_spec_releases_what_it_had_once() -> None:
    name = pool_name(job_body(), 0)
    api, pools = RecordingKube(), RecordingPools({name: "RUNNING"})
    status = {"phase": "Running", "nodePools": [{"slice": 0, "name": name, "state": "RUNNING"}]}
    body = job_body(with_change("spec.tpu.topology", "3x3"), status=status)
    pod = s.PodView(name="train-0-0", slice=0, worker=0, attempt=0, phase="Running")
    passes = reconciler(pools, api)

    passes.run(body, [pod], True)
    assert pools.deleted == [name]
    assert api.of("delete_pod") == ["train-0-0"]
    (_, patch) = api.of("patch_tpujob_status")[-1]
    assert (patch["status"]["phase"], patch["status"]["reason"]) == (Phase.FAILED, Reason.INVALID_SPEC)
    assert patch["status"]["nodePools"][0]["state"] == s.POOL_STOPPING
    assert passes.actions.events.drain(timeout=10)
    assert [e["reason"] for e in api.of("create_event")] == [Reason.INVALID_SPEC]

    # The next pass reads its own write: nothing more to release, no second event.
    passes.run(body, [], True)
    assert pools.deleted == [name]
    assert passes.actions.events.drain(timeout=10)
    assert len(api.of("create_event")) == 1


def test_releasing_a_deleted_jobs_pools_deletes_each_once_and_names_what_remains() -> None:
    body = job_body(base_job(tpu={"type": "v5e", "topology": "4x4", "slices": 3}))
    first, second = pool_name(body, 0), pool_name(body, 1)
    pools = RecordingPools({first: "RUNNING", second: s.POOL_STOPPING})
    passes = reconciler(pools)

    assert passes.release_pools(body) == [first, second]
    assert pools.deleted == [first]  # the second is already going; the third never existed
    pools.states.clear()
    assert passes.release_pools(body) == []


def test_the_sweep_deletes_only_pools_whose_job_is_gone_within_its_namespace() -> None:
    owned = [
        OwnedPool("live", "ns", "a", "uid-live", "RUNNING"),
        OwnedPool("orphan", "ns", "b", "uid-gone", "RUNNING"),
        OwnedPool("not-yet-indexed", "ns", "c", "uid-c", "RUNNING"),
        OwnedPool("elsewhere", "other", "d", "uid-x", "RUNNING"),
        OwnedPool("going", "ns", "e", "uid-y", s.POOL_STOPPING),
        OwnedPool("by-hand", "ns", "f", "", "RUNNING"),
    ]
    # What the API server has now: the live job, and one created after the watch's last event.
    api = RecordingKube(
        {("ns", "a"): {"metadata": {"uid": "uid-live"}}, ("ns", "c"): {"metadata": {"uid": "uid-c"}}}
    )
    pools = RecordingPools({p.name: p.state for p in owned}, owned)

    deleted = reconciler(pools, api).sweep_orphans(namespace="ns")

    assert deleted == ["orphan"]
    assert pools.deleted == ["orphan"]
    assert api.of("list_tpujob_uids") == [None]  # one list of the namespace's jobs, after the pools


def test_the_sweep_leaves_a_pool_whose_job_finished_deleting_between_its_lists() -> None:
    """The pool listed, then its job's deletion ends (the finalizer waited for the pool to go), then the job
    list has no such job: the second pool list shows the pool gone or going, so it is nobody's orphan."""
    listed = OwnedPool("tj-done", "ns", "done", "uid-done", "RUNNING")
    orphan = OwnedPool("orphan", "ns", "b", "uid-gone", "RUNNING")
    lists = iter([[listed, orphan], [orphan]])  # the first list, then the second one

    class ChangingPools(RecordingPools):
        def owned(self) -> list[OwnedPool]:
            return next(lists)

    api = RecordingKube({})
    pools = ChangingPools({"orphan": "RUNNING"}, [])

    assert reconciler(pools, api).sweep_orphans(namespace="ns") == ["orphan"]
    assert pools.deleted == ["orphan"]


def test_the_sweep_says_each_orphan_once_when_gke_takes_its_delete(caplog: pytest.LogCaptureFixture) -> None:
    """GKE refuses a delete while the pool's create runs (the finalizer race leaves such pools): the refused
    sweep says nothing at WARNING, the one that deletes it says so once."""
    orphan = OwnedPool("orphan", "ns", "b", "uid-gone", "PROVISIONING")
    pools = RecordingPools({"orphan": "PROVISIONING"}, [orphan])
    pools.delete_error = s.GKEError(Reason.GKE_UNAVAILABLE, "incompatible operation", permanent=False)
    passes = reconciler(pools, RecordingKube({}))

    with caplog.at_level(logging.WARNING, logger="tpujob"):
        assert passes.sweep_orphans(namespace="ns") == []
        pools.delete_error = None
        assert passes.sweep_orphans(namespace="ns") == ["orphan"]

    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == ["node pool orphan belongs to no TPUJob (ns/b): deleting it"]


# --- the watch's echo of a pass' own pod creates ---------------------------------------------------


def existing_job_body() -> dict[str, Any]:
    body = job_body()
    body["spec"]["nodePool"] = {"policy": "existing"}
    return body


def test_the_first_sight_of_a_created_pod_needs_no_pass_but_its_next_change_does() -> None:
    api = RecordingKube()
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], False)
    (created, *_) = [body for body in api.of("create_pod")]
    created = {**created, "status": {"phase": "Pending"}}
    assert passes.is_own_create(created)
    scheduled = {**created, "spec": {**created["spec"], "nodeName": "n-1"}}
    assert not passes.is_own_create(scheduled)
    assert not passes.is_own_create({**created, "status": {"phase": "Running"}})
    stranger = {**created, "metadata": {**created["metadata"], "name": "someone-else"}}
    assert not passes.is_own_create(stranger)


def test_pods_whose_create_failed_are_created_again_by_the_next_pass() -> None:
    api = RecordingKube()
    api.fail["create_pod"] = kube.ApiError(500, "etcd timeout")
    passes = reconciler(None, api)
    with pytest.raises(kube.ApiError):
        passes.run(existing_job_body(), [], False)
    first = [body["metadata"]["name"] for body in api.of("create_pod")]
    assert first and not any(passes.is_own_create({**b, "status": {}}) for b in api.of("create_pod"))

    del api.fail["create_pod"]
    api.calls.clear()
    passes.run(existing_job_body(), [], False)
    assert [body["metadata"]["name"] for body in api.of("create_pod")] == first


def test_pods_the_api_server_refuses_become_the_jobs_reason_and_are_asked_again_after_a_growing_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(memory_module.time, "monotonic", lambda: clock[0])
    api = RecordingKube()
    refused = kube.ApiError(403, "Forbidden")
    refused.body = (
        '{"kind":"Status","status":"Failure","reason":"Forbidden","code":403,'
        '"message":"pods \\"train-s0-w0-a0\\" is forbidden: no PriorityClass with name team-high was found"}'
    )
    api.fail["create_pod"] = refused
    passes = reconciler(None, api, Settings(refused_backoff_seconds=30))
    uid = existing_job_body()["metadata"]["uid"]
    outcome = passes.run(existing_job_body(), [], False)  # not raised: retrying at once cannot help
    ((_, status),) = api.of("patch_tpujob_status")
    assert status["status"]["reason"] == Reason.POD_REJECTED
    assert "no PriorityClass with name team-high was found" in status["status"]["message"]
    assert outcome.requeue_after == pytest.approx(30.0)
    assert passes.actions.events.drain(timeout=10)
    reasons = [event["reason"] for event in api.of("create_event")]
    assert reasons == [Reason.POD_REJECTED]

    # Any event meanwhile (the job's own status write, a pod) does not send the pods again before the backoff.
    api.calls.clear()
    outcome = passes.run(existing_job_body(), [], False)
    assert api.of("create_pod") == []
    assert outcome.requeue_after == pytest.approx(30.0)

    # Once it ends they are sent again; refused again, the next wait doubles.
    clock[0] += 30  # the backoff ended
    passes.run(existing_job_body(), [], False)
    assert len(api.of("create_pod")) == 1
    assert passes.memory.pod_refusal(uid)[1] == pytest.approx(60.0)

    del api.fail["create_pod"]
    clock[0] += 60
    api.calls.clear()
    passes.run(existing_job_body(), [], False)
    assert len(api.of("create_pod")) == 1  # v5e 2x2: one host
    assert passes.memory.pod_refusal(uid) == ("", 0.0)


def test_a_status_field_the_pass_unsets_is_removed_by_the_merge_patch() -> None:
    """A JSON merge patch keeps what it does not name: startingSince (and provisioningSince, ...) must be
    written as null once unset, or a later attempt would count from the old clock."""
    stored = {"phase": "Starting", "startingSince": "2026-11-21T12:00:00Z", "goodput": {"ratio": 0.5, "x": 1}}
    mine = {"phase": "Starting", "startingSince": "2026-11-21T12:00:00Z"}
    after = {"phase": "Running", "goodput": {"ratio": 0.6}}
    assert with_removals(after, [mine, stored]) == {
        "phase": "Running",
        "startingSince": None,
        "goodput": {"ratio": 0.6, "x": None},
    }
    assert with_removals(after, []) == after


def test_a_create_accepted_while_the_job_waits_for_quota_keeps_the_backoff_growing() -> None:
    """GKE accepts a create and ends it on the quota shortfall within seconds: an accepted create proves
    nothing, so the count of refusals in a row (and the backoff) is not reset by it."""
    quota = s.GKEError(Reason.QUOTA, "Quota 'TPU_LITE_PODSLICE_V5' exceeded.", permanent=True)
    for reason, kept in ((Reason.QUOTA, True), (Reason.PROVISIONING, False)):
        pools = RecordingPools()
        passes = reconciler(pools)
        passes.memory.refused("uid-1", {0: quota}, 1.0, 30.0)
        passes.records.update("uid-1", lambda r: setattr(r, "gke_refused", None))  # its backoff is over
        passes.run(job_body(status={"phase": "Provisioning", "reason": reason}), [], False)
        assert len(pools.created) == 1
        assert (passes.records.read("uid-1", lambda r: r.rejections, 0) > 0) is kept, reason


def test_the_network_policy_is_made_before_the_service_and_pods_and_a_refused_one_holds_them_back() -> None:
    api = RecordingKube()
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], False)
    creates = [
        method for method, _, _ in api.calls if method.startswith("create_") and method != "create_event"
    ]
    assert creates[0] == "create_network_policy"  # alone, before any worker exists
    assert sorted(creates[1:]) == ["create_pod", "create_service"]
    ((policy),) = api.of("create_network_policy")
    assert policy["metadata"]["name"] == NAMESPACE_POLICY_NAME  # the namespace's, for every job of it

    # Refused (the operator's RBAC lacks it, an admission webhook): no pod starts unguarded, the job says why.
    api, refused = RecordingKube(), kube.ApiError(403, "Forbidden")
    refused.body = b'{"message":"networkpolicies.networking.k8s.io is forbidden: User cannot create"}'
    api.fail["create_network_policy"] = refused
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], False)
    assert not api.of("create_pod") and not api.of("create_service")
    ((_, status),) = api.of("patch_tpujob_status")
    assert status["status"]["reason"] == Reason.POD_REJECTED
    assert "networkpolicies.networking.k8s.io is forbidden" in status["status"]["message"]


def test_the_policy_is_a_fact_seen_by_its_watch_not_assumed_from_the_service() -> None:
    """The Service may exist without the policy (deleted alone under a running job): only the policy's own
    watch, or this operator's create of it, says it exists. The setting turns policies off."""
    api = RecordingKube()
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], True, None, network_policy_seen=True)
    assert api.of("create_pod") and not api.of("create_network_policy")
    api = RecordingKube()
    passes = reconciler(None, api)
    passes.run(existing_job_body(), [], True)  # the Service is there, its policy is not
    assert [m for m, _, _ in api.calls if m.startswith("create_") and m != "create_event"][:2] == [
        "create_network_policy",
        "create_pod",
    ]
    passes.run(existing_job_body(), [], True)  # created, not yet seen: not made twice
    assert len(api.of("create_network_policy")) == 1
    passes.run(existing_job_body(), [], True, None, network_policy_seen=True)
    passes.run(existing_job_body(), [], True)  # seen, then gone: deleted under the job, made again
    assert len(api.of("create_network_policy")) == 2
    api = RecordingKube()
    off = SettledReconciler(Cluster(network_policy=False), api, None)  # type: ignore[arg-type]
    off.run(existing_job_body(), [], False)
    assert api.of("create_service") and not api.of("create_network_policy")


def test_a_namespace_s_jobs_share_one_policy_made_by_the_first_and_no_request_of_their_own() -> None:
    """The hot path (issue #51): the second job of a namespace, before the watch shows the policy the first
    made, creates its Service and pods with no policy request; a job of another namespace makes its own."""
    first = existing_job_body()
    second = existing_job_body()
    second["metadata"] = {**second["metadata"], "name": "second", "uid": "uid-second"}
    other = existing_job_body()
    other["metadata"] = {**other["metadata"], "namespace": "elsewhere", "uid": "uid-other"}
    jobs = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in (first, second, other)}
    api = RecordingKube(jobs)
    passes = reconciler(None, api)
    for body in (first, second, other):
        passes.run(body, [], False)
    policies = [
        (namespace, body) for method, namespace, body in api.calls if method == "create_network_policy"
    ]
    assert [namespace for namespace, _ in policies] == ["default", "elsewhere"]
    assert len(api.of("create_service")) == 3 and len(api.of("create_pod")) == 3  # one host each


def test_a_409_on_the_policy_is_the_namespace_s_policy_and_the_pods_start() -> None:
    """The policy is made again by a new operator process (its memory is empty), or the team made one of
    that name: either way the namespace has it, and the pods start; nothing is read back."""

    class Taken(RecordingKube):
        def create_network_policy(self, namespace: str, body: dict[str, Any]) -> bool:
            self._call("create_network_policy", namespace, body)
            return False

    taken = Taken()
    reconciler(None, taken).run(existing_job_body(), [], False)
    assert taken.of("create_pod") and not taken.of("get_network_policy")


def test_a_pool_by_the_jobs_name_that_is_another_jobs_is_neither_used_nor_deleted() -> None:
    """Names are no proof: the pool's job-uid label must be the job's. Another job's pool of the same name
    (or one with no label) is as good as missing for the job, which says why and waits."""
    api, pools = RecordingKube(), RecordingPools()
    name = pool_name(job_body(), 0)
    pools.states[name] = "RUNNING"
    pools.uids[name] = "uid-of-another-team"
    passes = reconciler(pools, api)
    passes.run(job_body(), [], False)
    assert api.of("create_pod") == []  # nothing lands on it
    assert pools.deleted == []
    ((_, status),) = api.of("patch_tpujob_status")
    assert status["status"]["reason"] == Reason.POOL_REJECTED
    assert f"node pool {name} exists and is not this job's" in status["status"]["message"]
    assert "uid-of-another-team" in status["status"]["message"]
    # Deleted, the job lets it be: nothing of its own to give back.
    assert passes.release_pools(job_body()) == []
    assert pools.deleted == []
