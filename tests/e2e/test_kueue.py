"""TPUJobs on a cluster that runs Kueue: Kueue's real CRDs on the test bed's 1.36 server, its admission
simulated (tpujob_sandbox.kueue), the operator as a Kueue job integration. A labelled job is admitted by its
queue, never around it; a job without the label runs as it always did.

Every test runs on the newest Kueue (v0.19.2); the first runs on v0.14.8 (v1beta1 only) and v0.17.1 (what
xpk installs: v1beta2, 8 pod sets) too, which proves the operator's switch of version: each release's
schema, one admission with its priority class and flavor, and the job to Succeeded. It comes first, its
releases oldest to newest, so that the CRDs are swapped twice in the file (each swap costs 20 to 40 s on
the test bed: the CRD server deletes and serves 11 CRDs)."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path

import pytest
from google.cloud import container_v1
from kubernetes import client as k8s

from tests.e2e.kubectl_cli import table
from tests.e2e.test_tenancy import policy_namespace
from tests.manifests import LIGHT_TRAINING, base_job, plain_job
from tests.workloads import EXAMPLES, example_workload
from tpujob.api import constants as c
from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob.render.workload import KueueApi, PriorityFact, workload_name_of
from tpujob_sandbox import log_tail, wait_for
from tpujob_sandbox.operators import QUEUE_REQUIRED_NAMESPACE

V5E_2X2 = {"type": "v5e", "topology": "2x2"}  # one host, 4 chips
V5P_2X2X4 = {"type": "v5p", "topology": "2x2x4"}  # four hosts of 4 chips
V5E_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x2",
}
V5P_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
    "cloud.google.com/gke-tpu-topology": "2x2x4",
}


def on_releases(*releases: str):
    """Run the test on these Kueue releases' CRDs (the `kueue_release` fixture), in this order."""
    return pytest.mark.parametrize("kueue_release", releases, indirect=True)


def queued(manifest: dict, queue: str, priority_class: str | None = None) -> dict:
    labels = {c.LABEL_QUEUE_NAME: queue}
    if priority_class:
        labels[c.LABEL_PRIORITY_CLASS] = priority_class
    manifest["metadata"]["labels"] = labels
    return manifest


def workload_of(jobs, kueue, name: str) -> dict:
    uid = jobs.get(name)["metadata"]["uid"]
    return kueue.workload(jobs.namespace, workload_name_of(name, uid))


def condition(workload: dict, kind: str) -> dict:
    return next((x for x in (workload.get("status") or {}).get("conditions") or [] if x["type"] == kind), {})


def pools_of(gke, name: str) -> list[str]:
    return [pool for pool in gke.node_pools() if f"tj-{name}-" in pool]


