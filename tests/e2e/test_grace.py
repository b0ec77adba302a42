"""A job's own grace period (spec.trainer.terminationGracePeriodSeconds): a worker whose checkpoint takes
longer than the old fixed 30 s keeps it across a Kueue preemption. The worker is a real process (the
simulated kubelet runs it, SIGTERM, then SIGKILL when the pod's grace ends, in real seconds); GKE's drain of
the preempted job's deleted pool waits for it as GKE's does (up to the pods' longest grace)."""

from __future__ import annotations

import time

import pytest

from tests.e2e.test_kueue import V5E_2X2, V5E_LABELS, pools_of, queued
from tests.manifests import base_job, plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for

# The worker: it saves its checkpoint on SIGTERM, which takes SAVE_SECONDS, then exits as a trainer killed by
# the signal does (143). `python -c` of the trainer image: a test's program, not the trainer.
SAVE_SECONDS = 45
WORKER = """
import pathlib, signal, sys, time
saved = pathlib.Path(sys.argv[1])
def save(*_):
    time.sleep(float(sys.argv[2]))  # a large model's save
    saved.write_text("checkpoint")
    sys.exit(143)
signal.signal(signal.SIGTERM, save)
pathlib.Path(sys.argv[1] + ".running").write_text("up")
while True:
    time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_checkpoint_longer_than_30_s_survives_a_preemption_with_a_60_s_grace(
    jobs, gke, kubelet, kueue, trainer_image, tmp_path
):
    flavor = kueue.resource_flavor(node_labels=V5E_LABELS, prefix="v5e-2x2")
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 4}}, preemption="LowerPriority")
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    low, high = kueue.priority_class(100, prefix="low"), kueue.priority_class(1000, prefix="high")
    saved = tmp_path / "saved"
    manifest = base_job("low", tpu=V5E_2X2)
    manifest["spec"]["trainer"] = {
        "image": trainer_image,
        "command": ["python", "-c", WORKER, str(saved), str(SAVE_SECONDS)],
        "terminationGracePeriodSeconds": 60,
    }
    with jobs.recording_pods("low") as low_pods:
        jobs.create(queued(manifest, queue, low))
        (pod,) = jobs.wait_pods_running("low", 1, timeout=60)
        assert pod.spec.termination_grace_period_seconds == 60
        wait_for(lambda: (tmp_path / "saved.running").exists(), timeout=30, what="the worker to start")
        low_pools = pools_of(gke, "low")

        jobs.create(queued(plain_job("high", tpu=V5E_2X2), queue, high))
        wait_for(
            lambda: jobs.status("low").get("reason") == "Preempted",
            timeout=30,
            what="the low job preempted",
            last_state=lambda: jobs.status("low"),
        )
        preempted = time.monotonic()
        wait_for(lambda: saved.exists(), timeout=SAVE_SECONDS + 15, what="the checkpoint saved")
        took = time.monotonic() - preempted
        print(
            f"the checkpoint was saved {took:.1f} s after the preemption (grace 60 s, save {SAVE_SECONDS} s)"
        )
        assert took >= SAVE_SECONDS - 1  # a real 45 s save, past the old fixed 30 s
        (ended,) = low_pods.wait_finished(attempt=0, timeout=30)
    assert ended.status.container_statuses[0].state.terminated.exit_code == 143  # not SIGKILLed (137)
    assert saved.read_text() == "checkpoint"
    # The pool goes once its drain is over (GKE waits for the pods, up to their longest grace).
    wait_for(lambda: not set(low_pools) & set(gke.node_pools()), timeout=60, what="the low job's pool")
    (high_pod,) = jobs.wait_pods_running("high", 1, timeout=60)
    kubelet.succeed(jobs.namespace, high_pod.metadata.name)
    jobs.wait_phase("high", "Succeeded", timeout=60)
