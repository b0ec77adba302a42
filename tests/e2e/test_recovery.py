"""Recovery on the test bed: a failure confined to one slice of a Multislice job recreates only that slice
(restartStrategy RecreateSlice) while the other slices' pods stay and are told the new attempt; the TPU
device plugin's MegascaleHangDetected restarts a running job at once, uncounted; a Secret volume that
cannot mount shows the kubelet's FailedMount words, then the startup timeout gives the slice back; a node
that failed the job twice is named and avoided."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from tests.manifests import plain_job
from tests.sandbox.helpers import tpu_nodes
from tests.trainer.conftest import REPO
from tpujob.api import constants as c
from tpujob_sandbox import free_port, wait_for

MULTISLICE = {"type": "v5p", "topology": "2x2x2", "slices": 2}  # 2 slices x 2 hosts
STARTUP_TIMEOUT = 10
# The example learns its line in 200 steps; these keep attempt 0 training until the crash and attempt 1 past
# the test's look at its pods. 2,000 once failed (2026-11-29) because the simulated crash was a SIGTERM that
# JAX's preemption service catches: the "crashed" worker trained on for the kubelet's 10 s grace, and with it
# every process of attempt 0 to the end. A crash now kills at once (kubelet/simulator.py, _check_exit).
JAX_STEPS = 2000


def by_slice(pods):
    return {
        (int(p.metadata.labels[c.LABEL_SLICE]), int(p.metadata.labels[c.LABEL_WORKER])): p
        for p in pods
        if p.metadata.deletion_timestamp is None
    }


def test_a_failure_in_one_slice_recreates_that_slice_and_keeps_the_others_pods(jobs, kubelet):
    jobs.create(plain_job("narrow", tpu=MULTISLICE, runPolicy={"restartStrategy": "RecreateSlice"}))
    first = by_slice(jobs.wait_pods_running("narrow", 4, timeout=120))
    jobs.wait_phase("narrow", "Running")
    kept = {key: pod.metadata.uid for key, pod in first.items() if key[0] == 0}
    kubelet.fail(jobs.namespace, first[(1, 0)].metadata.name, exit_code=1, message="boom")
    jobs.wait_pods_running("narrow", 2, attempt=1, timeout=90)  # slice 1's pods, made again

    def all_running_again():
        status = jobs.status("narrow")
        return status if status.get("phase") == "Running" and status.get("attempt") == 1 else None

    status = wait_for(all_running_again, timeout=60, what="the job Running again as attempt 1")
    assert status["sliceAttempts"] == [0, 1]
    assert (status["restarts"], status["applicationRestarts"]) == (1, 1)
    now = by_slice(jobs.pods("narrow"))
    assert {key: now[key].metadata.uid for key in kept} == kept  # the healthy slice's pods are the same pods
    for key in kept:  # ... and their trainers were told the new attempt (a downward API file shows them it)
        assert now[key].metadata.annotations[c.ANNOTATION_RESTART_ATTEMPT] == "1"
        assert now[key].status.pod_ip == first[key].status.pod_ip
    assert all(now[(1, w)].metadata.labels[c.LABEL_ATTEMPT] == "1" for w in (0, 1))
    for pod in now.values():
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    done = jobs.wait_phase("narrow", "Succeeded", timeout=60)
    assert done["workers"]["succeeded"] == 4


def test_a_megascale_hang_on_a_running_node_restarts_the_job_at_once_and_uncounted(jobs, gke, kubelet):
    jobs.create(plain_job("hang", tpu=MULTISLICE, runPolicy={"maxRestarts": 0}))
    pods = by_slice(jobs.wait_pods_running("hang", 4, timeout=120))
    jobs.wait_phase("hang", "Running")
    hung = pods[(1, 1)]
    gke.device_plugin.report_megascale_hang(jobs.namespace, hung.metadata.name)
    condition = wait_for(
        lambda: next(
            (
                cond
                for cond in jobs.core.read_node(hung.spec.node_name).status.conditions or []
                if cond.type == "MegascaleHangDetected"
            ),
            None,
        ),
        timeout=30,
        what="the device plugin's node condition",
    )
    assert (condition.status, condition.message or "") == ("True", "")

    def restarted():
        status = jobs.status("hang")
        return status if status.get("restartsByReason", {}).get("MegascaleHangDetected") else None

    status = wait_for(restarted, timeout=30, what="the restart for the hang")
    when = dt.datetime.strptime(status["lastRestartTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    # Within seconds of the signal (a pass, on a machine that may be loaded).
    assert when - condition.last_transition_time <= dt.timedelta(seconds=10)
    said = wait_for(
        lambda: [
            e for e in jobs.events("hang") if e.type == "Warning" and e.reason == "MegascaleHangDetected"
        ],
        timeout=10,
        what="the restart's Warning event",
    )
    assert f"node {hung.spec.node_name}" in said[0].message
    started = jobs.wait_pods_running("hang", 4, attempt=1, timeout=90)
    status = jobs.wait_phase("hang", "Running", timeout=60)
    assert status["restartsByReason"] == {"MegascaleHangDetected": 1}
    assert status["applicationRestarts"] == 0  # maxRestarts 0, and the job runs on
    # The condition stays on the node (30 minutes of GKE time), but its heartbeat predates this attempt: no
    # restart for it. A second hang, in the new attempt, restarts the job again.
    again = by_slice(started)[(0, 1)]
    gke.device_plugin.report_megascale_hang(jobs.namespace, again.metadata.name)

    def restarted_twice():
        status = jobs.status("hang")
        return status if status.get("restartsByReason", {}).get("MegascaleHangDetected") == 2 else None

    wait_for(restarted_twice, timeout=30, what="the restart for the second hang")
    for pod in jobs.wait_pods_running("hang", 4, attempt=2, timeout=90):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    assert jobs.wait_phase("hang", "Succeeded", timeout=60)["restarts"] == 2


def test_a_secret_volume_that_cannot_mount_shows_failed_mount_then_the_startup_timeout_frees_the_pools(
    jobs, gke, kubelet
):
    trainer = {
        "image": "registry.example/sleeper:1",
        "volumeMounts": [{"name": "token", "mountPath": "/etc/token", "readOnly": True}],
    }
    pod = {"volumes": [{"name": "token", "secret": {"secretName": "hf-token"}}]}
    # FailedMount lasts only until the startup timeout: read from a record of every status, not a poll.
    with jobs.recording_job("mount") as history:
        jobs.create(
            plain_job("mount", trainer=trainer, pod=pod, runPolicy={"startupTimeoutSeconds": STARTUP_TIMEOUT})
        )
        status = history.first_status(lambda status: status.get("reason") == "FailedMount", timeout=90)
    assert status["phase"] == "Starting"
    assert 'MountVolume.SetUp failed for volume "token" : secret "hf-token" not found' in status["message"]
    failed = jobs.wait_phase("mount", "Failed", timeout=STARTUP_TIMEOUT + 60)
    assert failed["reason"] == "StartupTimeout"
    assert "FailedMount" in failed["message"]
    wait_for(lambda: not gke.node_pools(), timeout=60, what="the job's node pool to be deleted")


@pytest.mark.trainer  # the JAX example's processes (jax.distributed on CPU) rejoin after the restart
def test_the_jax_example_rejoins_after_its_healthy_slice_restarts_in_place(jobs, kubelet):
    """2 slices x 2 hosts of the JAX example under restart_in_place.py: a crash of slice 1's worker 0
    recreates slice 1, slice 0's processes run again in place as attempt 1, and all four processes meet
    again in jax.distributed (process_count=4, the allgather [0, 1, 2, 3]) and train to the end."""
    manifest = yaml.safe_load((REPO / "examples" / "jax" / "tpujob.yaml").read_text())
    name = manifest["metadata"]["name"]
    port = str(free_port())
    manifest["spec"]["tpu"]["slices"] = 2
    manifest["spec"]["nodePool"] = {"policy": "create"}
    manifest["spec"]["runPolicy"] = {"restartStrategy": "RecreateSlice", "maxRestarts": 3}
    manifest["spec"]["trainer"].update(
        command=["python", "/app/restart_in_place.py", "python", "/app/train.py"],
        args=["--steps", str(JAX_STEPS)],
        env=[{"name": "JAX_COORDINATOR_PORT", "value": port}],
    )
    jobs.create(manifest)
    jobs.wait_phase(name, "Running", timeout=240)
    first = by_slice(jobs.wait_pods_running(name, 4, timeout=60))
    log = {key: kubelet.log_path(jobs.namespace, pod.metadata.name) for key, pod in first.items()}
    wait_for(
        lambda: (
            all("step 50 " in path.read_text() for path in log.values() if path.exists())
            and all(path.exists() for path in log.values())
        ),
        timeout=180,
        what="every JAX process training",
    )
    kubelet.fail(jobs.namespace, first[(1, 0)].metadata.name, exit_code=1, message="crash")

    def rejoined() -> dict | None:
        """Slice 1 recreated as attempt 1 beside slice 0's pods (taken now: on success they go with the
        pools, drained by GKE, while their logs stay on the kubelet's disk)."""
        pods = by_slice(jobs.pods(name))
        slice_1 = [pods[key].metadata.labels[c.LABEL_ATTEMPT] for key in ((1, 0), (1, 1)) if key in pods]
        return pods if len(pods) == 4 and slice_1 == ["1", "1"] else None

    final = wait_for(rejoined, timeout=120, what="slice 1 recreated beside slice 0's pods")
    status = jobs.wait_phase(name, "Succeeded", timeout=300)
    assert status["attempt"] == 1 and status["sliceAttempts"] == [0, 1], status
    for worker in (0, 1):
        kept = final[(0, worker)]
        assert kept.metadata.uid == first[(0, worker)].metadata.uid  # the same pod, its process run again
        text = kubelet.log_path(jobs.namespace, kept.metadata.name).read_text()
        assert text.count("process_count=4") == 2, text  # attempt 0, then attempt 1 in place
        assert text.count("allgather of process ids: [0, 1, 2, 3]") == 2, text
        assert text.count("learned w=") == 1, text  # attempt 1 trained to the end, attempt 0 did not
    crashed = kubelet.log_path(jobs.namespace, first[(1, 0)].metadata.name).read_text()
    assert "learned w=" not in crashed, crashed  # the crash ended it mid-training
    recreated = kubelet.log_path(jobs.namespace, final[(1, 0)].metadata.name).read_text()
    assert final[(1, 0)].metadata.labels[c.LABEL_ATTEMPT] == "1"
    assert "allgather of process ids: [0, 1, 2, 3]" in recreated and "learned w=" in recreated