def pool_lifetimes(gke, name: str) -> list[float]:
    """Each pool the job had, from GKE's create operation's start to its delete operation's end (seconds),
    as the simulated GKE's operations record them."""
    create, delete = (
        container_v1.Operation.Type.CREATE_NODE_POOL,
        container_v1.Operation.Type.DELETE_NODE_POOL,
    )
    operations = sorted(
        (op for op in gke.operations.all() if f"/nodePools/tj-{name}-" in op.target_link),
        key=lambda op: op.start_time,
    )
    lifetimes, started = [], {}
    for op in operations:
        if op.operation_type == create:
            started[op.target_link] = op.start_time
        elif op.operation_type == delete and op.target_link in started and op.end_time:
            since = started.pop(op.target_link)
            lifetimes.append((parse_time(op.end_time) - parse_time(since)).total_seconds())
    assert not started, f"pools never deleted: {sorted(started)}"
    return lifetimes


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@on_releases("v0.14.8", "v0.17.1", "v0.19.2")
def test_on_every_kueue_release_the_operator_speaks_its_version_and_a_queued_job_runs(
    kueue, jobs, kubelet, custom, namespace
):
    """Each release's CRDs, and the operator finding by discovery what they serve: v1beta1 alone (v0.14.8),
    or v1beta2 (v0.17.1, what xpk installs; v0.19.2). The 1.36 server judges each example's Workload in
    that version under the release's own schema and CEL; a queued job with a WorkloadPriorityClass is
    admitted by its ClusterQueue, runs on its flavor and succeeds, its Workload in that version."""
    api = KueueApi(kueue.version)
    for path in EXAMPLES:
        body = example_workload(path, api=api)
        body["metadata"]["namespace"] = namespace
        body["metadata"].pop("ownerReferences")  # the example job does not exist here
        custom.create_namespaced_custom_object(
            c.KUEUE_GROUP, kueue.version, namespace, "workloads", body, dry_run="All"
        )
    # ... and refuses one it should: a priority class with no priority (Kueue's own CEL rule, in each
    # version's words).
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "x"}
    body = example_workload(EXAMPLES[0], PriorityFact(5, ref), api=api)
    body["metadata"].update(namespace=namespace, ownerReferences=[])
    del body["spec"]["priority"]
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_namespaced_custom_object(
            c.KUEUE_GROUP, kueue.version, namespace, "workloads", body, dry_run="All"
        )
    field = "priorityClassName" if kueue.version == "v1beta1" else "priorityClassRef"
    assert f"priority should not be nil when {field} is set" in refused.value.body
    # A queued job, admitted in that version.
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    high = kueue.priority_class(1000, prefix="high")
    jobs.create(queued(plain_job("versioned", tpu=V5E_2X2), queue, high))
    (pod,) = jobs.wait_pods_running("versioned", 1, timeout=90)
    workload = workload_of(jobs, kueue, "versioned")
    assert workload["apiVersion"] == f"{c.KUEUE_GROUP}/{kueue.version}"
    if kueue.version == "v1beta1":
        assert (workload["spec"]["priorityClassName"], workload["spec"]["priority"]) == (high, 1000)
    else:
        assert workload["spec"]["priorityClassRef"]["name"] == high and workload["spec"]["priority"] == 1000
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("versioned", "Succeeded", timeout=60)
    kueue.wait_condition(jobs.namespace, workload["metadata"]["name"], "Finished", reason="Succeeded")
    assert jobs.status("versioned")["queue"]["flavors"] == {"slice-0": flavor}


def test_a_second_job_waits_for_the_quota_and_starts_when_the_first_finishes(jobs, gke, kubelet, kueue, core):
    """Quota for one v5e host: the second job waits with Kueue's words and holds nothing. The flavor's own
    label, taint and toleration go onto the first job's pods and onto the nodes of the pool made for it."""
    team_taint = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}
    flavor = kueue.resource_flavor(
        node_labels={**V5E_LABELS, "example.com/team": "a"},
        node_taints=[team_taint],
        tolerations=[{**team_taint, "operator": "Equal"}],
        prefix="v5e-2x2",
    )
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}})
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    jobs.create(queued(plain_job("first", tpu=V5E_2X2), queue))
    (first_pod,) = jobs.wait_pods_running("first", 1, timeout=60)
    assert first_pod.spec.node_selector["example.com/team"] == "a"
    assert "example.com/team" in [t.key for t in first_pod.spec.tolerations]
    node = core.read_node(first_pod.spec.node_name)
    assert node.metadata.labels["example.com/team"] == "a"
    assert "example.com/team" in [t.key for t in node.spec.taints]
    jobs.create(queued(plain_job("second", tpu=V5E_2X2), queue))
    waiting = wait_for(
        lambda: (s := jobs.status("second")).get("reason") == "Pending" and s,
        timeout=30,
        what="the second job to wait for quota",
        last_state=lambda: jobs.status("second"),
    )
    assert waiting["phase"] == "Queued"
    assert waiting["queue"]["clusterQueue"] == cluster_queue
    assert f"insufficient unused quota for {c.TPU_RESOURCE} in flavor {flavor}" in waiting["message"]
    # Nothing of it exists: no pool asked of GKE, no pod.
    assert pools_of(gke, "second") == [] and jobs.pods("second") == []
    # The first ends: its Workload is Finished and the second is admitted into the freed quota.
    kubelet.succeed(jobs.namespace, first_pod.metadata.name)
    jobs.wait_phase("first", "Succeeded", timeout=60)
    # Written by the pass that saw the job end, or by the next one if that write met a newer Workload (409).
    first_workload = workload_of(jobs, kueue, "first")["metadata"]["name"]
    kueue.wait_condition(jobs.namespace, first_workload, "Finished", reason="Succeeded")
    (second_pod,) = jobs.wait_pods_running("second", 1, timeout=60)
    wait_for(  # the status is written after the pass that made the pods
        lambda: jobs.status("second")["queue"].get("flavors") == {"slice-0": flavor},
        timeout=30,
        what="the admitted flavor in the status",
        last_state=lambda: jobs.status("second").get("queue"),
    )
    kubelet.succeed(jobs.namespace, second_pod.metadata.name)
    jobs.wait_phase("second", "Succeeded", timeout=60)
    # Admitted once: every Event before the job's Succeeded one (posted in order) has one Admitted.
    assert [e.reason for e in jobs.events_through("second", "Succeeded")].count("Admitted") == 1


