"""What failed workers mean for the job: spec.runPolicy.failurePolicy, rule by rule, over today's causes.

Kubernetes' podFailurePolicy and JobSet's failurePolicy, for a job whose slices are all or nothing: every
failed pod of the attempt is judged by the first rule it matches, then the job's outcome is the strongest:

1. a pod matched by FailJob fails the job at once (FailedByPolicy);
2. else a pod the infrastructure stopped (a node-loss reason or a DisruptionTarget condition, see
   `is_infrastructure_failure`; exit 143 alone is no evidence)
   that no rule counts makes the restart a preemption, not counted (as before: a slice losing a host
   takes its other workers down with it, whatever they exit with);
3. else a counted failure (a Count rule, or an application failure no rule matched) restarts as
   WorkerFailed, against maxRestarts;
4. else every failed pod was matched by Ignore: the job restarts as IgnoredByPolicy, not counted.

Exit-code rules judge the application's own exits; a pod the infrastructure stopped is matched by
onPodConditions DisruptionTarget only (it counts as having that condition even when the kubelet set none),
so a catch-all such as `NotIn [1]` never turns a preemption into a failure. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob.api.job import TPUJob
from tpujob.api.run_policy import ExitCodeOperator, FailureAction, FailurePolicyRule
from tpujob.api.status import Reason
from tpujob.status.model import (
    DISRUPTION_TARGET,
    PodView,
    is_infrastructure_failure,
)

# How much of a termination message the status and the event quote (the pod keeps all of it).
MAX_QUOTED_MESSAGE = 512
RULES_PATH = "spec.runPolicy.failurePolicy.rules"


@dataclass(frozen=True)
class Outcome:
    """What the failed pods of an attempt do to the job."""

    reason: Reason  # FAILED_BY_POLICY, PREEMPTED, WORKER_FAILED or IGNORED_BY_POLICY
    detail: str  # for the status message and the event: which worker, its exit, its message, the rule
    fail: bool = False  # FailJob: end the job now
    counted: bool = False  # the restart spends maxRestarts


def matches(rule: FailurePolicyRule, pod: PodView) -> bool:
    """Whether a failed pod matches a rule (Kubernetes' semantics: exit code 0 never matches)."""
    infrastructure = is_infrastructure_failure(pod)
    if rule.on_exit_codes is not None:
        code = pod.exit_code
        if infrastructure or code is None or code == 0:
            return False
        listed = code in rule.on_exit_codes.values
        return listed if rule.on_exit_codes.operator == ExitCodeOperator.in_ else not listed
    conditions = set(pod.conditions)
    if infrastructure:
        conditions.add((DISRUPTION_TARGET, "True"))
    return any((c.type, c.status) in conditions for c in rule.on_pod_conditions or ())


def first_match(rules: tuple[FailurePolicyRule, ...], pod: PodView) -> int | None:
    """The index of the first rule the pod matches, or None."""
    return next((i for i, rule in enumerate(rules) if matches(rule, pod)), None)


def rule_text(rule: FailurePolicyRule) -> str:
    """A rule as a reader would write it: `onExitCodes In [2] -> FailJob`."""
    if rule.on_exit_codes is not None:
        codes = ", ".join(str(code) for code in rule.on_exit_codes.values)
        matcher = f"onExitCodes {rule.on_exit_codes.operator} [{codes}]"
    else:
        kinds = ", ".join(
            c.type if c.status == "True" else f"{c.type}={c.status}" for c in rule.on_pod_conditions or ()
        )
        matcher = f"onPodConditions [{kinds}]"
    return f"{matcher} -> {rule.action}"


def quote(message: str) -> str:
    """The part of a termination message worth a status line: its last non-empty line (a traceback's
    last line names the error) that is not the trainer's progress line (for goodput, not for people), at
    most MAX_QUOTED_MESSAGE characters."""
    lines = [
        line.strip()
        for line in message.splitlines()
        if line.strip() and not line.startswith(PROGRESS_LINE_PREFIX)
    ]
    text = lines[-1] if lines else ""
    return text if len(text) <= MAX_QUOTED_MESSAGE else text[: MAX_QUOTED_MESSAGE - 1] + "…"


def describe(pod: PodView, slices: int) -> str:
    """`worker 0 (pod train-s0-w0-a0) failed with exit code 2: <its termination message>`."""
    worker = f"slice {pod.slice} worker {pod.worker}" if slices > 1 else f"worker {pod.worker}"
    how = "failed" if pod.exit_code is None else f"failed with exit code {pod.exit_code}"
    if pod.reason and pod.reason != "Error":
        how += f" ({pod.reason})"
    said = quote(pod.message)
    return f"{worker} (pod {pod.name}) {how}" + (f": {said}" if said else "")


def judge(job: TPUJob, failed: list[PodView]) -> Outcome:
    """The outcome of an attempt whose `failed` pods failed (at least one)."""
    policy = job.spec.run_policy.failure_policy
    rules = policy.rules_in_effect()
    defaults = policy.rules is None
    slices = job.spec.tpu.slices
    judged: list[tuple[PodView, int | None, str | None]] = []
    for pod in sorted(failed, key=lambda p: (p.slice, p.worker)):
        index = first_match(rules, pod)
        judged.append((pod, index, None if index is None else rules[index].action))

    def by_rule(index: int, verb: str) -> str:
        if defaults:
            return f"the default failurePolicy ({rule_text(rules[index])}) {verb}"
        return f"{RULES_PATH}[{index}] ({rule_text(rules[index])}) {verb}"

    for pod, index, action in judged:
        if action == FailureAction.fail_job and index is not None:
            hint = "; fix the settings and apply the job again" if defaults else ""
            return Outcome(
                Reason.FAILED_BY_POLICY,
                f"{describe(pod, slices)}; {by_rule(index, 'fails the job')}{hint}",
                fail=True,
            )
    for pod, _, action in judged:
        if is_infrastructure_failure(pod) and action in (None, FailureAction.ignore):
            cause = pod.reason or f"exit code {pod.exit_code}"
            return Outcome(Reason.PREEMPTED, f"pod {pod.name} stopped by the infrastructure ({cause})")
    for pod, index, action in judged:
        if action == FailureAction.count_ and index is not None:
            reason = Reason.PREEMPTED if is_infrastructure_failure(pod) else Reason.WORKER_FAILED
            return Outcome(reason, f"{describe(pod, slices)}; {by_rule(index, 'counts it')}", counted=True)
        if action is None:
            return Outcome(Reason.WORKER_FAILED, describe(pod, slices), counted=True)
    pod, index, _ = judged[0]
    assert index is not None  # every pod left was matched by an Ignore rule
    return Outcome(Reason.IGNORED_BY_POLICY, f"{describe(pod, slices)}; {by_rule(index, 'ignores it')}")
