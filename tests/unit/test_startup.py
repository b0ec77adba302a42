"""Workers that cannot start, decided purely: the kubelet's reason in the job's status after the grace
period, and spec.runPolicy.startupTimeoutSeconds giving the slice back."""

import dataclasses
import datetime as dt

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import Phase, Reason
from tpujob.reconciler import pod_view
from tpujob.render import naming

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)
PULL_ERROR = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "registry.example/team/trainer:v2": '
    'failed to resolve reference "registry.example/team/trainer:v2": '
    "registry.example/team/trainer:v2: not found"
)
BACK_OFF = 'Back-off pulling image "registry.example/team/trainer:v2"'
MISSING_SECRET = 'secret "hf-token" not found'


def make_job(**run_policy):
    manifest = base_job("train", tpu={"type": "v5p", "topology": "2x2x2"}, runPolicy=run_policy)
    manifest["metadata"].update(uid="u1", generation=1)
    return parse_tpujob(manifest)


def ready_pools(job):
    return (s.PoolView(0, naming.node_pool_name(job, 0), "RUNNING"),)


def worker_pods(job, attempt=0, **extra):
    """Both workers of the attempt; `extra` applies to worker 0 only (worker 1 is scheduled, creating)."""
    return tuple(
        s.PodView(naming.pod_name(job, 0, w, attempt), 0, w, attempt, "Pending", **(extra if w == 0 else {}))
        for w in range(2)
    )


def stuck(reason, message, since="2026-11-21T12:00:00Z"):
    return {
        "waiting_container": "trainer",
        "waiting_reason": reason,
        "waiting_message": message,
        "started_at": since,
    }


def step(job, at=0.0, **observed):
    observed.setdefault("pools", ready_pools(job))
    observed.setdefault("service_exists", True)
    observed.setdefault("startup_grace_seconds", 30)
    return s.decide(s.Observed(job=job, now=NOW + dt.timedelta(seconds=at), **observed))


def advance(job, decision):
    return job.model_copy(update={"status": decision.status})


def started(job):
    """The pass that created the pods: the attempt's startup clock starts at NOW."""
    first = step(job, pools=ready_pools(job), service_exists=False)
    assert first.create_pods == [(0, 0), (0, 1)]
    assert first.status.starting_since == "2026-11-21T12:00:00Z"
    return advance(job, first)


def test_a_pull_error_shows_the_kubelets_reason_and_words_after_the_grace_with_one_warning():
    job = started(make_job())
    early = step(job, at=10, pods=worker_pods(job, **stuck("ErrImagePull", PULL_ERROR)))
    assert (early.status.phase, early.status.reason) == (Phase.STARTING, "Starting")
    assert early.requeue_after == 20  # when the grace ends

    shown = step(advance(job, early), at=30, pods=worker_pods(job, **stuck("ErrImagePull", PULL_ERROR)))
    assert (shown.status.phase, shown.status.reason) == (Phase.STARTING, "ErrImagePull")
    assert (
        shown.status.message
        == f"pod {naming.pod_name(job, 0, 0, 0)} cannot start container trainer: {PULL_ERROR}"
    )
    running = next(c for c in shown.status.conditions if c.type == "Running")
    assert (running.status, running.reason) == ("False", "ErrImagePull")
    assert [(e.type, e.reason) for e in shown.events] == [("Warning", "ErrImagePull")]

    # The kubelet backs off and pulls again: the reason follows it, the problem is one (no second event).
    backing_off = step(
        advance(job, shown), at=40, pods=worker_pods(job, **stuck("ImagePullBackOff", BACK_OFF))
    )
    assert backing_off.status.reason == "ImagePullBackOff"
    assert BACK_OFF in backing_off.status.message
    assert backing_off.events == []
    again = step(advance(job, backing_off), at=50, pods=worker_pods(job, **stuck("ErrImagePull", PULL_ERROR)))
    assert again.events == []


