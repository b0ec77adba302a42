"""The glue's pure parts: what the job index keeps, the job locks, the Events (queue: test_workqueue.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.engines.peering import guess_selectors

from tpujob import cli
from tpujob.api import parse_tpujob
from tpujob.config import from_environment
from tpujob.handlers.indexes import IndexedJob, JobIndex, index_job
from tpujob.handlers.startup import set_peering, watch_only_owned
from tpujob.handlers.workqueue import KeyedLocks, Runtime
from tpujob.reconciler import event_manifest
from tpujob.status import Event


def test_the_index_keeps_what_a_pass_reads_and_drops_the_bulk() -> None:
    body: dict[str, Any] = {
        "apiVersion": "tpujob.dev/v1alpha1",
        "kind": "TPUJob",
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 3,
            "labels": {"team": "a"},
            "finalizers": ["tpujob.dev/node-pools"],
            "deletionTimestamp": "2026-11-22T00:00:00Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}" * 500},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}] * 5,
            "creationTimestamp": "2026-11-22T00:00:00Z",
        },
        "spec": {
            "tpu": {"type": "v5e", "topology": "2x2"},
            "nodePool": {"policy": "existing"},
            "trainer": {"image": "trainer:1"},
        },
        "status": {"phase": "Running"},
    }
    kept = IndexedJob.of(body)
    assert (kept.uid, kept.deleting) == ("u-1", True)
    indexed = kept.body()
    assert "managedFields" not in indexed["metadata"] and "annotations" not in indexed["metadata"]
    assert indexed["metadata"]["resourceVersion"] == "42"
    assert indexed["metadata"]["finalizers"] == ["tpujob.dev/node-pools"]
    assert indexed["metadata"]["deletionTimestamp"]
    assert indexed["status"] == {"phase": "Running"}
    job = parse_tpujob({**indexed, "status": None})  # a pass parses exactly this
    assert (job.metadata.uid, job.metadata.generation, job.metadata.labels) == ("u-1", 3, {"team": "a"})
    assert "status" not in IndexedJob.of({**body, "status": None}).body()
    assert kept.body() is not kept.body(), "each pass gets its own copy"


def test_the_jobs_map_takes_every_watch_event_and_drops_a_deleted_job() -> None:
    jobs: JobIndex = {}
    body = {"metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "1"}, "spec": {}}
    index_job(jobs, None, ("ns", "j"), body)  # listed at start
    index_job(
        jobs, "MODIFIED", ("ns", "j"), {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}
    )
    assert [job.body()["metadata"]["resourceVersion"] for job in jobs[("ns", "j")]] == ["2"]  # replaced
    index_job(jobs, "DELETED", ("ns", "j"), body)
    index_job(jobs, "DELETED", ("ns", "gone-already"), body)
    assert jobs == {}


def test_lowering_the_priority_keeps_the_loops_to_stop_at_cleanup() -> None:
    """A replica that rejoins after standing down lowers its priority; the loops it runs must still be
    the ones its cleanup cancels."""
    runtime = Runtime(from_environment(), reconciler=None)  # type: ignore[arg-type]
    loops = [object()]
    runtime.tasks = loops  # type: ignore[assignment]
    runtime.set_priority(42)
    assert runtime.priority == 42 and runtime.tasks is loops


def test_a_job_lock_excludes_while_held_and_is_dropped_when_free() -> None:
    async def scenario() -> list[str]:
        locks, order = KeyedLocks(), []
        first_in = asyncio.Event()

        async def hold(label: str, entered: asyncio.Event | None = None) -> None:
            async with locks.hold("u"):
                order.append(f"{label} in")
                if entered is not None:
                    entered.set()
                await asyncio.sleep(0)  # yield: a second holder must still wait
                order.append(f"{label} out")

        first = asyncio.create_task(hold("first", first_in))
        await first_in.wait()
        await asyncio.gather(first, hold("second"))
        assert len(locks) == 0, "no lock kept for a job no pass holds"
        return order

    assert asyncio.run(scenario()) == ["first in", "first out", "second in", "second out"]


def test_events_name_the_job_and_the_operator_and_stay_short() -> None:
    meta = {"name": "train", "namespace": "ml", "uid": "u-7"}
    now = dt.datetime(2026, 11, 22, 1, 2, 3, tzinfo=dt.UTC)
    event = event_manifest(meta, Event("Warning", "WorkerFailed", "x" * 5000), now, "operator-pod-1")
    assert event["involvedObject"] == {
        "apiVersion": "tpujob.dev/v1alpha1",
        "kind": "TPUJob",
        "name": "train",
        "namespace": "ml",
        "uid": "u-7",
    }
    assert (event["type"], event["reason"], len(event["message"])) == ("Warning", "WorkerFailed", 1024)
    assert event["metadata"] == {"generateName": "train.", "namespace": "ml"}
    assert event["source"] == {"component": "tpujob-operator"}
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-22T01:02:03Z"


@pytest.mark.parametrize("kopf_run_left", [False, True])  # standalone as kopf.run left it, without or with it
@pytest.mark.parametrize(
    ("peering_object", "watched", "selectors"),
    [
        (None, None, []),
        (None, "ml", []),
        ("tpujob", None, [references.CLUSTER_PEERINGS_K, references.CLUSTER_PEERINGS_Z]),
        ("tpujob", "ml", [references.NAMESPACED_PEERINGS_K, references.NAMESPACED_PEERINGS_Z]),
    ],
)
def test_the_startup_handler_sets_the_peering_mode_kopf_uses(
    kopf_run_left: bool, peering_object: str | None, watched: str | None, selectors: list[Any]
) -> None:
    """Standalone without TPUJOB_PEERING; else mandatory peering in the named object, cluster-wide or in the
    watched namespace. guess_selectors is what kopf reads once the startup handlers are done."""
    config = from_environment().model_copy(
        update={"peering": peering_object, "namespace": watched, "peering_lifetime_seconds": 30}
    )
    settings = kopf.OperatorSettings()
    settings.peering.standalone = kopf_run_left
    settings.peering.clusterwide = watched is None  # kopf.run's clusterwide=, as cli.py passes it
    set_peering(settings, config, priority=7)
    assert list(guess_selectors(settings)) == selectors
    assert settings.peering.standalone is (peering_object is None)
    assert settings.peering.mandatory is (peering_object is not None)
    if peering_object is not None:
        peering = settings.peering
        assert (peering.name, peering.priority, peering.lifetime) == (peering_object, 7, 30)


def test_kopf_run_gets_no_peering_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """The startup handler sets the peering mode, after kopf.run would have: kopf.run gets none of it."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setenv("POD_ID", "test-pod")
    monkeypatch.setattr(kopf, "configure", lambda **_: None)
    monkeypatch.setattr(kopf, "run", lambda **kwargs: calls.append(kwargs))
    assert cli.main(["operator", "--verbose"]) == 0
    assert len(calls) == 1
    assert not {"standalone", "peering_name", "priority"} & set(calls[0])


@pytest.mark.parametrize(
    ("group", "version", "plural", "selectors"),
    [
        ("", "v1", "pods", ["app.kubernetes.io/managed-by=tpujob-operator"]),
        ("", "v1", "services", ["app.kubernetes.io/managed-by=tpujob-operator"]),
        ("tpujob.dev", "v1alpha1", "tpujobs", []),
        ("", "v1", "events", []),
    ],
)
def test_kopf_watches_only_the_operators_own_pods_and_services(
    group: str, version: str, plural: str, selectors: list[str]
) -> None:
    """The labelSelector kopf puts on each watch and list (kopf/_cogs/clients/watching.py collects it)."""
    settings = kopf.OperatorSettings()
    watch_only_owned(settings)
    resource = references.Resource(group, version, plural, namespaced=True)
    assert settings.watching.label_selectors.collect(resource) == selectors
