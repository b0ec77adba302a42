"""The TPUJob status as pydantic models: written by the operator only, read by users, `kubectl` and the
operator's next pass. The CRD's status schema is generated from them."""

from __future__ import annotations

import enum

from pydantic import ConfigDict, Field

from tpujob.api.base import ApiModel


class ConditionStatus(enum.StrEnum):
    true = "True"
    false = "False"
    unknown = "Unknown"


class Condition(ApiModel):
    """A Kubernetes-style condition."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(description="Ready, Provisioned, Running, Succeeded, Failed, Suspended, ...")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(default=None, description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(default=None, description="spec generation this is based on.")


class NodePoolStatus(ApiModel):
    """One slice's GKE node pool as the operator last saw it."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(description="GKE node pool name.")
    slice: int = Field(description="Slice index the pool holds.")
    state: str = Field(description="GKE state (PROVISIONING, RUNNING, ERROR, ...) or Deleted.")
    message: str = Field(default="", description="GKE's last message about the pool.")
    condition: str | None = Field(
        default=None, description="GKE's condition code for the pool (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED, ...)."
    )
    operation: str | None = Field(
        default=None, description="The GKE create or delete operation being waited on (its name)."
    )
    zone: str | None = Field(default=None, description="The pool's zone.")


class WorkerCounts(ApiModel):
    """The job's pods of the current attempt, by state."""

    model_config = ConfigDict(extra="ignore")

    expected: int = Field(default=0, description="Pods the job runs (hosts x slices).")
    pending: int = Field(default=0, description="Pods created, not yet running.")
    running: int = Field(default=0, description="Pods running.")
    succeeded: int = Field(default=0, description="Pods that exited 0 in this attempt.")
    failed: int = Field(default=0, description="Pods that failed in this attempt.")


class GoodputRun(ApiModel):
    """When one attempt was Running, as the operator saw it."""

    model_config = ConfigDict(extra="ignore")

    attempt: int = Field(description="The attempt.")
    since: str = Field(description="When the job's phase became Running in this attempt (RFC 3339).")
    until: str | None = Field(
        default=None, description="When it left Running (RFC 3339); unset while running."
    )


class Goodput(ApiModel):
    """How the job's time on its TPUs was spent (wall-clock seconds the job held or waited for its slices),
    in the categories of Google's goodput definitions (ml-goodput-measurement). Accounted when the phase
    changes and when an attempt ends, from the status' own timestamps and the trainer's progress line."""

    model_config = ConfigDict(extra="ignore")

    ratio: float | None = Field(
        default=None, description="productiveSeconds over all accounted seconds (0 to 1)."
    )
    productive_seconds: float = Field(default=0.0, description="Time spent on training steps kept.")
    badput_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Lost time per category: tpuInitialization, trainingPrep, programStartup, dataLoading, "
        "checkpointSave, checkpointRestore, wastedProgressFromDisruption, other.",
    )
    steps_lost: int = Field(
        default=0, description="Training steps redone because a disruption came after the last checkpoint."
    )
    accounted_until: str | None = Field(
        default=None, description="Time up to which the job's time is accounted (RFC 3339)."
    )
    accounted_attempt: int = Field(
        default=-1, description="The last attempt whose trainer progress was accounted."
    )
    unreported_attempts: int = Field(
        default=0,
        description="Attempts that ran but ended without a trainer progress line (e.g. their pods vanished "
        "with their node): their time after the checkpoint the next attempt resumed from is "
        "wastedProgressFromDisruption, but their steps lost and start-up are unknown (not in stepsLost).",
    )
    runs: list[GoodputRun] = Field(
        default_factory=list,
        description="When the attempts not yet accounted were Running (the latest few), to account an "
        "attempt that reports no progress.",
    )


class TPUJobStatus(ApiModel):
    """Written by the operator only."""

    model_config = ConfigDict(extra="ignore")

    phase: str | None = Field(
        default=None,
        description="Pending, Provisioning, Starting, Running, Restarting, Succeeded, Failed or Suspended.",
    )
    reason: str | None = Field(default=None, description="Why the job is in this phase.")
    message: str | None = Field(default=None, description="Details for a human.")
    conditions: list[Condition] = Field(default_factory=list, description="Latest observations.")
    observed_generation: int | None = Field(default=None, description="spec generation last acted on.")
    node_pools: list[NodePoolStatus] = Field(default_factory=list, description="One entry per slice.")
    workers: WorkerCounts = Field(default_factory=WorkerCounts, description="Pods of the current attempt.")
    attempt: int = Field(default=0, description="Current attempt; each restart recreates all pods.")
    restarts: int = Field(default=0, description="All restarts, whatever the cause.")
    application_restarts: int = Field(
        default=0, description="Restarts caused by the application; these count against maxRestarts."
    )
    restarts_by_reason: dict[str, int] = Field(default_factory=dict, description="Restarts per reason.")
    last_restart_time: str | None = Field(default=None, description="When the last restart began (RFC 3339).")
    start_time: str | None = Field(default=None, description="When the operator first acted (RFC 3339).")
    zone: str | None = Field(
        default=None, description="The zone the job's node pools are in, or asked for in."
    )
    zone_since: str | None = Field(
        default=None, description="Since when the job waits in that zone (RFC 3339)."
    )
    maintenance_time: str | None = Field(
        default=None,
        description="The earliest host maintenance GKE announced for the job's nodes (RFC 3339).",
    )
    run_deadline: str | None = Field(
        default=None,
        description="flexStart: when the current slice's VMs reach their run duration (RFC 3339).",
    )
    provisioning_since: str | None = Field(
        default=None,
        description="When the job began waiting for its node pools (RFC 3339); unset once they run.",
    )
    starting_since: str | None = Field(
        default=None,
        description="When the current attempt began starting its workers on ready pools (RFC 3339); unset "
        "once they all run. spec.runPolicy.startupTimeoutSeconds counts from it.",
    )
    running_time: str | None = Field(default=None, description="When all workers first ran (RFC 3339).")
    completion_time: str | None = Field(default=None, description="When the job finished (RFC 3339).")
    goodput: Goodput | None = Field(default=None, description="How the job's TPU time was spent.")
