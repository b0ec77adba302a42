"""What a job's TPUs cost, pure: chip-seconds, in the one accounting the status (`status.cost`) and the metric
(`tpujob_tpu_chip_seconds_total`, metrics.PassRecorder) share.

A job holds chips (`chips_held`): those of its node pools while they exist (spec.nodePool.policy create:
from the pass that asks GKE for a pool to the pass that finds it gone, PROVISIONING and STOPPING included),
or, on pools made elsewhere, those of its running workers. Between two passes it holds what the earlier one
found; `chip_seconds` is those chips times the whole seconds between the two (second-resolved, like every
status time, so that a run of increments adds up to the same figure however it is cut).

- The metric adds `chip_seconds` on every pass, from the last pass this process made for the job: it moves
  with the clock, but counts nothing between a process' last pass and the next process' first (a restart, a
  rollout, a failover), and its labels carry no job.
- The status (`account`) adds it only when the chips held or the phase change (or the first time), from
  `cost.accountedUntil`, so the status is not rewritten for the clock alone. The chips held are the same on
  every pass in between (a change is accounted), so at each of those moments the figure equals the sum of the
  metric's increments over the same passes, and it is final once the job has ended and its pools are gone.
  Being in the status, it loses nothing across an operator restart: the first pass after it accounts the time
  since `accountedUntil` at the chips the status last recorded.

`productiveChipSeconds` is goodput's productive time (status/goodput.py, accounted at its own moments) times
the chips the job holds while it runs: chip-seconds spent on training steps kept.
"""

from __future__ import annotations

import datetime as dt

from tpujob import tpu
from tpujob.api.job import TPUJob
from tpujob.api.spec import NodePoolPolicy
from tpujob.api.status import Cost, TPUJobStatus
from tpujob.status.model import POOL_DELETED, POOL_MISSING, parse_timestamp, timestamp


def chips_held(job: TPUJob, status: TPUJobStatus) -> int:
    """Chips the job pays for as `status` has it: its pools while they exist, or (existing pools) its running
    pods."""
    shape = tpu.resolve_slice(job.spec.tpu.type, job.spec.tpu.topology, job.spec.tpu.machine_type)
    if job.spec.node_pool.policy == NodePoolPolicy.create:
        alive = [p for p in status.node_pools if p.state not in (POOL_MISSING, POOL_DELETED)]
        return len(alive) * shape.chips
    return status.workers.running * shape.chips_per_host


def job_chips(job: TPUJob) -> int:
    """Chips the job holds while it runs: every slice's pool, or every worker's host."""
    shape = tpu.resolve_slice(job.spec.tpu.type, job.spec.tpu.topology, job.spec.tpu.machine_type)
    if job.spec.node_pool.policy == NodePoolPolicy.create:
        return job.spec.tpu.slices * shape.chips
    return job.spec.tpu.slices * shape.hosts * shape.chips_per_host


def chip_seconds(chips: int, since: str, now: dt.datetime) -> int:
    """`chips` held from `since` (an RFC 3339 status time) to `now`, whole seconds (0 if `now` is earlier)."""
    seconds = (parse_timestamp(timestamp(now)) - parse_timestamp(since)).total_seconds()
    return chips * max(int(seconds), 0)


def account(job: TPUJob, previous: TPUJobStatus, status: TPUJobStatus, now: dt.datetime) -> None:
    """Bring status.cost up to `now` when the chips held or the phase changed (or it was never accounted): the
    chips held since `accountedUntil` times the seconds since. Its productive figure follows goodput's."""
    cost = status.cost.model_copy() if status.cost else Cost()
    held = chips_held(job, status)
    if cost.accounted_until is None:
        cost.accounted_until, cost.chips = timestamp(now), held
    elif held != cost.chips or status.phase != previous.phase:
        cost.chip_seconds += chip_seconds(cost.chips, cost.accounted_until, now)
        cost.accounted_until, cost.chips = timestamp(now), held
    if status.goodput is not None:
        cost.productive_chip_seconds = round(status.goodput.productive_seconds * job_chips(job))
    status.cost = cost
