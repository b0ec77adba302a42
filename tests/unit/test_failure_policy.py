"""spec.runPolicy.failurePolicy: its validation, and what the pure decision makes of failed workers (the
termination message quoted, the rules over preemption and application failures)."""

import dataclasses
import datetime as dt

import pytest

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api.run_policy import DEFAULT_FAILURE_RULES
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.reconciler import pod_view
from tpujob.render import Cluster, naming
from tpujob.render import plan as render
from tpujob.status import failures

NOW = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)
CONFIG_ERROR = "ConfigError: --steps: 'abc' is not an integer"
FAIL_ON_CONFIG = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}}
DISRUPTION = [{"type": "DisruptionTarget"}]
SHUTDOWN = (("DisruptionTarget", "True"), ("Ready", "False"))


def make_job(rules=None, status=None, **spec):
    if rules is not None:
        run_policy = spec.setdefault("runPolicy", {})
        run_policy["failurePolicy"] = {"rules": rules}
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid="u1", generation=1)
    job = parse_tpujob(manifest)
    return job.model_copy(update={"status": status}) if status is not None else job


def running(job):
    """The job after a pass that saw all its pods of attempt 0 running."""
    decision = step(job, pods=pods(job, 0, "Running"))
    assert decision.status.phase == Phase.RUNNING
    return job.model_copy(update={"status": decision.status})


def pods(job, attempt, phase, **extra):
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, attempt), sl, w, attempt, phase, **extra)
        for sl, w in s.expected_workers(job)
    )


def with_failed(job, worker, **extra):
    """Attempt 0 running, but for `worker` (of slice 0), Failed with `extra`."""
    views = list(pods(job, 0, "Running"))
    views[worker] = dataclasses.replace(views[worker], phase="Failed", **extra)
    return tuple(views)


def step(job, **observed):
    observed.setdefault("now", NOW)
    observed.setdefault("service_exists", True)
    observed.setdefault(
        "pools",
        tuple(s.PoolView(i, naming.node_pool_name(job, i), "RUNNING") for i in range(job.spec.tpu.slices)),
    )
    return s.decide(s.Observed(job=job, **observed))


# --- defaults ---------------------------------------------------------------------------------------


def test_the_trainer_bad_config_exit_fails_the_job_at_once_quoting_its_message():
    job = running(make_job(runPolicy={"maxRestarts": 5}))
    name = naming.pod_name(job, 0, 0, 0)
    decision = step(job, pods=with_failed(job, 0, reason="Error", exit_code=2, message=CONFIG_ERROR + "\n"))
    status = decision.status
    assert (status.phase, status.reason) == (Phase.FAILED, Reason.FAILED_BY_POLICY)
    assert status.message.startswith(f"worker 0 (pod {name}) failed with exit code 2: {CONFIG_ERROR}; ")
    assert "the default failurePolicy (onExitCodes In [2] -> FailJob) fails the job" in status.message
    assert (status.restarts, status.application_restarts, status.attempt) == (0, 0, 0)
    assert status.completion_time
    failed = next(c for c in status.conditions if c.type == "Failed")
    assert (failed.reason, failed.message) == (Reason.FAILED_BY_POLICY, status.message)
    assert decision.events == [s.Event("Warning", Reason.FAILED_BY_POLICY, status.message)]
    assert decision.delete_pools == [naming.node_pool_name(job, 0)]  # the TPUs go back at once


def test_without_a_message_the_status_still_names_the_worker_and_the_exit():
    job = running(make_job())
    decision = step(job, pods=with_failed(job, 0, exit_code=2))
    assert decision.status.message.startswith(f"worker 0 (pod {naming.pod_name(job, 0, 0, 0)}) failed with")
    assert "exit code 2; the default failurePolicy" in decision.status.message


@pytest.mark.parametrize(
    ("reason", "exit_code", "conditions"),
    [("", 143, SHUTDOWN), ("Terminated", 143, SHUTDOWN), ("NodeShutdown", None, ()), ("Evicted", 2, ())],
)
def test_preemption_stays_an_uncounted_restart_under_the_default_rules(reason, exit_code, conditions):
    job = running(make_job(runPolicy={"maxRestarts": 0}))
    failed = with_failed(job, 0, reason=reason, exit_code=exit_code, conditions=conditions)
    decision = step(job, pods=failed)
    assert (decision.status.phase, decision.status.reason) == (Phase.RESTARTING, Reason.PREEMPTED)
    assert decision.status.application_restarts == 0
    assert decision.status.restarts_by_reason == {Reason.PREEMPTED: 1}


