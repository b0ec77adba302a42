"""A namespace's chip limit (tenancy policy maxChips): the pure gate (status/tenancy.py) holds a job the
limit has no room for before any pool is asked for; what counts against it; and the ledger
(reconciler/tenancy.py) that admits one job at a time per namespace, so passes side by side never admit two
jobs past the limit."""

from __future__ import annotations

import threading

import pytest

from tests.unit.test_status import advance, make_job, step
from tpujob import status as s
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.records import JobRecords
from tpujob.render import naming
from tpujob.status.cost import job_chips

V5E_4X4 = {"type": "v5e", "topology": "4x4"}  # 16 chips


def missing_pools(job):
    return tuple(
        s.PoolView(i, naming.node_pool_name(job, i), s.POOL_MISSING) for i in range(job.spec.tpu.slices)
    )


def test_a_job_over_the_limit_waits_with_the_reason_and_creates_nothing():
    job = make_job(tpu=V5E_4X4)
    decision = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", limit=32, others=24))
    assert decision.create_pools == [] and decision.create_pods == [] and not decision.create_service
    assert decision.status.phase == Phase.PENDING and decision.status.reason == Reason.CHIP_LIMIT
    assert "needs 16" in decision.status.message and "hold 24 of the 32" in decision.status.message
    assert decision.status.start_time is None  # not admitted: it counts nothing
    assert decision.requeue_after is not None
    assert [e.reason for e in decision.events] == [Reason.CHIP_LIMIT]


def test_a_job_that_fits_is_admitted_and_asks_for_its_pools():
    job = make_job(tpu=V5E_4X4)
    decision = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", limit=32, others=16))
    assert decision.create_pools == [0]
    assert decision.status.start_time is not None


def test_an_admitted_job_is_never_held_again_by_the_limit():
    """Once admitted (its chips counted), others that came later cannot take its place mid-run."""
    job = make_job(tpu=V5E_4X4)
    admitted = advance(job, step(job, pools=missing_pools(job)))
    decision = step(admitted, pools=missing_pools(job), chips=s.ChipBudget("default", limit=16, others=16))
    assert decision.status.reason != Reason.CHIP_LIMIT


def status(phase, *, started=True, pools=()):
    return TPUJobStatus.model_validate(
        {
            "phase": phase,
            "startTime": "2026-11-21T11:00:00Z" if started else None,
            "nodePools": [{"slice": i, "name": f"p{i}", "state": state} for i, state in enumerate(pools)],
        }
    )


def test_what_counts_against_the_namespace():
    job = make_job(tpu={**V5E_4X4, "slices": 2})
    counted = {
        "waiting, not admitted": s.chips_counted(
            job.model_copy(update={"status": status(Phase.PENDING, started=False)})
        ),
        "admitted, pools asked for": s.chips_counted(
            job.model_copy(update={"status": status(Phase.PROVISIONING)})
        ),
        "running": s.chips_counted(
            job.model_copy(update={"status": status(Phase.RUNNING, pools=["RUNNING"] * 2)})
        ),
        "succeeded, one pool deleting": s.chips_counted(
            job.model_copy(update={"status": status(Phase.SUCCEEDED, pools=["STOPPING", s.POOL_DELETED])})
        ),
        "failed, pools gone": s.chips_counted(
            job.model_copy(update={"status": status(Phase.FAILED, pools=[s.POOL_DELETED] * 2)})
        ),
    }
    assert counted == {
        "waiting, not admitted": 0,
        "admitted, pools asked for": 32,
        "running": 32,
        "succeeded, one pool deleting": 16,
        "failed, pools gone": 0,
    }


def body(job, phase=None, started=False, version="1"):
    wire = job.model_copy(update={"status": status(phase, started=started) if phase else None})
    manifest = wire.model_dump(by_alias=True, exclude_none=True, mode="json")
    manifest["metadata"]["resourceVersion"] = version
    return manifest


def named(name, uid, **spec):
    job = make_job(**spec)
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"name": name, "uid": uid})})