def test_a_missing_secret_shows_create_container_config_error():
    job = started(make_job())
    decision = step(job, at=31, pods=worker_pods(job, **stuck("CreateContainerConfigError", MISSING_SECRET)))
    assert decision.status.reason == "CreateContainerConfigError"
    assert decision.status.message.endswith(MISSING_SECRET)


def test_reasons_that_pass_by_themselves_are_not_problems():
    job = started(make_job())
    for reason in ("ContainerCreating", "PodInitializing"):
        decision = step(job, at=300, pods=worker_pods(job, **stuck(reason, "")))
        assert decision.status.reason == "Starting", reason


def test_more_stuck_workers_are_counted_in_the_message():
    job = started(make_job())
    both = tuple(dataclasses.replace(p, **stuck("ErrImagePull", PULL_ERROR)) for p in worker_pods(job))
    decision = step(job, at=31, pods=both)
    assert decision.status.message.endswith("(1 more worker pod(s) cannot start)")


def test_the_startup_timeout_fails_the_job_and_gives_the_slice_back():
    job = started(make_job(startupTimeoutSeconds=120))
    pods = worker_pods(job, **stuck("ImagePullBackOff", BACK_OFF))
    before = step(job, at=119, pods=pods)
    assert before.status.phase == Phase.STARTING
    assert before.requeue_after == 1

    after = step(advance(job, before), at=120, pods=pods)
    assert (after.status.phase, after.status.reason) == (Phase.FAILED, Reason.STARTUP_TIMEOUT)
    assert after.status.message == (
        "workers not all running 120 s after attempt 0 began starting them (startupTimeoutSeconds; last: "
        f"ImagePullBackOff: pod {pods[0].name} cannot start container trainer: {BACK_OFF})"
    )
    assert after.delete_pools == [naming.node_pool_name(job, 0)]
    assert sorted(after.delete_pods) == sorted(p.name for p in pods)
    assert after.create_pods == []
    assert ("Warning", Reason.STARTUP_TIMEOUT) in [(e.type, e.reason) for e in after.events]


def test_the_startup_clock_is_in_the_status_so_a_new_operator_keeps_it():
    """An operator that restarts reads starting_since from the status: the timeout is not reset."""
    job = started(make_job(startupTimeoutSeconds=120))
    fresh_operator = step(job, at=125, pods=worker_pods(job))
    assert fresh_operator.status.reason == Reason.STARTUP_TIMEOUT


def test_zero_means_no_startup_timeout():
    job = started(make_job(startupTimeoutSeconds=0))
    decision = step(job, at=86400, pods=worker_pods(job, **stuck("ImagePullBackOff", BACK_OFF)))
    assert decision.status.phase == Phase.STARTING


def test_running_clears_the_clock_and_a_restart_starts_a_new_one():
    job = started(make_job(startupTimeoutSeconds=120))
    running = tuple(dataclasses.replace(p, phase="Running") for p in worker_pods(job))
    ran = step(job, at=60, pods=running)
    assert (ran.status.phase, ran.status.starting_since) == (Phase.RUNNING, None)

    failed = (dataclasses.replace(running[0], phase="Failed", exit_code=1), running[1])
    restarted = step(advance(job, ran), at=500, pods=failed)
    assert (restarted.status.phase, restarted.status.starting_since) == (Phase.RESTARTING, None)
    job = advance(job, restarted)
    new_pods = step(job, at=600, pods=failed, restart_backoff_seconds=0)
    assert new_pods.create_pods == [(0, 0), (0, 1)]
    assert new_pods.status.starting_since == "2026-11-21T12:10:00Z"


def test_flex_start_queued_for_capacity_holds_no_clock():
    manifest = base_job("train", tpu={"type": "v6e", "topology": "2x4"}, capacity={"mode": "flexStart"})
    manifest["metadata"].update(uid="u1", generation=1)
    job = parse_tpujob(manifest)
    queued = tuple(
        dataclasses.replace(
            p, unschedulable="0/3 nodes are available", unschedulable_since="2026-11-21T12:00:00Z"
        )
        for p in worker_pods(job)[:1]
    )
    decision = step(job, at=3600, pods=(dataclasses.replace(queued[0], name=naming.pod_name(job, 0, 0, 0)),))
    assert decision.status.reason == Reason.WAITING_FOR_CAPACITY
    assert decision.status.starting_since is None