@pytest.mark.parametrize(
    ("reason", "conditions"),
    [("Error", ()), ("", ()), ("Error", (("DisruptionTarget", "False"),)), ("OOMKilled", ())],
)
def test_exit_143_without_evidence_of_a_disruption_is_a_counted_failure_that_backs_off(reason, conditions):
    """SIGTERM's exit code alone proves nothing (a `kill`, a trainer's own exit 143): no node-loss reason and
    no DisruptionTarget condition, so the restart spends maxRestarts and waits its backoff."""
    job = running(make_job(runPolicy={"maxRestarts": 3}))
    decision = step(job, pods=with_failed(job, 0, reason=reason, exit_code=143, conditions=conditions))
    assert (decision.status.phase, decision.status.reason) == (Phase.RESTARTING, Reason.WORKER_FAILED)
    assert decision.status.application_restarts == 1
    assert decision.requeue_after is not None and decision.requeue_after > 0  # the restart backoff


def test_an_application_failure_no_rule_matches_counts_and_quotes_the_message():
    job = running(make_job(tpu={"type": "v5p", "topology": "2x2x4"}))
    trace = 'Traceback (most recent call last):\n  File "train.py", line 3\nValueError: loss is NaN\n'
    decision = step(job, pods=with_failed(job, 2, reason="Error", exit_code=1, message=trace))
    status = decision.status
    assert (status.phase, status.reason, status.application_restarts) == (
        Phase.RESTARTING,
        Reason.WORKER_FAILED,
        1,
    )
    name = naming.pod_name(job, 0, 2, 0)
    assert status.message.startswith(
        f"worker 2 (pod {name}) failed with exit code 1: ValueError: loss is NaN;"
    )
    assert any(e.type == "Warning" and "ValueError: loss is NaN" in e.message for e in decision.events)


def test_spent_budget_quotes_the_last_failure():
    job = make_job(
        runPolicy={"maxRestarts": 0},
        status=TPUJobStatus(phase=Phase.RUNNING, start_time="2026-11-21T11:59:00Z"),
    )
    decision = step(job, pods=with_failed(job, 0, exit_code=1, message="RuntimeError: out of memory"))
    assert decision.status.reason == Reason.BACKOFF_LIMIT
    assert "exit code 1: RuntimeError: out of memory; maxRestarts (0) spent" in decision.status.message


def test_the_default_rules_are_the_bad_config_code_only():
    assert [failures.rule_text(rule) for rule in DEFAULT_FAILURE_RULES] == ["onExitCodes In [2] -> FailJob"]
    assert make_job().spec.run_policy.failure_policy.rules_in_effect() == DEFAULT_FAILURE_RULES


# --- rules ------------------------------------------------------------------------------------------


def test_an_ignore_rule_restarts_without_spending_max_restarts():
    rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]
    job = running(make_job(rules, runPolicy={"maxRestarts": 0}))
    decision = step(job, pods=with_failed(job, 0, exit_code=42, message="lost the coordinator"))
    status = decision.status
    assert (status.phase, status.reason) == (Phase.RESTARTING, Reason.IGNORED_BY_POLICY)
    assert (status.restarts, status.application_restarts, status.attempt) == (1, 0, 1)
    assert status.restarts_by_reason == {Reason.IGNORED_BY_POLICY: 1}
    assert "exit code 42: lost the coordinator; spec.runPolicy.failurePolicy.rules[0]" in status.message
    assert "(onExitCodes In [42] -> Ignore) ignores it" in status.message
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", Reason.IGNORED_BY_POLICY)]


