"""status/cost.py: chip-seconds per job (status.cost), and the metric (tpujob_tpu_chip_seconds_total) that
adds the same amounts on every pass. Passes go through decide -> settle -> the metrics' PassRecorder, as the
reconciler runs them, at times that are not whole seconds."""

from __future__ import annotations

import datetime as dt
import itertools

from prometheus_client import REGISTRY

from tests.manifests import base_job
from tpujob import metrics
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.job import TPUJob
from tpujob.api.status import Cost, NodePoolStatus, Phase, TPUJobStatus
from tpujob.render import naming
from tpujob.status import cost

T0 = dt.datetime(2026, 11, 21, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def make_job(uid: str, **spec: object) -> TPUJob:
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid=uid, generation=1)
    return parse_tpujob(manifest)


def metric(job: TPUJob) -> float:
    labels = {"tpu_type": job.spec.tpu.type, "capacity_mode": job.spec.capacity.mode}
    return REGISTRY.get_sample_value("tpujob_tpu_chip_seconds_total", labels) or 0.0


def pods(job: TPUJob, phase: str) -> tuple[s.PodView, ...]:
    return tuple(
        s.PodView(naming.pod_name(job, sl, w, 0), sl, w, 0, phase) for sl, w in s.expected_workers(job)
    )


class Operator:
    """One operator process: passes as reconciler/passes.py makes them (decide, settle, record metrics)."""

    def __init__(self) -> None:
        self.recorder = metrics.PassRecorder()

    def run(self, job: TPUJob, when: float, applied: s.Applied | None = None, **observed: object) -> TPUJob:
        seen = s.Observed(job=job, now=at(when), service_exists=True, **observed)  # type: ignore[arg-type]
        decision = s.settle(seen, s.decide(seen), applied or s.Applied())
        self.recorder.record(job, seen.status, decision.status, at(when))
        return job.model_copy(update={"status": decision.status})


def test_chip_seconds_are_whole_seconds_between_status_times():
    assert cost.chip_seconds(16, "2026-11-21T12:00:00Z", at(10.9)) == 160
    assert cost.chip_seconds(16, "2026-11-21T12:00:05Z", at(4.2)) == 0  # a clock that went back adds nothing
    # Cut anywhere, increments add up to the same figure: each one counts from the last one's whole second.
    cuts = [0.3, 0.9, 1.2, 7.7, 7.8, 30.05]
    pieces = [cost.chip_seconds(4, s.timestamp(at(a)), at(b)) for a, b in itertools.pairwise(cuts)]
    assert sum(pieces) == cost.chip_seconds(4, s.timestamp(at(0.3)), at(30.05)) == 4 * 30


def test_the_status_and_the_metric_agree_at_every_transition_and_at_the_end():
    """A v5p 2x2x4 job (one pool, 16 chips) from its first pass to its pool gone: whenever the status accounts
    (the chips held or the phase changed), its chip-seconds equal what the metric added over the same passes;
    passes in between change neither the figure nor anything else in the status (no write for the clock)."""
    operator = Operator()
    job = make_job("cost-1", tpu={"type": "v5p", "topology": "2x2x4"}, capacity={"mode": "spot"})
    pool = naming.node_pool_name(job, 0)

    def view(state: str) -> tuple[s.PoolView, ...]:
        return (s.PoolView(0, pool, state, operation="op-1" if state == "PROVISIONING" else ""),)

    start = metric(job)
    passes: list[tuple[float, dict[str, object]]] = [
        (0.3, {"pools": view(s.POOL_MISSING), "applied": s.Applied(operations={0: "op-1"})}),  # create
        (5.7, {"pools": view("PROVISIONING")}),  # GKE is making it: only the clock moved
        (95.2, {"pools": view("RUNNING")}),  # pods created: Starting
        (100.9, {"pools": view("RUNNING"), "pods": pods(job, "Running")}),  # Running
        (400.4, {"pools": view("RUNNING"), "pods": pods(job, "Running")}),  # only the clock moved
        (1000.6, {"pods": pods(job, "Succeeded"), "applied": s.Applied(stopping={pool})}),  # Succeeded
        (1030.1, {"pools": view(s.POOL_STOPPING), "pods": pods(job, "Succeeded")}),  # GKE deletes it
        (1060.8, {"pools": view(s.POOL_MISSING), "pods": pods(job, "Succeeded")}),  # gone: 0 chips, final
        (2000.5, {"pools": view(s.POOL_MISSING), "pods": pods(job, "Succeeded")}),  # nothing more to add
    ]
    accounted = []
    for when, observed in passes:
        before = job.status or TPUJobStatus()
        applied = observed.pop("applied", None)
        job = operator.run(job, when, applied, **observed)  # type: ignore[arg-type]
        figure = job.status.cost if job.status else None
        assert figure is not None
        if figure.accounted_until == s.timestamp(at(when)):
            accounted.append((when, job.status.phase if job.status else None, figure.chips))
            assert figure.chip_seconds == metric(job) - start, f"at {when} s"
        else:
            assert job.status == before, f"at {when} s: rewritten for the clock alone"
    assert accounted == [
        (0.3, Phase.PROVISIONING, 16),
        (95.2, Phase.STARTING, 16),
        (100.9, Phase.RUNNING, 16),
        (1000.6, Phase.SUCCEEDED, 16),
        (1060.8, Phase.SUCCEEDED, 0),
    ]
    final = job.status.cost if job.status else None
    assert final is not None
    assert final.chip_seconds == metric(job) - start == 16 * (1060 - 0)  # held from 12:00:00 to 12:17:40
    # Productive: goodput's Running time (12:01:40 to 1000.6 s) times the job's 16 chips.
    goodput = job.status.goodput if job.status else None
    assert goodput is not None and goodput.productive_seconds == 900.6
    assert final.productive_chip_seconds == round(900.6 * 16) == 14410