# A trainer of a known length that reports its step and target (the start-estimate bench's worker), run as a
# local process by the simulated kubelet under the JAX example's local image name.
KNOWN_LENGTH_WORKER = Path(__file__).resolve().parents[2] / "bench" / "start_estimate_worker.py"


@pytest.mark.trainer  # a trainer that reports its step and target, as the trainer contract says
def test_a_queued_job_shows_when_it_should_start_from_the_running_jobs_eta(jobs, kubelet, kueue, kubectl):
    """Quota for one v5e host, held by a trainer that reports its ETA: the job queued behind it is estimated
    to start at that ETA (status.queue.estimatedStart, the Queue column of `kubectl get tj`); the one behind
    both has no estimate, and says why: the job ahead of it has no known run time."""
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    trainer = {"image": "tpujob-jax:known-length", "command": ["python", str(KNOWN_LENGTH_WORKER), "900"]}
    jobs.create(queued(base_job("first", tpu=V5E_2X2, trainer=trainer), queue))
    jobs.wait_pods_running("first", 1, timeout=90)
    eta = wait_for(
        lambda: (jobs.status("first").get("progress") or {}).get("eta"),
        timeout=60,
        what="the running job's ETA",
        last_state=lambda: jobs.status("first").get("progress"),
    )
    # Kueue orders by priority first: "second" goes ahead of "third" whatever their creation times.
    jobs.create(queued(plain_job("second", tpu=V5E_2X2), queue, kueue.priority_class(10, prefix="ahead")))
    jobs.create(queued(plain_job("third", tpu=V5E_2X2), queue))

    def estimated(name: str) -> dict | None:
        record = jobs.status(name).get("queue") or {}
        found = record.get("estimatedStart") or {}
        return record if found.get("time") or found.get("reason") else None

    second = wait_for(
        lambda: (r := estimated("second")) and r["estimatedStart"].get("time") and r,
        timeout=30,
        what="the second job's start estimate",
        last_state=lambda: jobs.status("second").get("queue"),
    )
    # The running job's ETA as its latest read put it, within the estimate's slack (2 s) and the reads'
    # wobble: the worker steps at a steady pace.
    running_eta = parse_time(jobs.status("first")["progress"]["eta"])
    predicted = parse_time(second["estimatedStart"]["time"])
    assert abs((predicted - running_eta).total_seconds()) <= 10, (second, eta, running_eta)
    assert second["estimatedStart"]["jobsAhead"] == 0 and not second["estimatedStart"].get("bound")
    assert second["summary"] == f"Queued, ~{predicted:%H:%M}Z", second
    # Unknown once the operator has seen both waiting (a pass may come before the other job's status says
    # where it waits).
    third = wait_for(
        lambda: (
            (r := estimated("third"))
            and "has no known run time" in (r["estimatedStart"].get("reason") or "")
            and r
        ),
        timeout=30,
        what="the third job's start unknown, behind a job with no known run time",
        last_state=lambda: jobs.status("third").get("queue"),
    )
    assert third["estimatedStart"].get("time") is None and third["estimatedStart"]["jobsAhead"] == 1
    assert third["summary"] == "Queued, start unknown"
    header, rows = table(kubectl.ok("get", "tj", "-n", jobs.namespace))
    shown = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert shown["second"]["QUEUE"] == jobs.status("second")["queue"]["summary"], shown
    assert shown["third"]["QUEUE"] == "Queued, start unknown" and shown["first"]["QUEUE"] == "", shown


