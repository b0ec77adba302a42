"""A namespace's chip limit (tenancy policy maxChips): the pure gate (status/tenancy.py) holds a job the
limit has no room for before any pool is asked for; what counts against it; and the ledger
(reconciler/tenancy.py) that admits one job at a time per namespace, so passes side by side never admit two
jobs past the limit."""

from __future__ import annotations

import threading

from tests.unit.test_status import advance, make_job, step
from tpujob import status as s
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.records import JobRecords
from tpujob.render import naming

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


def test_the_ledger_admits_while_there_is_room_and_counts_its_admissions_before_their_status_shows_them():
    ledger = NamespaceChips(JobRecords())
    a, b, c = (named(n, n, tpu=V5E_4X4) for n in "abc")
    watched = [body(a), body(b), body(c)]  # none admitted, as the watch has them
    ledger.jobs_of = lambda namespace: watched if namespace == "default" else []
    assert ledger.admit(a, 32).fits(16)  # 0 held: a admitted
    assert ledger.admit(b, 32).others == 16  # a counted though its status does not show it yet
    budget = ledger.admit(c, 32)
    assert budget.others == 32 and not budget.fits(16)  # c waits
    # a ends: its status shows it, and the ledger lets its own admission go.
    # a's status shows it admitted (a new resourceVersion): the ledger lets its own record go.
    watched[0] = body(a, Phase.RUNNING, started=True, version="2")
    assert ledger.admit(c, 32).others == 32
    # a ends: its status says so, and its chips are free.
    watched[0] = body(a, Phase.SUCCEEDED, started=True, version="3")
    ledger.settled("a", status(Phase.SUCCEEDED))
    assert ledger.admit(c, 32).fits(16)


def test_a_job_another_replica_admitted_counts_once_its_status_shows_it():
    """The ledger reads each job again when its resourceVersion changes (and only then)."""
    records = JobRecords()
    ledger = NamespaceChips(records)
    c_job, d = named("c", "c", tpu=V5E_4X4), named("d", "d", tpu=V5E_4X4)
    watched = [body(c_job), body(d)]
    ledger.jobs_of = lambda _namespace: watched
    assert ledger.admit(c_job, 16).others == 0
    records.forget("c")  # as when c is deleted: its admission goes with its record
    watched[1] = body(d, Phase.RUNNING, started=True, version="2")
    assert ledger.admit(c_job, 16).others == 16


def test_a_deleted_or_suspended_job_frees_its_chips_and_other_namespaces_count_nothing():
    ledger = NamespaceChips(JobRecords())
    a, b = named("a", "a", tpu=V5E_4X4), named("b", "b", tpu=V5E_4X4)
    watched = {
        "default": [body(a), body(b)],
        "team-b": [body(named("x", "x", tpu=V5E_4X4), Phase.RUNNING, True)],
    }
    ledger.jobs_of = lambda namespace: watched[namespace]
    ledger.admit(a, 16)
    assert not ledger.admit(b, 16).fits(16)
    watched["default"] = [body(b)]  # a deleted
    assert ledger.admit(b, 16).fits(16)
    ledger.settled("b", status(Phase.SUSPENDED, started=False))
    assert ledger.admit(a, 16).others == 0


def test_passes_side_by_side_never_admit_past_the_limit():
    """Twenty jobs of 16 chips each, admitted from twenty threads at once, under a limit of 64: four."""
    ledger = NamespaceChips(JobRecords())
    jobs = [named(f"j{i}", f"u{i}", tpu=V5E_4X4) for i in range(20)]
    ledger.jobs_of = lambda _namespace: [body(job) for job in jobs]
    start = threading.Barrier(len(jobs))
    admitted: list[str] = []

    def admit(job):
        start.wait()
        if ledger.admit(job, 64).fits(16):
            admitted.append(job.metadata.name)

    threads = [threading.Thread(target=admit, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 4


def test_what_the_ledger_keeps_of_a_job_lives_in_its_record_and_goes_with_it():
    """No map of the ledger's own: forgetting a job (deleted, or no longer listed at a resync) forgets its
    admission and its counted chips."""
    records = JobRecords()
    ledger = NamespaceChips(records)
    a, b = named("a", "a", tpu=V5E_4X4), named("b", "b", tpu=V5E_4X4)
    ledger.jobs_of = lambda _namespace: [body(a), body(b)]
    ledger.admit(a, 32)
    ledger.admit(b, 32)
    assert records.uids() == {"a", "b"}
    records.forget("a")
    records.retain({"a"})  # b: no longer listed
    assert records.uids() == set()