def pod_body(**status):
    return {
        "metadata": {"name": "train-s0-w0-a0", "labels": {}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Pending", "startTime": "2026-11-21T12:00:05Z", **status},
    }


def waiting(name, reason, message=""):
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def test_pod_view_reads_the_waiting_container_init_containers_first():
    view = pod_view(
        pod_body(
            initContainerStatuses=[waiting("fetch-data", "CreateContainerConfigError", MISSING_SECRET)],
            containerStatuses=[waiting("trainer", "PodInitializing")],
        )
    )
    assert (view.waiting_container, view.waiting_reason, view.waiting_message) == (
        "fetch-data",
        "CreateContainerConfigError",
        MISSING_SECRET,
    )
    assert view.started_at == "2026-11-21T12:00:05Z"


def test_pod_view_of_a_running_or_waitless_pod_has_no_waiting_reason():
    running = pod_view(pod_body(phase="Running", containerStatuses=[waiting("sidecar", "CrashLoopBackOff")]))
    plain = pod_view(pod_body(containerStatuses=[{"name": "trainer", "state": {"running": {}}}]))
    for view in (running, plain):
        assert (view.waiting_reason, view.started_at) == ("", "")


def test_pods_the_api_server_refuses_show_its_words_and_are_asked_again():
    """The pass whose creates were refused decides again knowing it (reconciler/passes.py), so its status
    says why at once and counts no pod that does not exist."""
    job = make_job()
    refusal = 'pods "train-s0-w0-a0" is forbidden: no PriorityClass with name team-high was found'
    refused = step(job, service_exists=False, pods_refused=refusal)
    assert (refused.status.phase, refused.status.reason) == (Phase.STARTING, Reason.POD_REJECTED)
    assert refused.status.message == f"the API server refused the worker pods: {refusal}"
    assert refused.status.workers.pending == 0
    assert [(e.type, e.reason) for e in refused.events] == [("Warning", Reason.POD_REJECTED)]
    again = step(advance(job, refused), at=10, pods_refused=refusal)
    assert again.create_pods == [(0, 0), (0, 1)]  # asked again: someone may create the PriorityClass
    assert (again.status.reason, again.events) == (Reason.POD_REJECTED, [])
    timed_out = step(advance(job, again), at=600, pods_refused=refusal)
    assert timed_out.status.reason == Reason.STARTUP_TIMEOUT
    assert timed_out.create_pods == []


def terminated(name, exit_code):
    return {
        "name": name,
        "state": {"terminated": {"exitCode": exit_code, "finishedAt": "2026-11-21T12:05:00Z"}},
    }


def test_the_trainers_exit_code_is_read_by_name_not_a_sidecars():
    view = pod_view(
        pod_body(phase="Failed", containerStatuses=[terminated("trainer", 3), terminated("gcs-fuse", 0)])
    )
    assert (view.phase, view.exit_code) == ("Failed", 3)


def test_a_sidecar_that_outlives_the_trainer_leaves_the_trainers_outcome_and_the_pod_is_not_kept():
    running_sidecar = {"name": "log-shipper", "state": {"running": {}}}
    view = pod_view(pod_body(phase="Running", containerStatuses=[terminated("trainer", 0), running_sidecar]))
    assert (view.phase, view.exit_code, view.lingering) == ("Succeeded", 0, True)

    job = started(make_job())
    done = tuple(
        dataclasses.replace(p, phase="Succeeded", exit_code=0, lingering=True) for p in worker_pods(job)
    )
    decision = step(job, at=60, pods=done)
    assert decision.status.phase == Phase.SUCCEEDED
    assert sorted(decision.delete_pods) == sorted(p.name for p in done)  # a sidecar would hold the node
