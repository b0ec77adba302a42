"""The TPUJob's run policy: restarts, deadlines, suspend, and the failure policy (what a failed worker means
for the job, rule by rule, as Kubernetes' podFailurePolicy)."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field

from tpujob.api.base import ApiModel
from tpujob.api.constants import EXIT_CODE_BAD_CONFIG


class ExitCodeOperator(enum.StrEnum):
    in_ = "In"
    not_in = "NotIn"


class FailureAction(enum.StrEnum):
    fail_job = "FailJob"
    ignore = "Ignore"
    count_ = "Count"  # `count` is a str method


# Kubernetes' podFailurePolicy bounds: at most 20 rules, 255 exit codes per rule, 20 pod conditions per rule.
MAX_FAILURE_RULES = 20
MAX_EXIT_CODES = 255
MAX_POD_CONDITIONS = 20
# The cap of spec.runPolicy.startupTimeoutSeconds everywhere; a namespace's tenancy policy may lower it.
MAX_STARTUP_TIMEOUT_SECONDS = 24 * 3600


class OnExitCodes(ApiModel):
    """Which exit codes of the worker's container a rule matches (as Kubernetes' podFailurePolicy)."""

    operator: ExitCodeOperator = Field(
        description=(
            "In: the exit code is one of values; NotIn: it is none of them. Exit code 0 (success) never "
            "matches."
        )
    )
    values: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        min_length=1,
        max_length=MAX_EXIT_CODES,
        description="Exit codes (0 to 255), each listed once; 0 is not allowed with In.",
    )


class OnPodCondition(ApiModel):
    """A pod condition a rule matches."""

    type: str = Field(
        min_length=1,
        max_length=316,
        description=(
            "Pod condition type, e.g. DisruptionTarget: the pod was stopped by a disruption (node shutdown "
            "on spot reclaim or maintenance, eviction, preemption). It also matches a pod the operator sees "
            "as stopped by the infrastructure (a node-loss reason, or exit code 143) without the condition."
        ),
    )
    status: str = Field(
        default="True",
        pattern=r"^(True|False|Unknown)$",
        description="The condition's status to match: True (default), False or Unknown.",
    )


class FailurePolicyRule(ApiModel):
    """One rule: what a failed worker pod shows (an exit code or a pod condition), and what the job does."""

    action: FailureAction = Field(
        description=(
            "FailJob: fail the job at once (reason FailedByPolicy), no restart. Ignore: restart the job "
            "without counting it against maxRestarts (IgnoredByPolicy). Count: restart it and count it "
            "(WorkerFailed), as for a failure no rule matches."
        )
    )
    on_exit_codes: OnExitCodes | None = Field(
        default=None,
        description=(
            "Match the exit code of the worker's container. Pods the infrastructure stopped (preemption, "
            "maintenance, node loss: exit code 143 or a node-loss reason) are matched by onPodConditions "
            "DisruptionTarget only. Set this or onPodConditions."
        ),
    )
    on_pod_conditions: list[OnPodCondition] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_POD_CONDITIONS,
        description="Match when the pod has any of these conditions. Set this or onExitCodes.",
    )


# The rules of a job that gives none: the trainer's bad-settings exit code fails the job at once. Exit code
# 143 (SIGTERM on a reclaimed or maintained node) stays a preemption: a restart that does not count.
DEFAULT_FAILURE_RULES: tuple[FailurePolicyRule, ...] = (
    FailurePolicyRule(
        action=FailureAction.fail_job,
        on_exit_codes=OnExitCodes(operator=ExitCodeOperator.in_, values=[EXIT_CODE_BAD_CONFIG]),
    ),
)


class FailurePolicy(ApiModel):
    """What a failed worker means for the job, rule by rule (as Kubernetes' podFailurePolicy and JobSet's
    failurePolicy). The first rule a failed pod matches decides; a pod no rule matches restarts the job as
    before: counted for an application failure, not counted for preemption, maintenance or node loss."""

    rules: list[FailurePolicyRule] | None = Field(
        default=None,
        max_length=MAX_FAILURE_RULES,
        description=(
            "Rules in order; the first match wins. Unset: one rule, exit code 2 (the trainer's bad "
            "settings) -> FailJob. An empty list: no rules."
        ),
    )

    def rules_in_effect(self) -> tuple[FailurePolicyRule, ...]:
        return DEFAULT_FAILURE_RULES if self.rules is None else tuple(self.rules)


class RestartStrategy(enum.StrEnum):
    recreate = "Recreate"
    recreate_slice = "RecreateSlice"


class RunPolicy(ApiModel):
    """How the job behaves on failure, over time and when it ends."""

    max_restarts: int = Field(
        default=3,
        ge=0,
        le=1000,
        description=(
            "Restarts of the whole job after application failures (a non-zero exit). Preemption, "
            "maintenance and node loss restart the job without counting."
        ),
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Fail the job (DeadlineExceeded) after this many seconds from start."
    )
    provisioning_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Fail the job (ProvisioningTimeout) and delete its node pools when its pools are not all "
            "running this many seconds after the job started waiting for them; unset: wait for capacity "
            "as long as it takes."
        ),
    )
    startup_timeout_seconds: int = Field(
        # Ten minutes: room for a multi-GB TPU image to pull; Kueue gives a job's pods 5 minutes by default
        # (waitForPodsReady.timeout) before it evicts the job.
        default=600,
        ge=0,
        le=MAX_STARTUP_TIMEOUT_SECONDS,
        description=(
            "Fail the job (StartupTimeout) and delete its node pools when its workers are not all running "
            "this many seconds after an attempt began starting them on ready pools (an image that cannot "
            "be pulled, a missing Secret, a pod that cannot be scheduled): no TPU slice is held by pods "
            "that cannot start. The kubelet's reason shows in the status meanwhile. The namespace's "
            "tenancy policy sets a floor and a cap (default 60 and 3600); 0: the cap. At most "
            f"{MAX_STARTUP_TIMEOUT_SECONDS} (a day)."
        ),
    )
    progress_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Restart the job (Stalled, counted against maxRestarts) when its trainer's step has not moved "
            "for this many seconds while all workers run (a hung collective, a stalled input pipeline): no "
            "slice is held by a trainer that does not progress. Read from worker 0's metrics endpoint; a "
            "trainer that serves no step counter there counts as not progressing. Leave room for a slow "
            "step, a checkpoint save and the first steps' compilation (minutes on a TPU). Unset: no limit."
        ),
    )
    restart_strategy: RestartStrategy = Field(
        default=RestartStrategy.recreate,
        description=(
            "Recreate: every restart recreates every worker pod of every slice. RecreateSlice: in a "
            "Multislice job, a failure confined to one slice (its workers failed, or its node was lost) "
            "recreates only that slice's pods (and its pool, when its node is gone); the other slices' pods "
            "stay, with their IPs and volumes, and their trainers restart in place: the pods' annotation "
            "tpujob.dev/restart-attempt takes the new attempt, which the trainer reads from the file "
            "TPUJOB_RESTART_ATTEMPT_FILE (a downward API volume) and restarts its training process on. "
            "Needs a trainer that does so (the default trainer and the JAX example do); failures of more "
            "than one slice, hang signals and the trainer's stall restart the whole job."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the TPUJob this many seconds after it succeeded or failed."
    )
    suspend: bool = Field(
        default=False, description="true: remove the pods and node pools and hold; false: run or resume."
    )
    maintenance_lead_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description=(
            "How long before the infrastructure ends a running slice (host maintenance GKE announced, or a "
            "flex-start run duration) the workers are told to checkpoint (SIGTERM) and the job restarts, "
            "without spending maxRestarts."
        ),
    )
    failure_policy: FailurePolicy = Field(
        default_factory=FailurePolicy,
        description=(
            "Rules on a worker's exit code or pod conditions: fail the job at once, restart it without "
            "counting, or count. Default: exit code 2 (the trainer's bad settings) fails the job at once."
        ),
    )