def test_ignored_restarts_back_off_by_their_own_count():
    rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]
    restarting = TPUJobStatus(
        phase=Phase.RESTARTING,
        reason=Reason.IGNORED_BY_POLICY,
        attempt=3,
        restarts=3,
        restarts_by_reason={Reason.IGNORED_BY_POLICY: 3},
        last_restart_time="2026-11-21T12:00:00Z",
        start_time="2026-11-21T11:00:00Z",
    )
    job = make_job(rules, status=restarting)
    waiting = step(job, now=NOW + dt.timedelta(seconds=39))
    assert waiting.create_pods == [] and waiting.requeue_after == 1  # 10 s x 2^2
    assert step(job, now=NOW + dt.timedelta(seconds=40)).create_pods == [(0, 0)]


def test_rules_given_replace_the_defaults_and_an_empty_list_means_none():
    for rules in ([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}}], []):
        job = running(make_job(rules))
        decision = step(job, pods=with_failed(job, 0, exit_code=2, message=CONFIG_ERROR))
        assert (decision.status.reason, decision.status.application_restarts) == (Reason.WORKER_FAILED, 1)


def test_the_first_matching_rule_wins():
    rules = [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [4]}},
    ]
    job = running(make_job(rules))
    assert step(job, pods=with_failed(job, 0, exit_code=3)).status.reason == Reason.IGNORED_BY_POLICY
    failed = step(job, pods=with_failed(job, 0, exit_code=4)).status
    assert (failed.phase, failed.reason) == (Phase.FAILED, Reason.FAILED_BY_POLICY)
    assert "spec.runPolicy.failurePolicy.rules[1] (onExitCodes NotIn [0] -> FailJob)" in failed.message


def test_a_count_rule_restarts_and_counts():
    rules = [{"action": "Count", "onExitCodes": {"operator": "In", "values": [2]}}]
    job = running(make_job(rules))
    status = step(job, pods=with_failed(job, 0, exit_code=2)).status
    assert (status.phase, status.reason, status.application_restarts) == (
        Phase.RESTARTING,
        Reason.WORKER_FAILED,
        1,
    )
    assert "(onExitCodes In [2] -> Count) counts it" in status.message


def test_an_exit_code_catch_all_leaves_preemption_alone():
    rules = [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]
    job = running(make_job(rules, runPolicy={"maxRestarts": 0}))
    decision = step(job, pods=with_failed(job, 0, reason="Terminated", exit_code=143, conditions=SHUTDOWN))
    assert (decision.status.phase, decision.status.reason) == (Phase.RESTARTING, Reason.PREEMPTED)
    assert decision.status.application_restarts == 0


@pytest.mark.parametrize(
    ("reason", "exit_code", "conditions"),
    [("Terminated", 143, SHUTDOWN), ("", 143, SHUTDOWN), ("NodeShutdown", None, ())],
    ids=["kubelet-shutdown", "disruption-condition", "node-loss-reason"],
)
def test_disruption_target_matches_what_the_infrastructure_stopped(reason, exit_code, conditions):
    job = running(make_job([{"action": "FailJob", "onPodConditions": DISRUPTION}]))
    decision = step(job, pods=with_failed(job, 0, reason=reason, exit_code=exit_code, conditions=conditions))
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, Reason.FAILED_BY_POLICY)
    assert "(onPodConditions [DisruptionTarget] -> FailJob)" in decision.status.message


def test_a_count_rule_on_disruptions_spends_the_budget():
    job = running(
        make_job([{"action": "Count", "onPodConditions": DISRUPTION}], runPolicy={"maxRestarts": 0})
    )
    decision = step(job, pods=with_failed(job, 0, reason="Terminated", exit_code=143, conditions=SHUTDOWN))
    assert (decision.status.phase, decision.status.reason) == (Phase.FAILED, Reason.BACKOFF_LIMIT)


def test_a_pod_condition_rule_matches_the_status_it_names():
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "ConfigLoaded", "status": "False"}]}]
    job = running(make_job(rules, runPolicy={"maxRestarts": 0}))
    ignored = step(job, pods=with_failed(job, 0, exit_code=1, conditions=(("ConfigLoaded", "False"),)))
    assert ignored.status.reason == Reason.IGNORED_BY_POLICY
    counted = step(job, pods=with_failed(job, 0, exit_code=1, conditions=(("ConfigLoaded", "True"),)))
    assert counted.status.reason == Reason.BACKOFF_LIMIT


