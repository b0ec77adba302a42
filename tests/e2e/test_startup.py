"""A team's real pod on the test bed: env from a Secret and a ConfigMap volume reach the process; an image
that cannot be pulled and a missing Secret show the kubelet's reason in the job's status, and the startup
timeout fails the job and gives its TPU slice back, even across an operator restart."""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes import client as k8s

from tests.manifests import base_job
from tpujob_sandbox import wait_for

MISSING_IMAGE = "registry.example/team/trainer:v2"
PLAIN_IMAGE = "registry.example/sleeper:1"  # pulls, and the kubelet simulation runs nothing for it
STARTUP_TIMEOUT = 10


def parse(stamp: str) -> dt.datetime:
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def reason_shows(jobs, name, reasons):
    def shown():
        status = jobs.status(name)
        return status if status.get("reason") in reasons else None

    return wait_for(shown, timeout=60, what=f"reason {' or '.join(reasons)} in the status")


def created_and_shown(jobs, manifest, reasons):
    """Create the job; its first status with one of `reasons`, from a record of every status: such a reason
    lasts only until the startup timeout, and a poll on a loaded machine may come after it."""
    with jobs.recording_job(manifest["metadata"]["name"]) as history:
        jobs.create(manifest)
        return history.first_status(lambda status: status.get("reason") in reasons, timeout=60)


def warnings(jobs, name, reason):
    return [e for e in jobs.events(name) if e.type == "Warning" and e.reason == reason]


def fails_at_its_startup_timeout(jobs, gke, name):
    status = jobs.wait_phase(name, "Failed", timeout=STARTUP_TIMEOUT + 60)
    assert status["reason"] == "StartupTimeout"
    assert f"not all running {STARTUP_TIMEOUT} s after attempt 0" in status["message"]
    waited = parse(status["completionTime"]) - parse(status["startingSince"])
    assert dt.timedelta(seconds=STARTUP_TIMEOUT) <= waited < dt.timedelta(seconds=STARTUP_TIMEOUT + 10)
    wait_for(lambda: not gke.node_pools(), timeout=60, what="the job's node pool to be deleted")
    return status


def test_an_image_that_cannot_be_pulled_shows_the_kubelets_words_then_fails_at_the_startup_timeout(
    jobs, gke, kubelet
):
    kubelet.registry.missing(MISSING_IMAGE)
    status = created_and_shown(
        jobs,
        base_job(
            "pull", trainer={"image": MISSING_IMAGE}, runPolicy={"startupTimeoutSeconds": STARTUP_TIMEOUT}
        ),
        ("ErrImagePull", "ImagePullBackOff"),
    )
    assert status["phase"] == "Starting"
    assert MISSING_IMAGE in status["message"]
    assert "not found" in status["message"] or "Back-off pulling image" in status["message"]
    failed = fails_at_its_startup_timeout(jobs, gke, "pull")
    assert MISSING_IMAGE in failed["message"]  # the last reason, quoted
    # One Warning for the pull problem however often the kubelet retried, one for the timeout. Events are
    # posted from a queue, in order, after the status write the wait above saw: once the timeout's is there,
    # every pull Warning is too.
    timeouts = wait_for(lambda: warnings(jobs, "pull", "StartupTimeout"), timeout=10, what="the event")
    assert len(timeouts) == 1
    pulls = warnings(jobs, "pull", "ErrImagePull") + warnings(jobs, "pull", "ImagePullBackOff")
    assert len(pulls) == 1


def test_a_missing_secret_shows_create_container_config_error_then_fails_at_the_startup_timeout(
    jobs, gke, kubelet
):
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]
    status = created_and_shown(
        jobs,
        base_job(
            "secret",
            trainer={"image": PLAIN_IMAGE, "env": env},
            runPolicy={"startupTimeoutSeconds": STARTUP_TIMEOUT},
        ),
        ("CreateContainerConfigError",),
    )
    assert 'secret "hf-token" not found' in status["message"]
    wait_for(lambda: warnings(jobs, "secret", "CreateContainerConfigError"), timeout=10, what="the event")
    fails_at_its_startup_timeout(jobs, gke, "secret")
    # One Warning however often the kubelet retried: once the timeout's Event is there (posted in order after
    # it), every earlier one is.
    wait_for(lambda: warnings(jobs, "secret", "StartupTimeout"), timeout=10, what="the timeout's event")
    assert len(warnings(jobs, "secret", "CreateContainerConfigError")) == 1


