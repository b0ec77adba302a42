"""A spec the schema let through but the operator cannot run (a topology its TPU type lacks, ...): nothing is
created for it, and what an earlier, valid spec created (a job edited into an invalid one) is released."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tpujob.api.status import ConditionType, Phase, Reason, TPUJobStatus
from tpujob.status.model import (
    POOL_RELEASED_STATES,
    Decision,
    Event,
    PodView,
    set_condition,
)


@dataclass(frozen=True)
class InvalidObserved:
    """What a pass sees of a job whose spec does not parse: its last status, its pods, the problems."""

    status: TPUJobStatus
    problems: str  # every problem, "; "-joined, each naming its field
    generation: int | None
    now: dt.datetime
    pods: tuple[PodView, ...] = ()


def decide_invalid(observed: InvalidObserved) -> Decision:
    """Failed as InvalidSpec, with one Warning event when the problems change; live pods and pools go."""
    previous = observed.status
    status = previous.fresh_copy()
    decision = Decision(status=status)
    decision.delete_pods = [pod.name for pod in observed.pods if not pod.deleting]
    decision.delete_pools = [p.name for p in previous.node_pools if p.state not in POOL_RELEASED_STATES]
    message = observed.problems
    status.phase, status.reason, status.message = Phase.FAILED, Reason.INVALID_SPEC, message
    status.conditions = set_condition(
        status.conditions, ConditionType.FAILED, True, Reason.INVALID_SPEC, message, observed.now
    )
    status.observed_generation = observed.generation
    if previous.reason != Reason.INVALID_SPEC or previous.message != message:
        decision.events.append(Event("Warning", Reason.INVALID_SPEC, message))
    return decision
