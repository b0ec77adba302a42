"""What the operator would do with a job it has just been given, judged by the functions its passes use:
`judge_spec` (the schema, the namespace's tenancy policy, the cap on hosts), then `decide` on the first look a
pass takes of a new job (nothing of it exists yet). Refused (InvalidSpec, InvalidForKueue), held (a queue
required, Kueue off), or run, and then what the first pass creates. `tpujob validate` and `tpujob render`
say it before the job is applied; the operator's pass reaches the same verdict because it is the same code
(a table test runs both).

What no manifest can tell, and the verdict does not judge: the namespace's other jobs (maxChips), what Kueue
will admit, GKE's capacity, and the cluster's version and workload policies.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from tpujob.api import constants as c
from tpujob.api.base import Problem
from tpujob.api.job import TPUJob
from tpujob.api.spec import NodePoolPolicy
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.api.tenancy import TenancyPolicy
from tpujob.api.validation import DEFAULT_MAX_HOSTS_PER_JOB, DefaultZones, InvalidTPUJob, judge_spec
from tpujob.render import naming
from tpujob.render.cluster import Cluster
from tpujob.render.pools import job_zones
from tpujob.render.workload import KueueApi, queue_name
from tpujob.status.invalid import InvalidObserved, decide_invalid
from tpujob.status.kueue_views import QueueView
from tpujob.status.lifecycle import decide
from tpujob.status.model import POOL_MISSING, Decision, Observed, PoolView

# The field a user changes to get a job past a hold of the first pass (the status message says how).
QUEUE_LABEL_FIELD = f"metadata.labels['{c.LABEL_QUEUE_NAME}']"
HELD_FIELDS: dict[str, str] = {
    Reason.QUEUE_REQUIRED: QUEUE_LABEL_FIELD,
    Reason.KUEUE_NOT_ENABLED: QUEUE_LABEL_FIELD,
    Reason.INVALID_FOR_KUEUE: "spec.tpu.slices",
}


@dataclass(frozen=True)
class Rules:
    """The operator's settings a new job's fate depends on: TPUJOB_TENANCY_POLICY, TPUJOB_MAX_HOSTS_PER_JOB,
    TPUJOB_KUEUE, and the zones of a job that names none (TPUJOB_GKE_ZONE; None: not checked)."""

    tenancy: TenancyPolicy = field(default_factory=TenancyPolicy)
    max_hosts_per_job: int = DEFAULT_MAX_HOSTS_PER_JOB
    kueue: bool = False
    default_zones: DefaultZones | None = None
    # The Workload API the cluster's Kueue serves, which the operator finds by discovery and its CRD (the
    # pod-set cap: 8 up to Kueue v0.17, 10 in v0.18, 18 from v0.19); a manifest alone cannot tell.
    kueue_api: KueueApi = field(default_factory=KueueApi)


@dataclass(frozen=True)
class Verdict:
    """The first pass' decision about a new job, and what keeps it from running (each naming a field; none:
    it runs, from the objects `decision` creates). `job`: as its namespace's policy completes it (None when
    refused before that)."""

    job: TPUJob | None
    decision: Decision
    problems: tuple[Problem, ...] = ()

    @property
    def runs(self) -> bool:
        return not self.problems

    @property
    def status(self) -> TPUJobStatus:
        return self.decision.status


def first_look(job: TPUJob, rules: Rules, cluster: Cluster, now: dt.datetime) -> Observed:
    """What a pass observes of a job just applied: no pods, its pools missing, no Workload yet (the Workload
    watch has listed), no NetworkPolicy where the operator makes one."""
    policy = rules.tenancy.for_namespace(job.metadata.namespace or "default")
    creates_pools = job.spec.node_pool.policy == NodePoolPolicy.create
    name = queue_name(job)
    return Observed(
        job=job,
        now=now,
        pools=(
            tuple(
                PoolView(i, naming.node_pool_name(job, i), POOL_MISSING) for i in range(job.spec.tpu.slices)
            )
            if creates_pools
            else None
        ),
        network_policy_exists=not cluster.network_policy,
        zones=tuple(job_zones(job, cluster)) if creates_pools else (),
        queue=None if name is None else QueueView(name, enabled=rules.kueue, api=rules.kueue_api),
        queue_required=policy.require_queue,
    )


def judge(manifest: Any, rules: Rules, cluster: Cluster, now: dt.datetime) -> Verdict:
    """The operator's verdict on `manifest` (a dict as read from YAML) the first time its pass sees it."""
    metadata = manifest.get("metadata") if isinstance(manifest, dict) else None
    namespace = (metadata.get("namespace") if isinstance(metadata, dict) else None) or "default"
    policy = rules.tenancy.for_namespace(str(namespace))
    try:
        job = judge_spec(manifest, rules.default_zones, policy, rules.max_hosts_per_job)
    except InvalidTPUJob as invalid:
        problems = "; ".join(str(p) for p in invalid.problems)
        decision = decide_invalid(InvalidObserved(TPUJobStatus(), problems, None, now))
        return Verdict(None, decision, tuple(invalid.problems))
    decision = decide(first_look(job, rules, cluster, now))
    if decision.creates:
        return Verdict(job, decision)
    status = decision.status
    held = Problem(
        HELD_FIELDS.get(str(status.reason), "(job)"), status.message or "nothing is created for it"
    )
    return Verdict(job, decision, (held,))


def refused(verdict: Verdict) -> bool:
    """Failed for good (InvalidSpec, InvalidForKueue), not held until the job or a setting changes."""
    return verdict.status.phase == Phase.FAILED