def hostnames_kept_off(pod) -> list[list[str]]:
    """The NotIn kubernetes.io/hostname values of each term of a pod's required node affinity."""
    affinity = pod.spec.affinity.node_affinity if pod.spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    return [
        e.values
        for term in (required.node_selector_terms if required else [])
        for e in term.match_expressions or []
        if (e.key, e.operator) == ("kubernetes.io/hostname", "NotIn")
    ]


def test_a_node_that_fails_the_job_twice_is_avoided_on_the_third_attempt(jobs, gke, kubelet):
    """An existing pool of three single-host v5e nodes; one's TPU device plugin fails every allocation, so
    the kubelet rejects the worker placed there (UnexpectedAdmissionError). The other two are cordoned until
    the job has failed twice on the bad one: the third attempt's pod carries a required NotIn on the bad
    node's hostname, so the scheduler can place it nowhere, until the others open; then it runs there and
    the job succeeds. The status and a Warning Event name the node."""
    bad, *good = tpu_nodes(gke, jobs.core, "badhost-v5e", count=3)
    for node in good:
        jobs.core.patch_node(node, {"spec": {"unschedulable": True}})
    kubelet.fail_tpu_allocation(bad)
    jobs.create(plain_job("badhost", nodePool={"policy": "existing"}, runPolicy={"maxRestarts": 3}))

    def avoided():
        records = jobs.status("badhost").get("nodeFailures") or []
        return records if any(r.get("avoided") for r in records) else None

    (record,) = wait_for(avoided, timeout=90, what="the bad node avoided in status.nodeFailures")
    assert record == {
        "node": bad,
        "failures": 2,
        "reason": "UnexpectedAdmissionError",
        "lastTime": record["lastTime"],
        "avoided": True,
    }
    said = jobs.wait_events("badhost", "BadNodeAvoided")
    assert f"node {bad} failed this job 2 times (last: UnexpectedAdmissionError)" in said[0].message
    assert said[0].type == "Warning"

    def third_unschedulable():
        for pod in jobs.pods("badhost", attempt=2):
            conditions = {c.type: c for c in pod.status.conditions or []}
            scheduled = conditions.get("PodScheduled")
            if scheduled is not None and scheduled.status == "False" and scheduled.reason == "Unschedulable":
                return pod
        return None

    third = wait_for(third_unschedulable, timeout=60, what="attempt 2's pod refused by the scheduler")
    assert hostnames_kept_off(third) == [[bad], [bad]]  # in both of the maintenance terms
    for node in good:
        jobs.core.patch_node(node, {"spec": {"unschedulable": False}})
    (running,) = jobs.wait_pods_running("badhost", 1, attempt=2, timeout=60)
    assert running.spec.node_name in good
    kubelet.succeed(jobs.namespace, running.metadata.name)
    status = jobs.wait_phase("badhost", "Succeeded", timeout=60)
    assert (status["restarts"], status["attempt"]) == (2, 2)
    assert status["nodeFailures"] == [record]