def admit(ledger, job, limit):
    """What a pass of the job does with the ledger: the pure gate on its counts, and the reservation when
    acting if the gate admitted it; the budget the reservation found (or the gate's, if it held the job)."""
    budget = s.chip_budget(job, [], ledger.counts(job, limit))
    chips = job_chips(job)
    if not budget.fits(chips):
        return budget
    return ledger.reserve(job.metadata.uid, s.ChipReservation(budget.namespace, limit, chips))


def watched(ledger, *bodies):
    """The TPUJob watch handing the ledger each job's version (handlers/events.py)."""
    for manifest in bodies:
        ledger.seen(manifest)


def test_the_ledger_admits_while_there_is_room_and_counts_its_admissions_before_their_status_shows_them():
    ledger = NamespaceChips(JobRecords())
    a, b, c = (named(n, n, tpu=V5E_4X4) for n in "abc")
    watched(ledger, body(a), body(b), body(c))  # none admitted, as the watch has them
    assert admit(ledger, a, 32).fits(16)  # 0 held: a admitted
    assert admit(ledger, b, 32).others == 16  # a counted though its status does not show it yet
    budget = admit(ledger, c, 32)
    assert budget.others == 32 and not budget.fits(16)  # c waits
    # a's status shows it admitted (a new resourceVersion): the ledger lets its own record go.
    watched(ledger, body(a, Phase.RUNNING, started=True, version="2"))
    assert admit(ledger, c, 32).others == 32
    # a ends: its status says so, and its chips are free.
    watched(ledger, body(a, Phase.SUCCEEDED, started=True, version="3"))
    ledger.settled("a", status(Phase.SUCCEEDED))
    assert admit(ledger, c, 32).fits(16)


def test_a_job_another_replica_admitted_counts_once_its_status_shows_it():
    """The ledger reads each job again when its resourceVersion changes (and only then)."""
    records = JobRecords()
    ledger = NamespaceChips(records)
    c_job, d = named("c", "c", tpu=V5E_4X4), named("d", "d", tpu=V5E_4X4)
    watched(ledger, body(c_job), body(d))
    assert admit(ledger, c_job, 16).others == 0
    records.forget("c")  # as when c is deleted: its admission goes with its record
    watched(ledger, body(d, Phase.RUNNING, started=True, version="2"))
    assert admit(ledger, c_job, 16).others == 16
    decodes = ledger.decodes
    watched(ledger, body(d, Phase.RUNNING, started=True, version="2"))  # the same version again: not read
    assert ledger.decodes == decodes


def test_a_deleted_or_suspended_job_frees_its_chips_and_other_namespaces_count_nothing():
    records = JobRecords()
    ledger = NamespaceChips(records)
    a, b = named("a", "a", tpu=V5E_4X4), named("b", "b", tpu=V5E_4X4)
    x = named("x", "x", tpu=V5E_4X4)
    x = x.model_copy(update={"metadata": x.metadata.model_copy(update={"namespace": "team-b"})})
    watched(ledger, body(a), body(b), body(x, Phase.RUNNING, True))
    admit(ledger, a, 16)
    assert not admit(ledger, b, 16).fits(16)
    records.forget("a")  # a deleted (handlers/events.py forgets its record)
    assert admit(ledger, b, 16).fits(16)
    ledger.settled("b", status(Phase.SUSPENDED, started=False))
    assert admit(ledger, a, 16).others == 0
    assert records.namespace_chips("team-b") == 16


