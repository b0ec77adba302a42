"""Where a queued TPUJob stands: its position in the ClusterQueue from Kueue's visibility API, served on the
test bed by an extension API server behind kube-apiserver's aggregator as Kueue serves it
(tpujob_sandbox.kueue.visibility_server), read by the operator at most once per ClusterQueue per interval;
its LocalQueue's pending count where that API is not served."""

from __future__ import annotations

import time

from tests.e2e.test_kueue import V5E_2X2, V5E_LABELS, on_releases, queued
from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob.reconciler.kueue import VISIBILITY_DISCOVERY_SECONDS, VISIBILITY_READ_SECONDS
from tpujob_sandbox import wait_for
from tpujob_sandbox.reads import get_json

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def positions(jobs, names):
    return {name: (jobs.status(name).get("queue") or {}).get("position") for name in names}


def printed(sandbox, namespace: str, name: str, column: str):
    """`kubectl get tj`'s column for the job: the API server's Table, built from the CRD's printer columns."""
    table = get_json(
        sandbox.api_client, f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{namespace}/{c.PLURAL}/{name}", TABLE
    )
    index = [col["name"] for col in table["columnDefinitions"]].index(column)
    return table["rows"][0]["cells"][index]


@on_releases("v0.19.2", "v0.14.8")  # visibility v1beta2, and v1beta1 only
def test_queued_jobs_show_their_position_in_the_cluster_queue(jobs, kueue, kueue_visibility, sandbox):
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e")
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 0}})  # nothing admitted: all wait
    first_queue = kueue.local_queue(jobs.namespace, cluster_queue, name="team-a")
    other_queue = kueue.local_queue(jobs.namespace, cluster_queue, name="team-b")
    names = ["one", "two", "three"]
    # Kueue's queue order: priority first (then creation time, which has whole seconds, then UID).
    for name, queue, value in zip(
        names, (first_queue, first_queue, other_queue), (300, 200, 100), strict=True
    ):
        jobs.create(queued(plain_job(name, tpu=V5E_2X2), queue, kueue.priority_class(value)))
    started = time.monotonic()
    served_before = kueue_visibility.requests
    wait_for(
        lambda: positions(jobs, names) == {"one": 1, "two": 2, "three": 3},
        timeout=VISIBILITY_DISCOVERY_SECONDS + 3 * VISIBILITY_READ_SECONDS + 30,
        what="each job's position in the ClusterQueue",
        last_state=lambda: positions(jobs, names),
    )
    status = jobs.status("three")
    assert status["phase"] == "Queued"
    assert f"position 3 in ClusterQueue {cluster_queue} (1 in LocalQueue {other_queue})" in status["message"]
    # The Queue column: the position, then the start estimate (none here: the ClusterQueue has no quota).
    assert printed(sandbox, jobs.namespace, "two", "Queue").startswith("Queued #2"), jobs.status("two")
    jobs.delete("one")
    wait_for(
        lambda: positions(jobs, ["two", "three"]) == {"two": 1, "three": 2},
        timeout=3 * VISIBILITY_READ_SECONDS + 30,
        what="the positions to move up once the first job is gone",
        last_state=lambda: positions(jobs, ["two", "three"]),
    )
    # One read per ClusterQueue per interval, whatever the number of jobs and passes (plus one at each edge).
    elapsed = time.monotonic() - started
    reads = kueue_visibility.requests - served_before
    assert 1 <= reads <= elapsed / VISIBILITY_READ_SECONDS + 2, (reads, elapsed)


def test_without_the_visibility_api_a_queued_job_shows_its_local_queues_count(jobs, kueue, sandbox):
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e")
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 0}})
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    for name in ("one", "two"):
        jobs.create(queued(plain_job(name, tpu=V5E_2X2), queue))
    status = wait_for(
        lambda: "2 workload(s) pending in LocalQueue" in (s := jobs.status("two")).get("message", "") and s,
        timeout=60,
        what="the LocalQueue's pending count in the job's status",
        last_state=lambda: jobs.status("two"),
    )
    assert (status.get("queue") or {}).get("position") is None
    assert "#" not in (printed(sandbox, jobs.namespace, "two", "Queue") or ""), jobs.status("two")
