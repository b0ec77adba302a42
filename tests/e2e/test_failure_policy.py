"""Failures that end fast and say why, on the test bed: spec.runPolicy.failurePolicy decides what a failed
worker does to the job, and the job's status and its Warning event quote the worker's termination message
(what the trainer wrote to its termination log, which the kubelet reports)."""

from __future__ import annotations

from tests.manifests import base_job, plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for

V5P_MULTI_HOST = {"type": "v5p", "topology": "2x2x2"}  # 2 hosts
CONFIG_ERROR = "ConfigError: --batch-size: 'many' is not an integer"


def warnings(jobs, name: str, reason: str) -> list:
    return [e for e in jobs.events(name) if e.type == "Warning" and e.reason == reason]


def test_a_bad_config_exit_fails_the_job_on_its_first_attempt_and_says_why(jobs, gke, kubelet):
    jobs.create(plain_job(tpu=V5P_MULTI_HOST, runPolicy={"maxRestarts": 3}))
    first = jobs.wait_pods_running("train", 2)
    worker = next(p for p in first if p.metadata.labels[c.LABEL_WORKER] == "1")
    kubelet.fail(jobs.namespace, worker.metadata.name, exit_code=2, message=CONFIG_ERROR + "\n")

    status = jobs.wait_phase("train", "Failed")
    assert status["reason"] == "FailedByPolicy"
    assert status["message"].startswith(
        f"worker 1 (pod {worker.metadata.name}) failed with exit code 2: {CONFIG_ERROR}; the default "
        "failurePolicy (onExitCodes In [2] -> FailJob) fails the job"
    )
    assert (status.get("restarts", 0), status.get("attempt", 0)) == (0, 0)
    (event,) = wait_for(lambda: warnings(jobs, "train", "FailedByPolicy"), timeout=10, what="the event")
    assert CONFIG_ERROR in event.message
    wait_for(lambda: not gke.node_pools(), timeout=30, what="the node pool to go at once")
    assert not jobs.pods("train", attempt=1)


def test_an_ignore_rule_restarts_without_spending_max_restarts(jobs, gke, kubelet):
    ignore = {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}
    jobs.create(plain_job(runPolicy={"maxRestarts": 0, "failurePolicy": {"rules": [ignore]}}))
    (pod,) = jobs.wait_pods_running("train", 1)
    kubelet.fail(jobs.namespace, pod.metadata.name, exit_code=42, message="lost the coordinator")

    (again,) = jobs.wait_pods_running("train", 1, attempt=1)
    status = wait_for(  # the status is written after the pass that decided the restart
        lambda: (st := jobs.status("train")).get("restartsByReason") and st, timeout=30, what="the restart"
    )
    assert status["restartsByReason"] == {"IgnoredByPolicy": 1}
    assert status.get("applicationRestarts", 0) == 0
    (event,) = wait_for(lambda: warnings(jobs, "train", "IgnoredByPolicy"), timeout=10, what="the event")
    assert "exit code 42: lost the coordinator" in event.message
    assert "(onExitCodes In [42] -> Ignore) ignores it" in event.message
    kubelet.succeed(jobs.namespace, again.metadata.name)
    assert jobs.wait_phase("train", "Succeeded")["restarts"] == 1


def test_the_real_trainer_with_a_bad_flag_fails_the_job_with_its_config_error(
    jobs, gke, kubelet, trainer_image
):
    """The trainer image runs as a local process: it exits 2 and writes its ConfigError to the termination
    log the kubelet gave it; the kubelet reports it, the operator quotes it."""
    manifest = base_job("bad-flag")
    manifest["spec"]["trainer"] = {"image": trainer_image, "args": ["--steps", "abc"]}
    with jobs.recording_pods("bad-flag") as seen:  # the pod may be gone with its pool once the job fails
        jobs.create(manifest)
        status = jobs.wait_phase("bad-flag", "Failed", timeout=90)
        (pod,) = seen.wait_finished(attempt=0)
        message = "ConfigError: --steps: 'abc' is not an integer"
        assert status["reason"] == "FailedByPolicy", status
        assert f"failed with exit code 2: {message}; the default failurePolicy" in status["message"]
        assert status.get("restarts", 0) == 0
        terminated = pod.status.container_statuses[0].state.terminated
        assert (terminated.exit_code, terminated.message) == (2, message + "\n")
        assert pod.spec.containers[0].termination_message_policy == "FallbackToLogsOnError"
        (event,) = wait_for(
            lambda: warnings(jobs, "bad-flag", "FailedByPolicy"), timeout=10, what="the event"
        )
        assert message in event.message
        assert not seen.pods(attempt=1)  # no pod of another attempt, from the create to now