def test_passes_side_by_side_never_admit_past_the_limit():
    """Twenty jobs of 16 chips each under a limit of 64, their counts all read before any reserves (each
    pass's gate admits it), then reserved from twenty threads at once: four."""
    ledger = NamespaceChips(JobRecords())
    jobs = [named(f"j{i}", f"u{i}", tpu=V5E_4X4) for i in range(20)]
    watched(ledger, *(body(job) for job in jobs))
    budgets = [s.chip_budget(job, [], ledger.counts(job, 64)) for job in jobs]
    assert all(budget.fits(16) for budget in budgets)  # every gate admits on what it counted
    start = threading.Barrier(len(jobs))
    admitted: list[str] = []

    def reserve(job):
        start.wait()
        if ledger.reserve(job.metadata.uid, s.ChipReservation("default", 64, 16)).fits(16):
            admitted.append(job.metadata.name)

    threads = [threading.Thread(target=reserve, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 4


def test_what_the_ledger_keeps_of_a_job_lives_in_its_record_and_goes_with_it():
    """No map of the ledger's own: forgetting a job (deleted, or no longer listed at a resync) forgets its
    admission and its counted chips, and the namespace's sum with them."""
    records = JobRecords()
    ledger = NamespaceChips(records)
    a, b = named("a", "a", tpu=V5E_4X4), named("b", "b", tpu=V5E_4X4)
    watched(ledger, body(a), body(b))
    admit(ledger, a, 32)
    admit(ledger, b, 32)
    assert records.uids() == {"a", "b"} and records.namespace_chips("default") == 32
    records.forget("a")
    records.retain({"a"})  # b: no longer listed
    assert records.uids() == set() and records.namespace_chips("default") == 0


def test_a_replica_standing_by_keeps_what_the_watch_showed_and_drops_its_own_admissions():
    """A standby forgets what it remembered (Reconciler.forget_all), but the watch sends a job again only
    when it changes: the chips the jobs' statuses show stay counted for the day it takes over."""
    records = JobRecords()
    ledger = NamespaceChips(records)
    a, b = named("a", "a", tpu=V5E_4X4), named("b", "b", tpu=V5E_4X4)
    watched(ledger, body(a, Phase.RUNNING, started=True), body(b))
    admit(ledger, b, 64)
    assert records.namespace_chips("default") == 32
    records.forget_all()
    assert records.namespace_chips("default") == 16
    assert admit(ledger, named("c", "c", tpu=V5E_4X4), 16).others == 16


def test_an_admission_reads_counts_not_the_namespace_s_jobs():
    """The gate's cost per pass does not grow with the namespace's jobs: each job's version is read once,
    when the watch shows it; an admission reads none (counted in reads of stored jobs, not time)."""
    for jobs in (10, 1000):
        ledger = NamespaceChips(JobRecords())
        pending = [named(f"j{i}", f"u{i}", tpu=V5E_4X4) for i in range(jobs)]
        watched(ledger, *(body(job) for job in pending))
        assert ledger.decodes == jobs  # once each, as the watch delivered them
        for job in pending[:20]:  # twenty passes of admission
            admit(ledger, job, 10_000)
        assert ledger.decodes == jobs  # and not once more
        watched(ledger, body(pending[0], Phase.PROVISIONING, started=True, version="2"))
        admit(ledger, pending[1], 10_000)
        assert ledger.decodes == jobs + 1  # one job changed: one read


def test_a_namespace_without_a_limit_costs_nothing():
    ledger = NamespaceChips(JobRecords(), limited=lambda namespace: namespace == "limited")
    watched(ledger, *(body(named(f"j{i}", f"u{i}", tpu=V5E_4X4)) for i in range(50)))
    assert ledger.decodes == 0


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda m: m["spec"].update(tpu={"type": "v9z", "topology": "1x1"}), id="unknown TPU"),
        pytest.param(lambda m: m["spec"].update(tpu="not an object"), id="tpu a string"),
        pytest.param(
            lambda m: m.update(status={"phase": ["a", "list"], "startTime": 7}), id="status garbage"
        ),
        pytest.param(lambda m: m.update(spec=None), id="no spec"),
        pytest.param(
            lambda m: m["spec"].update(tpu={"type": "v5e", "topology": "4x4", "slices": 10**400}),
            id="a huge number",
        ),
    ],
)
def test_a_stored_job_that_cannot_be_read_counts_nothing_with_a_warning_and_the_ledger_goes_on(spoil, caplog):
    ledger = NamespaceChips(JobRecords())
    good, bad = named("good", "good", tpu=V5E_4X4), named("bad", "bad", tpu=V5E_4X4)
    manifest = body(bad)
    spoil(manifest)
    watched(ledger, manifest, body(good, Phase.RUNNING, started=True))
    assert "TPUJob default/bad (resourceVersion 1) cannot be read" in caplog.text
    assert admit(ledger, named("new", "new", tpu=V5E_4X4), 32).others == 16