TRAINER_STEPS = 2500


def steps_logged(log: Path) -> int:
    found = re.findall(r"step (\d+)/", log_tail(log))
    return int(found[-1]) if found else 0


@pytest.mark.trainer
def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_from_its_checkpoint(
    jobs, gke, kubelet, kueue, trainer_image, tmp_path, record_property
):
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}, preemption="LowerPriority")
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    low, high = kueue.priority_class(100, prefix="low"), kueue.priority_class(1000, prefix="high")
    # The real trainer: it checkpoints every second and on SIGTERM, and resumes from its checkpoint.
    manifest = base_job("low", tpu=V5E_2X2)
    manifest["spec"]["trainer"] = {
        "image": trainer_image,
        "args": ["--steps", str(TRAINER_STEPS), "--log-every-steps", "10", "--checkpoint-every-steps",
                 "1000000", "--checkpoint-interval-seconds", "1", "--progress", "log", *LIGHT_TRAINING],
        "checkpointDir": str(tmp_path / "checkpoints"),
    }  # fmt: skip
    jobs.create(queued(manifest, queue, low))
    jobs.wait_pods_running("low", 1, timeout=120)
    low_pools = wait_for(lambda: pools_of(gke, "low"), timeout=30, what="the low job's pool")
    wait_for(
        lambda: condition(workload_of(jobs, kueue, "low"), "PodsReady").get("status") == "True",
        timeout=30,
        what="the low job's PodsReady",
    )
    # Past its first checkpoints: the preemption lands mid-training.
    (first,) = jobs.pods("low", attempt=0)
    wait_for(
        lambda: steps_logged(kubelet.log_path(jobs.namespace, first.metadata.name)) >= 300,
        timeout=180,
        what="the low job to train",
    )
    jobs.create(queued(plain_job("high", tpu=V5E_2X2), queue, high))
    evicted = wait_for(
        lambda: (s := jobs.status("low")).get("reason") == "Preempted" and s,
        timeout=30,
        what="the low job preempted",
        last_state=lambda: jobs.status("low"),
    )
    since = time.monotonic()
    assert evicted["phase"] == "Queued" and "evicted by Kueue" in evicted["message"]
    # Its pods and pools go within the grace period its workers get to checkpoint (30 s).
    wait_for(lambda: not jobs.pods("low", attempt=0), timeout=30, what="the low job's pods to go")
    wait_for(
        lambda: not (set(low_pools) & set(gke.node_pools())), timeout=30, what="the low job's pool to go"
    )
    released = time.monotonic() - since
    record_property("preempted_to_released_seconds", round(released, 2))
    print(f"preempted job's pods and pool gone {released:.2f} s after its status said Preempted")
    assert released < 30
    status = jobs.status("low")
    assert status.get("restarts", 0) == 0 and status["queue"]["evictions"] == 1
    # Queued, it holds nothing and is charged nothing: its pool recorded deleted once GKE has deleted it.
    queued_status = wait_for(
        lambda: (
            (s := jobs.status("low"))["phase"] == "Queued"
            and [p["state"] for p in s["nodePools"]] == ["Deleted"]
            and s["cost"]["chips"] == 0
            and s
        ),
        timeout=30,
        what="the queued job's pool recorded deleted and its chips at 0",
        last_state=lambda: (jobs.status("low").get("nodePools"), jobs.status("low").get("cost")),
    )
    with jobs.recording_pods("low") as low_pods:  # its pod may be gone with its pool once it succeeds
        # The higher job runs in the freed quota, then ends.
        (high_pod,) = jobs.wait_pods_running("high", 1, timeout=60)
        kubelet.succeed(jobs.namespace, high_pod.metadata.name)
        jobs.wait_phase("high", "Succeeded", timeout=60)
        # The lower one is admitted again and resumes from the checkpoint its first attempt saved.
        done = jobs.wait_phase("low", "Succeeded", timeout=300)
        assert done.get("restarts", 0) == 0 and done["queue"]["evictions"] == 1 and done["attempt"] == 1
        (pod,) = low_pods.wait_finished(attempt=1)
    # Charged for its pools' lifetime, not for its wait in the queue: each pool from the pass that asked for
    # it to the pass that found it gone (a poll, 0.2 s here, after GKE's delete ends, and later on a loaded
    # machine: up to 5 s a pool is allowed), in whole seconds. The wait it must not charge is far longer.
    wait_for(lambda: not pools_of(gke, "low"), timeout=60, what="the low job's pools to be deleted")
    final = wait_for(
        lambda: (s := jobs.status("low"))["cost"]["chips"] == 0 and s,
        timeout=30,
        what="the low job's cost to be final",
    )
    lifetimes = pool_lifetimes(gke, "low")
    charged, held = final["cost"]["chipSeconds"], 4 * sum(lifetimes)
    record_property("chip_seconds_charged", charged)
    record_property("pool_lifetime_chip_seconds", round(held, 1))
    print(f"charged {charged} chip-seconds for pools that lived {held:.1f} chip-seconds ({lifetimes})")
    assert len(lifetimes) == 2 and charged <= held + 4 * 5 * len(lifetimes), (charged, held, queued_status)
    message = pod.status.container_statuses[0].state.terminated.message or ""
    (line,) = [x for x in message.splitlines() if x.startswith(PROGRESS_LINE_PREFIX)]
    progress = json.loads(line[len(PROGRESS_LINE_PREFIX) :])
    assert progress["startStep"] >= 300 and progress["step"] == TRAINER_STEPS, progress


