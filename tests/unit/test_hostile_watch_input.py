"""What a tenant can write into the objects the operator watches (its pods' labels and annotations, their
status, its Workloads, a TPU node's conditions, its job) never stops a watch that serves every namespace:
each handler returns, whatever it is given. An unreadable object is left out and said once, by a WARNING
and an Event in its namespace.

The handlers are the operator's own (handlers/owned.py's `feed` with the real pod and Workload views,
handlers/nodes.py's `node_changed`, handlers/events.py's job and pod handlers) on a real Reconciler whose
Kubernetes client records its calls (tests/unit/test_reconciler.py's)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kopf._cogs.clients import watching

from tests.unit.test_reconciler import RecordingKube, reconciler
from tpujob.api import constants as c
from tpujob.config import from_environment
from tpujob.handlers import events, nodes, owned
from tpujob.handlers.indexes import index_job
from tpujob.handlers.workqueue import Indexes, Runtime
from tpujob.reconciler import pod_view, workload_view
from tpujob.reconciler.pod_views import Unreadable, read_index

JOB_KEY = ("team-b", "victim")


class Requests:
    """Stands for the work queue: the passes asked for, by job."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str]) -> None:
        self.keys.append(key)


def worker_pod(name: str, namespace: str, job: str, uid: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "labels": {
                c.LABEL_MANAGED_BY: c.MANAGED_BY,
                c.LABEL_JOB_NAME: job,
                c.LABEL_SLICE: "0",
                c.LABEL_WORKER: "0",
                c.LABEL_ATTEMPT: "0",
                **labels,
            },
            "ownerReferences": [{"controller": True, "uid": f"job-{job}", "kind": "TPUJob", "name": job}],
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running"},
    }


@pytest.fixture
def runtime() -> Runtime:
    api = RecordingKube()
    live = Runtime(from_environment(), reconciler(None, api))
    pods = owned.OwnedCache(
        pod_view, lambda body, problem: live.reconciler.unreadable(("v1", "Pod"), body, problem)
    )
    live.indexes = Indexes({}, pods, owned.OwnedCache(lambda _body, _warn: True), None)
    live.queue = Requests()  # type: ignore[assignment]
    return live


def ignore(_: object) -> None:
    return None


def feed_pod(runtime: Runtime, event_type: str | None, body: dict[str, Any]) -> None:
    pods = runtime.indexes.pods
    assert isinstance(pods, owned.OwnedCache)
    owned.feed(pods, {"type": event_type, "object": body}, lambda *e: events.pod_changed(runtime, *e), ignore)


def posted_events(runtime: Runtime) -> list[dict[str, Any]]:
    assert runtime.reconciler.actions.events.drain(timeout=10)
    api = runtime.reconciler.actions.api
    assert isinstance(api, RecordingKube)
    return list(api.of("create_event"))


def test_a_poisoned_label_or_annotation_leaves_other_namespaces_jobs_seen(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """The review's finding: `tpujob.dev/slice=x` on one pod, or `restart-attempt=²` (a digit to
    str.isdigit, not to int), raised out of the pod watch, which restarted and met it again, for ever."""
    caplog.set_level(logging.WARNING)
    victim = worker_pod("victim-0", *JOB_KEY, uid="p-victim")
    poisoned = worker_pod("evil-0", "team-a", "evil", uid="p-evil", **{c.LABEL_SLICE: "x"})
    annotated = worker_pod("odd-0", "team-a", "odd", uid="p-odd")
    annotated["metadata"]["annotations"] = {c.ANNOTATION_RESTART_ATTEMPT: "²"}
    for body in (poisoned, annotated, victim):
        feed_pod(runtime, None, body)
    owned.feed(runtime.indexes.pods, watching.Bookmark.LISTED, lambda *_: None, ignore)
    for _ in range(3):  # the poisoned pod changes again and again
        feed_pod(runtime, "MODIFIED", poisoned)
    feed_pod(runtime, "MODIFIED", {**victim, "status": {"phase": "Succeeded"}})

    assert [view.phase for view in runtime.indexes.pods[JOB_KEY]] == ["Succeeded"]
    assert JOB_KEY in runtime.queue.keys  # type: ignore[attr-defined]
    assert ("team-a", "evil") not in runtime.indexes.pods, "an unreadable pod is left out"
    assert [view.restart_attempt for view in runtime.indexes.pods[("team-a", "odd")]] == [0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "evil-0" in w]) == 1, warnings  # said once, not at each event
    assert len([w for w in warnings if "odd-0" in w]) == 1, warnings
    said = {
        (e["involvedObject"]["name"], e["metadata"]["namespace"], e["reason"]) for e in posted_events(runtime)
    }
    assert said == {("evil-0", "team-a", "Unreadable"), ("odd-0", "team-a", "Unreadable")}
    message = next(e["message"] for e in posted_events(runtime) if e["involvedObject"]["name"] == "evil-0")
    assert f"metadata.labels['{c.LABEL_SLICE}']" in message and "'x'" in message