def test_any_error_reading_a_stored_job_is_a_warning_not_only_a_validation_error(monkeypatch, caplog):
    def broken(_job):
        raise KeyError("v5e")  # e.g. a catalog lookup the model let through

    monkeypatch.setattr(s, "chips_counted", broken)
    ledger = NamespaceChips(JobRecords())
    watched(ledger, body(named("bad", "bad", tpu=V5E_4X4)))
    assert "TPUJob default/bad (resourceVersion 1) cannot be read" in caplog.text
    assert admit(ledger, named("new", "new", tpu=V5E_4X4), 16).others == 0


def forged(job, phase=Phase.PROVISIONING):
    """The job as a writer of tpujobs/status leaves it: startTime set, so it looks admitted."""
    return job.model_copy(update={"status": status(phase)})


def test_a_status_that_claims_an_admission_the_operator_cannot_vouch_for_is_judged_again():
    job = forged(make_job(tpu=V5E_4X4))
    held = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", 16, 16, recheck=True))
    assert held.status.reason == Reason.CHIP_LIMIT and held.status.start_time is None
    assert held.create_pools == [] and held.create_pods == []
    # With room, it goes on as admitted (its startTime kept).
    goes = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", 32, 16, recheck=True))
    assert goes.create_pools == [0] and goes.status.start_time == job.status.start_time
    # Without the recheck (an admission the operator vouches for), the limit never holds it again.
    kept = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", 16, 16))
    assert kept.status.reason != Reason.CHIP_LIMIT


def test_the_gate_vouches_only_for_its_own_admissions_or_a_job_with_pods():
    ledger = NamespaceChips(JobRecords())
    other = named("other", "other", tpu=V5E_4X4)
    watched(ledger, body(other, Phase.RUNNING, started=True))  # the namespace is full

    def budget(job, pods=()):
        return s.chip_budget(job, list(pods), ledger.counts(job, 16))

    job = named("j", "j", tpu=V5E_4X4)
    held = budget(forged(job))
    assert held is not None and held.recheck and not held.fits(16)
    # A worker pod of the job (after a restart, the record is gone): it runs, nothing to judge again.
    assert budget(forged(job), [object()]) is None
    # An admission this process kept (a pass settled it with this startTime) is its own.
    mine = named("mine", "mine", tpu=V5E_4X4)
    ledger.settled("mine", status(Phase.PROVISIONING))
    assert budget(forged(mine)) is None
    # A startTime other than the one the pass left there is not.
    moved = mine.model_copy(
        update={
            "status": status(Phase.PROVISIONING).model_copy(update={"start_time": "2026-11-21T12:00:00Z"})
        }
    )
    assert budget(moved).recheck
    # Ended or suspended jobs hold no admission to judge.
    assert budget(forged(job, Phase.SUCCEEDED)) is None


def test_the_gate_admits_with_a_reservation_and_acting_reserves_first():
    """The pure gate names the chips it admits the job with (Decision.chips); the pass's acts reserve them
    before anything else is done (reconciler/act.py)."""
    job = make_job(tpu=V5E_4X4)
    decision = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", limit=32, others=16))
    assert decision.chips == s.ChipReservation("default", 32, 16)
    held = step(job, pools=missing_pools(job), chips=s.ChipBudget("default", limit=32, others=24))
    assert held.chips is None
    admitted = advance(job, step(job, pools=missing_pools(job)))
    assert step(admitted, pools=missing_pools(job), chips=s.ChipBudget("default", 16, 0)).chips is None