def test_an_operator_killed_while_a_job_waits_on_a_bad_image_keeps_the_startup_clock(
    jobs, gke, kubelet, operator
):
    kubelet.registry.missing(MISSING_IMAGE)
    since = created_and_shown(
        jobs,
        base_job(
            "clock", trainer={"image": MISSING_IMAGE}, runPolicy={"startupTimeoutSeconds": STARTUP_TIMEOUT}
        ),
        ("ErrImagePull", "ImagePullBackOff"),
    )["startingSince"]
    operator.kill()
    operator.start()
    status = fails_at_its_startup_timeout(jobs, gke, "clock")
    assert status["startingSince"] == since


def test_a_secret_created_late_lets_the_job_start_within_its_timeout(jobs, gke, kubelet, core):
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}]
    jobs.create(base_job("late", trainer={"image": PLAIN_IMAGE, "env": env}))
    reason_shows(jobs, "late", ("CreateContainerConfigError",))
    core.create_namespaced_secret(
        jobs.namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="late"), string_data={"token": "hf_123"}),
    )
    (pod,) = jobs.wait_pods_running("late", 1, timeout=60)
    status = jobs.wait_phase("late", "Running", timeout=30)
    assert "startingSince" not in status
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("late", "Succeeded", timeout=60)


def test_a_priority_class_that_does_not_exist_is_the_api_servers_refusal_until_it_is_created(
    jobs, gke, kubelet, sandbox
):
    """The real API server's Priority admission refuses the pods (403); the job says so in the server's
    words, asks again, and starts once the class exists."""
    scheduling = k8s.SchedulingV1Api(sandbox.api_client)
    name = f"team-high-{jobs.namespace}"[:63]
    jobs.create(base_job("prio", trainer={"image": PLAIN_IMAGE}, pod={"priorityClassName": name}))
    status = reason_shows(jobs, "prio", ("PodCreateRejected",))
    assert f"no PriorityClass with name {name} was found" in status["message"]
    assert not jobs.pods("prio")
    scheduling.create_priority_class(k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name=name), value=1000))
    try:
        (pod,) = jobs.wait_pods_running("prio", 1, timeout=60)
        assert pod.spec.priority_class_name == name and pod.spec.priority == 1000
        kubelet.succeed(jobs.namespace, pod.metadata.name)
        jobs.wait_phase("prio", "Succeeded", timeout=60)
    finally:
        scheduling.delete_priority_class(name)


READ_BOTH = (
    "import os, pathlib, sys; "
    "print('token=' + os.environ['HF_TOKEN']); "
    "print('config=' + pathlib.Path(sys.argv[1]).read_text())"
)


@pytest.mark.trainer  # a real process reads them back
def test_a_secret_env_var_and_a_configmap_volume_reach_the_trainer_process(jobs, kubelet, core):
    """The kubelet resolves the Secret's key into the env and mounts the ConfigMap's file: the process (a
    local image's, run by the simulated kubelet) reads both back."""
    core.create_namespaced_secret(
        jobs.namespace,
        k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="hf-token"), string_data={"token": "hf_s3cr3t"}),
    )
    core.create_namespaced_config_map(
        jobs.namespace,
        k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="team"), data={"settings.yaml": "lr: 0.001"}),
    )
    trainer = {
        "image": "tpujob-jax:reads-both",  # a local image: the command runs as a local process
        "command": ["python", "-c", READ_BOTH, "/etc/team/settings.yaml"],  # the path as the mount has it
        "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}],
        "volumeMounts": [{"name": "settings", "mountPath": "/etc/team", "readOnly": True}],
    }
    pod = {"volumes": [{"name": "settings", "configMap": {"name": "team"}}]}
    with jobs.recording_pods("reads") as seen:  # the pod may be gone with its pool once the job succeeds
        jobs.create(base_job("reads", trainer=trainer, pod=pod))
        jobs.wait_phase("reads", "Succeeded", timeout=90)
        (worker,) = seen.wait_finished(attempt=0)
    log = kubelet.log_path(jobs.namespace, worker.metadata.name).read_text()
    assert "token=hf_s3cr3t" in log
    assert "config=lr: 0.001" in log