def test_a_fixed_pod_is_read_again_and_a_new_problem_is_said_again(runtime: Runtime) -> None:
    poisoned = worker_pod("evil-0", "team-a", "evil", uid="p-evil", **{c.LABEL_WORKER: "-1"})
    feed_pod(runtime, "ADDED", poisoned)
    assert ("team-a", "evil") not in runtime.indexes.pods
    feed_pod(runtime, "MODIFIED", worker_pod("evil-0", "team-a", "evil", uid="p-evil"))
    assert [view.worker for view in runtime.indexes.pods[("team-a", "evil")]] == [0]
    feed_pod(
        runtime, "MODIFIED", worker_pod("evil-0", "team-a", "evil", uid="p-evil", **{c.LABEL_WORKER: "-1"})
    )
    assert ("team-a", "evil") not in runtime.indexes.pods, "unreadable again: left out again"
    assert len(posted_events(runtime)) == 2


def test_a_pods_owner_reference_cannot_speak_for_another_namespaces_job(runtime: Runtime) -> None:
    """A tenant can point its pod's controller reference at any UID: the last words of a departing pod are
    kept only for the job its labels name in its own namespace, and only if that job's UID is the one."""
    index_job(
        runtime.indexes.jobs,
        None,
        JOB_KEY,
        {"metadata": {"name": "victim", "namespace": "team-b", "uid": "job-victim"}},
    )
    forged = worker_pod("victim-0", "team-a", "victim", uid="p-forged")
    forged["metadata"]["ownerReferences"][0]["uid"] = "job-victim"
    forged["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    forged["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": c.TRAINER_CONTAINER, "state": {"terminated": {"exitCode": 1, "message": "forged"}}}
        ],
    }
    feed_pod(runtime, "MODIFIED", forged)
    assert runtime.reconciler.memory.records.read("job-victim", lambda r: r.departed, None) is None


@pytest.mark.parametrize("value", ["x", "-1", "²", "٣", "1e3", "", " 1", "1000000", "0x1"])
def test_a_worker_index_is_ascii_digits_within_bounds(value: str) -> None:
    with pytest.raises(Unreadable, match="is not a whole number"):
        read_index(value, "f")


def test_a_worker_index_reads_its_number() -> None:
    assert [read_index(v, "f") for v in ("0", "7", "999999")] == [0, 7, 999_999]


# --- fuzz: every handler returns, whatever it is given ------------------------------------------------

TEXT = st.text(max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
OUR_KEYS = st.sampled_from(
    [
        c.LABEL_SLICE,
        c.LABEL_WORKER,
        c.LABEL_ATTEMPT,
        c.ANNOTATION_RESTART_ATTEMPT,
        c.LABEL_JOB_NAME,
        c.LABEL_MANAGED_BY,
    ]
)
STRINGS = st.dictionaries(
    OUR_KEYS | TEXT, TEXT | st.sampled_from(["0", "1", "²", "x", "99999999999"]), max_size=6
)
STATUS = st.fixed_dictionaries(
    {},
    optional={
        "phase": JSON,
        "reason": JSON,
        "podIP": JSON,
        "startTime": JSON,
        "conditions": JSON
        | st.lists(st.dictionaries(st.sampled_from(["type", "status", "reason", "message"]), JSON)),
        "containerStatuses": JSON
        | st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from([c.TRAINER_CONTAINER, "sidecar"]) | JSON},
                optional={
                    "state": st.dictionaries(st.sampled_from(["terminated", "waiting", "running"]), JSON)
                },
            ),
            max_size=2,
        ),
        "initContainerStatuses": JSON,
        "admission": JSON,
    },
)
EVENT_TYPES = st.sampled_from([None, "ADDED", "MODIFIED", "DELETED"])