def test_exit_code_zero_and_no_exit_code_match_no_exit_code_rule():
    rule = parse_tpujob(base_job(runPolicy={"failurePolicy": {"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}
    ]}})).spec.run_policy.failure_policy.rules[0]  # fmt: skip
    assert not failures.matches(rule, s.PodView("p", 0, 0, 0, "Failed", exit_code=0))
    assert not failures.matches(rule, s.PodView("p", 0, 0, 0, "Failed"))
    assert failures.matches(rule, s.PodView("p", 0, 0, 0, "Failed", exit_code=3))


# --- several failed workers -------------------------------------------------------------------------

MULTI_HOST = {"tpu": {"type": "v5p", "topology": "2x2x4"}}


def failing(job, *failed):
    """Attempt 0 with the given (worker, extra) failed, the others running."""
    views = list(pods(job, 0, "Running"))
    for worker, extra in failed:
        views[worker] = dataclasses.replace(views[worker], phase="Failed", **extra)
    return tuple(views)


def test_a_fail_job_match_on_any_worker_wins():
    job = running(make_job(**MULTI_HOST))
    views = failing(
        job, (0, {"exit_code": 1}), (1, {"reason": "Terminated", "exit_code": 143}), (3, {"exit_code": 2})
    )
    status = step(job, pods=views).status
    assert (status.phase, status.reason) == (Phase.FAILED, Reason.FAILED_BY_POLICY)
    assert status.message.startswith(
        f"worker 3 (pod {naming.pod_name(job, 0, 3, 0)}) failed with exit code 2"
    )


def test_a_preempted_worker_makes_its_peers_failures_a_preemption_as_before():
    job = running(make_job(runPolicy={"maxRestarts": 0}, **MULTI_HOST))
    views = failing(job, (0, {"exit_code": 1}), (2, {"reason": "Terminated", "exit_code": 143}))
    status = step(job, pods=views).status
    assert (status.phase, status.reason, status.application_restarts) == (
        Phase.RESTARTING,
        Reason.PREEMPTED,
        0,
    )


def test_a_counted_failure_outweighs_an_ignored_one():
    rules = [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]
    job = running(make_job(rules, **MULTI_HOST))
    views = failing(job, (0, {"exit_code": 42}), (1, {"exit_code": 1, "message": "boom"}))
    status = step(job, pods=views).status
    assert (status.reason, status.application_restarts) == (Reason.WORKER_FAILED, 1)
    assert "worker 1" in status.message and "boom" in status.message
    only_ignored = step(job, pods=failing(job, (0, {"exit_code": 42}), (1, {"exit_code": 42}))).status
    assert (only_ignored.reason, only_ignored.application_restarts) == (Reason.IGNORED_BY_POLICY, 0)


def test_multislice_failures_name_the_slice():
    job = running(
        make_job(tpu={"type": "v6e", "topology": "4x4", "slices": 2}, nodePool={"zone": "us-central1-b"})
    )
    views = list(pods(job, 0, "Running"))
    index = next(i for i, p in enumerate(views) if (p.slice, p.worker) == (1, 2))
    views[index] = dataclasses.replace(views[index], phase="Failed", exit_code=2, message=CONFIG_ERROR)
    status = step(job, pods=tuple(views)).status
    name = naming.pod_name(job, 1, 2, 0)
    assert status.message.startswith(f"slice 1 worker 2 (pod {name}) failed with exit code 2: {CONFIG_ERROR}")


# --- the message quoted -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "quoted"),
    [
        ("", ""),
        ("ConfigError: bad\n", "ConfigError: bad"),
        ("step 1\nstep 2\n\nValueError: x  \n\n", "ValueError: x"),
        ("x" * 600, "x" * 511 + "…"),
    ],
)
def test_the_status_quotes_the_last_line_of_the_message_at_most_512_characters(message, quoted):
    assert failures.quote(message) == quoted


def test_an_oom_kill_names_its_reason():
    pod = s.PodView("train-s0-w0-a0", 0, 0, 0, "Failed", reason="OOMKilled", exit_code=137)
    assert failures.describe(pod, 1) == "worker 0 (pod train-s0-w0-a0) failed with exit code 137 (OOMKilled)"


# --- validation -------------------------------------------------------------------------------------


def problems(*rules):
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(base_job(runPolicy={"failurePolicy": {"rules": list(rules)}}))
    return [(p.path, p.message) for p in caught.value.problems]