def test_an_operator_killed_between_admission_and_pool_creation_creates_each_pool_once(
    jobs, gke, kubelet, kueue, operator
):
    flavor = kueue.resource_flavor(node_labels=V5P_LABELS, prefix="v5p")
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 0}})  # no quota yet: it stays queued
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    gke.inject_pool_fault("slow", provisioning_seconds=3 / gke.time_scale)
    jobs.create(queued(plain_job("train", tpu={**V5P_2X2X4, "slices": 2}), queue))
    wait_for(lambda: jobs.status("train").get("reason") == "Pending", timeout=30, what="the job queued")
    operator.kill()
    try:
        kueue.patch_cluster_queue(
            cluster_queue,
            {
                "resourceGroups": [
                    {
                        "coveredResources": [c.TPU_RESOURCE],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": c.TPU_RESOURCE, "nominalQuota": "32"}]}
                        ],
                    }
                ]
            },
        )
        # Kueue admits it while the operator is down.
        wait_for(
            lambda: condition(workload_of(jobs, kueue, "train"), "Admitted").get("status") == "True",
            timeout=30,
            what="the admission",
        )
    finally:
        operator.start()
    wait_for(
        lambda: gke.calls["CreateNodePool"] >= 1, timeout=30, interval=0.01, what="the first create call"
    )
    operator.kill()  # and again, right after a create call
    operator.start()
    running = jobs.wait_pods_running("train", 8, timeout=90)
    assert gke.calls["CreateNodePool"] == 2  # one per slice, whatever the kills
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded", timeout=60)
    wait_for(lambda: not pools_of(gke, "train"), timeout=60, what="the pools to be deleted")


def test_a_job_without_the_label_runs_as_before_with_no_kueue_installed(
    no_kueue, jobs, gke, kubelet, sandbox
):
    served = [g.name for g in k8s.ApisApi(sandbox.api_client).get_api_versions().groups]
    assert c.KUEUE_GROUP not in served
    jobs.create(plain_job("plain", tpu=V5E_2X2))
    (pod,) = jobs.wait_pods_running("plain", 1, timeout=60)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    status = jobs.wait_phase("plain", "Succeeded", timeout=60)
    assert "queue" not in status
    # Never queued: every Event before the job's Succeeded one (posted in order) has no Queued.
    assert "Queued" not in [e.reason for e in jobs.events_through("plain", "Succeeded")]