def test_the_status_keeps_the_time_across_an_operator_restart_the_metric_cannot_see():
    """A new process starts counting at its first pass; the status counts on from accountedUntil at the chips
    it last recorded."""
    job = make_job("cost-2", tpu={"type": "v5p", "topology": "2x2x4"}, capacity={"mode": "spot"})
    pool = naming.node_pool_name(job, 0)
    ready = (s.PoolView(0, pool, "RUNNING"),)
    start = metric(job)
    first = Operator()
    job = first.run(job, 0.0, pools=ready)  # Starting on a ready pool: 16 chips from 0 s
    job = first.run(job, 50.0, pools=ready, pods=pods(job, "Running"))  # Running
    job = first.run(job, 80.0, pools=ready, pods=pods(job, "Running"))  # the process's last pass
    second = Operator()  # restarted: nothing from 80 s to 200 s in any process' metric
    job = second.run(job, 200.0, pools=ready, pods=pods(job, "Running"))
    job = second.run(job, 300.0, pools=ready, pods=pods(job, "Succeeded"), applied=s.Applied(stopping={pool}))
    figure = job.status.cost if job.status else None
    assert figure is not None and figure.accounted_until == s.timestamp(at(300))
    assert figure.chip_seconds == 16 * 300
    assert metric(job) - start == 16 * 300 - 16 * (200 - 80)


def test_on_existing_pools_the_chips_are_those_of_the_running_workers():
    """nodePool.policy existing: the job pays for the hosts its workers run on, only while they run."""
    operator = Operator()
    job = make_job("cost-3", tpu={"type": "v5p", "topology": "2x2x4"}, nodePool={"policy": "existing"})
    start = metric(job)
    job = operator.run(job, 0.0)  # pods created, none running: 0 chips
    half = pods(job, "Running")[:2] + pods(job, "Pending")[2:]
    job = operator.run(job, 10.0, pods=half)  # 2 of 4 hosts: 8 chips
    job = operator.run(job, 20.0, pods=pods(job, "Running"))  # all 4: 16 chips, Running
    job = operator.run(job, 50.0, pods=pods(job, "Succeeded"))  # none
    figure = job.status.cost if job.status else None
    assert figure is not None and figure.chips == 0
    assert figure.chip_seconds == 8 * 10 + 16 * 30 == metric(job) - start


def test_the_first_pass_starts_the_account_and_an_old_status_is_brought_up_to_date():
    job = make_job("cost-4")  # v5e 2x2: one 4-chip pool
    status = TPUJobStatus(
        phase=Phase.RUNNING, node_pools=[NodePoolStatus(name="p", slice=0, state="RUNNING")]
    )
    fresh = status.model_copy(deep=True)
    cost.account(job, status, fresh, at(7.5))
    assert fresh.cost == Cost(chips=4, accounted_until="2026-11-21T12:00:07Z")
    gone = fresh.model_copy(deep=True)
    gone.node_pools[0].state = s.POOL_DELETED
    cost.account(job, fresh, gone, at(20))
    assert gone.cost == Cost(chip_seconds=4 * 13, chips=0, accounted_until="2026-11-21T12:00:20Z")