RULE_0 = "spec.runPolicy.failurePolicy.rules[0]"


def test_a_rule_needs_exactly_one_matcher():
    both = {**FAIL_ON_CONFIG, "onPodConditions": DISRUPTION}
    assert problems(both) == [
        (RULE_0, "set exactly one of onExitCodes or onPodConditions (both given); write one rule per matcher")
    ]
    (neither,) = problems({"action": "Count"})
    assert neither[0] == RULE_0 and "(neither given)" in neither[1]


def test_zero_is_refused_in_an_in_list_and_codes_are_listed_once():
    zero = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 2]}}
    assert problems(zero) == [
        (
            f"{RULE_0}.onExitCodes.values",
            "0 is not allowed with operator In: exit code 0 is success and never matches; remove it",
        )
    ]
    twice = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0, 3, 0, 3, 1]}}
    assert problems(twice) == [
        (f"{RULE_0}.onExitCodes.values", "0, 3 listed more than once; list each exit code once")
    ]


def codes(operator, *values):
    return {"operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("rule", "path", "fragment"),
    [
        ({"action": "FailJob", "onExitCodes": codes("In")}, ".onExitCodes.values", "at least 1"),
        ({"action": "FailJob", "onExitCodes": codes("In", 256)}, ".onExitCodes.values[0]", "255"),
        ({"action": "Retry", "onExitCodes": codes("In", 1)}, ".action", "valid: FailJob, Ignore, Count"),
        ({"action": "Ignore", "onExitCodes": codes("Is", 1)}, ".onExitCodes.operator", "valid: In, NotIn"),
        ({"action": "Ignore", "onPodConditions": []}, ".onPodConditions", "at least 1"),
        (
            {"action": "Ignore", "onPodConditions": [{"type": "X", "status": "Yes"}]},
            ".onPodConditions[0].status",
            "True|False|Unknown",
        ),
        ({"action": "Ignore", "onExitCode": codes("In", 1)}, ".onExitCode", "onExitCodes, onPodConditions"),
    ],
    ids=["empty-values", "code-over-255", "unknown-action", "unknown-operator", "no-conditions", "bad-status",
         "typo"],
)  # fmt: skip
def test_malformed_rules_name_the_field_and_what_is_allowed(rule, path, fragment):
    found = problems(rule)
    assert [p for p, _ in found] == [RULE_0 + path], found
    assert fragment in found[0][1]


def test_at_most_20_rules():
    (found,) = problems(*[FAIL_ON_CONFIG] * 21)
    assert found[0] == "spec.runPolicy.failurePolicy.rules" and "at most 20" in found[1]


# --- the pod's side: what the operator reads and renders --------------------------------------------


def pod_body(phase, terminated=None, conditions=()):
    state = {"terminated": terminated} if terminated else {"running": {}}
    return {
        "metadata": {"name": "train-s0-w0-a0", "labels": {}},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": phase,
            "conditions": [{"type": t, "status": v} for t, v in conditions],
            "containerStatuses": [{"name": "trainer", "state": state}],
        },
    }


def test_pod_view_reads_the_termination_message_and_a_failed_pods_conditions():
    terminated = {"exitCode": 2, "reason": "Error", "message": CONFIG_ERROR + "\n"}
    view = pod_view(pod_body("Failed", terminated, [("DisruptionTarget", "True"), ("Ready", "False")]))
    assert (view.exit_code, view.reason, view.message) == (2, "Error", CONFIG_ERROR + "\n")
    assert view.conditions == (("DisruptionTarget", "True"), ("Ready", "False"))
    live = pod_view(pod_body("Running", conditions=[("Ready", "True")]))
    assert (live.message, live.conditions) == ("", ())  # the index keeps no conditions of live pods
    assert live.ready and not view.ready  # but whether a live one is Ready (Kueue's PodsReady counts it)
    assert not pod_view(pod_body("Running", conditions=[("Ready", "False")])).ready


def test_the_trainer_container_falls_back_to_its_log_for_a_termination_message():
    job = make_job()
    (container,) = render.pod(job, Cluster(), 0, 0)["spec"]["containers"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "terminationMessagePath" not in container  # the default: /dev/termination-log