def test_a_bad_node_of_the_jobs_own_pool_has_the_pool_recreated(jobs, gke, kubelet):
    """A pool the operator made holds exactly the slice's hosts: a node of it that failed the job twice (GKE's
    TPU device plugin reported a slice error there twice) is not avoided by affinity, which would leave the
    pod nowhere to go, but by recreating the slice's pool with new VMs; the job then succeeds on it."""
    jobs.create(plain_job("ownpool", runPolicy={"maxRestarts": 0}))
    for attempt in (0, 1):
        (pod,) = jobs.wait_pods_running("ownpool", 1, attempt=attempt, timeout=120)
        jobs.wait_phase("ownpool", "Running", timeout=60)
        node = pod.spec.node_name
        gke.device_plugin.report_slice_error(jobs.namespace, pod.metadata.name, "ICI link 3 down")

        def restarted(times=attempt + 1):
            status = jobs.status("ownpool")
            return status if status.get("restartsByReason", {}).get("SliceErrorDetected") == times else None

        wait_for(restarted, timeout=60, what=f"restart {attempt + 1} for the slice error")
    said = jobs.wait_events("ownpool", "BadNodeAvoided")
    assert f"node {node} failed this job 2 times (last: SliceErrorDetected)" in said[0].message
    assert "its slice's node pool is recreated" in said[0].message
    (pod,) = jobs.wait_pods_running("ownpool", 1, attempt=2, timeout=180)
    assert gke.calls["DeleteNodePool"] == 1 and gke.calls["CreateNodePool"] == 2
    assert hostnames_kept_off(pod) == []  # the new pool's VMs are new: nothing to keep off
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    status = jobs.wait_phase("ownpool", "Succeeded", timeout=60)
    assert status["applicationRestarts"] == 0
    # The recreated pool's VM is a new one (GKE names it anew; the simulated GKE reuses the name): the node
    # is still named, with when it was replaced, and no longer avoided.
    (record,) = status["nodeFailures"]
    assert (record["node"], record["failures"], record["avoided"]) == (node, 0, False)
    assert record["replacedTime"] >= record["lastTime"]
    replaced = jobs.wait_events("ownpool", "BadNodeReplaced")
    assert f"node {node} was deleted since it failed this job" in replaced[0].message