def test_pods_not_ready_in_time_are_evicted_by_kueue_and_the_job_waits_uncounted(jobs, gke, kubelet, kueue):
    """waitForPodsReady: workers that cannot start (an image that is not there) hold the quota for nothing;
    Kueue evicts the Workload at its timeout, the job gives its TPUs back and waits for the queue again,
    its restarts untouched; when the image is there, the next admission runs it."""
    # Kueue counts the timeout from admission, so it must cover the slice's provisioning too: 10 s leaves
    # the pods time to appear on a loaded CI machine (with 3 s the first attempt was evicted before them).
    kueue.set_wait_for_pods_ready(timeout=10, backoff_base=1, backoff_max=2)
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    image = "registry.example/not-pushed-yet:1"
    kubelet.registry.missing(image)
    with jobs.recording_pods("slow") as pods, jobs.recording_job("slow") as history:
        jobs.create(queued(plain_job("slow", tpu=V5E_2X2, trainer={"image": image}), queue))
        # The next admission replaces this status within the backoff (1 to 2 s): read it from the record.
        evicted = history.first_status(lambda s: s.get("reason") == "PodsReadyTimeout", timeout=60)
        assert pods.pods(attempt=0), "the first attempt's pods were never created"
    assert evicted["phase"] == "Queued" and "Exceeded the PodsReady timeout" in evicted["message"]
    wait_for(lambda: not jobs.pods("slow", attempt=0), timeout=30, what="the first attempt's pod to go")
    assert jobs.status("slow").get("restarts", 0) == 0
    kubelet.registry.clear()
    (pod,) = wait_for(
        lambda: [p for p in jobs.pods("slow") if p.status.phase == "Running"],
        timeout=60,
        what="a later attempt running once the image is there",
    )
    ready = kueue.wait_condition(
        jobs.namespace, workload_of(jobs, kueue, "slow")["metadata"]["name"], "PodsReady"
    )
    assert ready["reason"] in ("Started", "Recovered")
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    status = jobs.wait_phase("slow", "Succeeded", timeout=60)
    assert status.get("restarts", 0) == 0 and status["queue"]["evictions"] >= 1


def test_a_workload_kueue_deactivated_stays_deactivated_and_the_job_says_why(jobs, gke, kubelet, kueue):
    """waitForPodsReady with requeuingStrategy.backoffLimitCount 0: at its first timeout Kueue deactivates the
    Workload itself (workload_controller.go triggerDeactivation). The operator stops the job, clears the
    admission as jobframework does, and never activates the Workload again: the job stays Queued with
    Kueue's reason."""
    kueue.set_wait_for_pods_ready(timeout=10, backoff_base=1, backoff_max=2, backoff_limit_count=0)
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    image = "registry.example/not-pushed-yet:2"
    kubelet.registry.missing(image)
    jobs.create(queued(plain_job("limited", tpu=V5E_2X2, trainer={"image": image}), queue))
    reason = "DeactivatedDueToRequeuingLimitExceeded"
    held = wait_for(
        lambda: (s := jobs.status("limited")).get("reason") == reason and s,
        timeout=60,
        what="the job queued with Kueue's deactivation reason",
        last_state=lambda: jobs.status("limited"),
    )
    assert held["phase"] == "Queued"
    assert "exceeding the maximum number of re-queuing retries" in held["message"]
    assert "stays deactivated" in held["message"]
    name = workload_of(jobs, kueue, "limited")["metadata"]["name"]
    # The pass that cleared the admission (after the pods went) is one that would have activated it again.
    kueue.wait_condition(jobs.namespace, name, "QuotaReserved", status="False", timeout=60)
    assert kueue.workload(jobs.namespace, name)["spec"]["active"] is False
    wait_for(lambda: not jobs.pods("limited"), timeout=30, what="the job's pods to go")
    wait_for(lambda: not pools_of(gke, "limited"), timeout=30, what="the job's pool to go")
    status = jobs.status("limited")
    assert (status["phase"], status["reason"]) == ("Queued", reason)
    assert kueue.workload(jobs.namespace, name)["spec"]["active"] is False