def hostile(labels: dict[str, str], annotations: dict[str, str], status: Any, spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "team-a",
            "uid": "u-hostile",
            "resourceVersion": "9",
            "labels": {c.LABEL_JOB_NAME: "evil", **labels},
            "annotations": annotations,
            "ownerReferences": [{"controller": True, "uid": "job-evil"}],
        },
        "spec": spec,
        "status": status,
    }


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.slow  # hypothesis: 150 examples each
@FUZZ
@given(labels=STRINGS, annotations=STRINGS, status=STATUS | JSON, spec=JSON, event_type=EVENT_TYPES)
def test_the_pod_watch_returns_and_keeps_serving_other_jobs(
    runtime: Runtime,
    labels: dict[str, str],
    annotations: dict[str, str],
    status: Any,
    spec: Any,
    event_type: str | None,
) -> None:
    feed_pod(runtime, event_type, hostile(labels, annotations, status, spec))
    feed_pod(runtime, "MODIFIED", worker_pod("victim-0", *JOB_KEY, uid="p-victim"))
    assert [view.name for view in runtime.indexes.pods[JOB_KEY]] == ["victim-0"]


@pytest.mark.slow  # hypothesis: 150 examples each
@FUZZ
@given(labels=STRINGS, status=STATUS | JSON, spec=JSON, event_type=EVENT_TYPES)
def test_the_workload_watch_returns(
    labels: dict[str, str], status: Any, spec: Any, event_type: str | None
) -> None:
    said: list[str] = []
    workloads = owned.OwnedCache(workload_view, lambda _body, problem: said.append(problem))
    owned.feed(
        workloads, {"type": event_type, "object": hostile(labels, {}, status, spec)}, lambda *_: None, set
    )
    owned.feed(
        workloads,
        {"type": "ADDED", "object": worker_pod("w", *JOB_KEY, uid="w-victim")},
        lambda *_: None,
        ignore,
    )
    assert [view.name for view in workloads[JOB_KEY]] == ["w"]


@pytest.mark.slow  # hypothesis: 150 examples each
@FUZZ
@given(labels=STRINGS, status=STATUS | JSON, event_type=EVENT_TYPES)
def test_the_node_watch_returns(
    runtime: Runtime, labels: dict[str, str], status: Any, event_type: str | None
) -> None:
    # The runtime is shared by the examples: a deletion an earlier one noted stays noted.
    deleted_before = runtime.reconciler.watched.take("{}").nodes_deleted
    body = {"metadata": {"name": "node-a", "uid": "n", "labels": labels}, "status": status}
    nodes.node_changed(runtime, {"type": event_type, "object": body})
    healthy = {"type": "MODIFIED", "object": {"metadata": {"name": "node-a"}, "status": {"conditions": []}}}
    nodes.node_changed(runtime, healthy)
    seen = runtime.reconciler.watched.take("{}")
    assert seen.node_faults == {}
    if event_type == "DELETED":
        assert "node-a" in seen.nodes_deleted
    else:
        assert seen.nodes_deleted is deleted_before  # nothing noted, and the map not even copied


@pytest.mark.slow  # hypothesis: 150 examples each
@FUZZ
@given(
    labels=STRINGS,
    annotations=STRINGS,
    status=JSON,
    spec=JSON,
    event_type=st.sampled_from(["ADDED", "MODIFIED"]),
)
def test_the_job_watch_returns(
    runtime: Runtime,
    labels: dict[str, str],
    annotations: dict[str, str],
    status: Any,
    spec: Any,
    event_type: str,
) -> None:
    body = hostile(labels, annotations, status, spec)

    async def fed() -> None:
        events.JobFeed(runtime)({"type": event_type, "object": body})

    asyncio.run(fed())
    assert runtime.indexes.jobs[("team-a", "p")][0].uid == "u-hostile"