@pytest.fixture
def queue_required(sandbox, core, operator, gke):
    """The namespace whose TPUJobs run only through Kueue (the test bed's tenancy policy: requireQueue)."""
    yield from policy_namespace(sandbox, core, QUEUE_REQUIRED_NAMESPACE)


def test_a_namespace_that_requires_a_queue_holds_an_unlabelled_job_until_it_is_labelled(
    queue_required, gke, kubelet, kueue
):
    """requireQueue (Kueue's manageJobsWithoutQueueName): no job of the namespace runs around Kueue. An
    unlabelled job waits, holding nothing, saying which label it needs; labelled, Kueue admits it."""
    jobs = queue_required
    jobs.create(plain_job("around", tpu=V5E_2X2))
    held = wait_for(
        lambda: (s := jobs.status("around")).get("reason") == "QueueRequired" and s,
        timeout=30,
        what="the unlabelled job to wait for a queue label",
        last_state=lambda: jobs.status("around"),
    )
    assert held["phase"] == "Queued" and c.LABEL_QUEUE_NAME in held["message"]
    assert pools_of(gke, "around") == [] and jobs.pods("around") == []
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    jobs.custom.patch_namespaced_custom_object(
        c.GROUP,
        c.VERSION,
        jobs.namespace,
        c.PLURAL,
        "around",
        {"metadata": {"labels": {c.LABEL_QUEUE_NAME: queue}}},
    )
    (pod,) = jobs.wait_pods_running("around", 1, timeout=90)
    assert jobs.status("around")["queue"]["name"] == queue
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("around", "Succeeded", timeout=60)


def test_removing_the_queue_label_of_an_admitted_job_is_refused_and_its_workload_still_followed(
    jobs, gke, kubelet, kueue
):
    """A running job cannot step out of its queue: the label removed, the operator names the refused edit
    and keeps following the job's Workload (it stays admitted, holding its quota, and finishes)."""
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    queue = kueue.local_queue(jobs.namespace, kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}))
    with jobs.recording_job("stays") as history:
        jobs.create(queued(plain_job("stays", tpu=V5E_2X2), queue))
        (pod,) = jobs.wait_pods_running("stays", 1, timeout=60)
        workload = workload_of(jobs, kueue, "stays")["metadata"]["name"]
        jobs.custom.patch_namespaced_custom_object(
            c.GROUP,
            c.VERSION,
            jobs.namespace,
            c.PLURAL,
            "stays",
            {"metadata": {"labels": {c.LABEL_QUEUE_NAME: None}}},
        )
        refused = wait_for(
            lambda: (s := jobs.status("stays")).get("shapeChangeRefused") and s,
            timeout=30,
            what="the refused label removal in the status",
            last_state=lambda: jobs.status("stays"),
        )
        assert f"metadata.labels['{c.LABEL_QUEUE_NAME}']" in refused["shapeChangeRefused"]
        assert f"admitted with LocalQueue {queue}" in refused["shapeChangeRefused"]
        wait_for(
            lambda: [e for e in jobs.events("stays") if e.reason == "ShapeChangeRefused"],
            timeout=30,
            what="the ShapeChangeRefused Event",
        )
        kubelet.succeed(jobs.namespace, pod.metadata.name)
        jobs.wait_phase("stays", "Succeeded", timeout=60)
    # The Workload it was admitted with is the one told the job finished (no new Workload, no second pool).
    kueue.wait_condition(jobs.namespace, workload, "Finished", reason="Succeeded")
    assert len(pools_of(gke, "stays")) <= 1
    assert all(
        (state.get("queue") or {}).get("name") == queue for state in history.states() if state.get("queue")
    )
