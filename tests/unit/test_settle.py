"""The pure parts of a pass around decide(): what a pool needs before it is asked for (placement), a spec the
operator cannot run (decide_invalid), and what carrying a decision out met, folded in (settle)."""

import datetime as dt

import pytest

from tests.manifests import base_job
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import NodePoolStatus, Phase, Reason, TPUJobStatus
from tpujob.render import naming
from tpujob.status import placement

NOW = dt.datetime(2026, 11, 24, 12, 0, 0, tzinfo=dt.UTC)
QUOTA = s.GKEError(Reason.QUOTA, "Insufficient regional quota to satisfy request", permanent=True)


def job(**spec):
    manifest = base_job("train", **spec)
    manifest["metadata"].update(uid="u1", generation=3)
    return parse_tpujob(manifest)


def flex_job():
    return job(tpu={"type": "v5p", "topology": "2x2x2"}, capacity={"mode": "flexStart"})


def policy(topology=None, error=None):
    return s.PolicyFact("ironwood-2x2x2", "proj", "us-central1", topology=topology, error=error)


# --- placement ---------------------------------------------------------------------------------------

FLEX_VERSIONS = [
    ("", None),  # not known yet: GKE will say
    ("1.33.0-gke.1712000", None),
    ("1.33.5-gke.1201000", None),
    ("1.34.0-gke.1000", None),
    ("1.33.0-gke.1711999", "need GKE 1.33.0-gke.1712000 or later and the cluster runs 1.33.0-gke.1711999"),
    ("1.32.9-gke.9999999", "need GKE 1.33.0-gke.1712000 or later and the cluster runs 1.32.9-gke.9999999"),
]


@pytest.mark.parametrize(("version", "words"), FLEX_VERSIONS)
def test_flex_start_needs_a_recent_enough_cluster(version, words):
    problem = placement.placement_problem(flex_job(), version, None)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem.message
        assert problem.reason == Reason.POOL_REJECTED and problem.permanent


def test_the_cluster_version_concerns_only_flex_start_and_tpu7x():
    assert placement.placement_problem(job(), "1.20.0-gke.1", None) is None


def tpu7x_job(**spec):
    return job(
        tpu={"type": "tpu7x", "topology": "1x1x1"}, trainer={"image": "example.com/team/jax-train:1"}, **spec
    )


# "Ironwood (TPU7x) is available in GKE Standard clusters that run version 1.34.0-gke.2201000 and later".
TPU7X_VERSIONS = [
    ("", None),  # not known yet: GKE will say
    ("1.34.0-gke.2201000", None),
    ("1.34.1-gke.1000", None),
    ("1.35.0-gke.1", None),
    ("1.34.0-gke.2200999", "need GKE 1.34.0-gke.2201000 or later and the cluster runs 1.34.0-gke.2200999"),
    ("1.33.5-gke.1201000", "need GKE 1.34.0-gke.2201000 or later and the cluster runs 1.33.5-gke.1201000"),
]


@pytest.mark.parametrize(("version", "words"), TPU7X_VERSIONS)
@pytest.mark.parametrize("capacity", [{}, {"mode": "flexStart"}, {"mode": "spot"}])
def test_tpu7x_needs_gke_1_34_0_gke_2201000_in_every_capacity_mode(version, words, capacity):
    problem = placement.placement_problem(tpu7x_job(capacity=capacity), version, None)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem.message
        assert "upgrade the cluster" in problem.message
        assert problem.reason == Reason.POOL_REJECTED and problem.permanent


def test_a_tpu7x_job_on_a_1_33_cluster_withholds_its_creates_naming_the_version():
    decision = s.decide(s.Observed(job=tpu7x_job(), now=NOW, pools=(), cluster_version="1.33.5-gke.1201000"))
    assert decision.create_pools == [] and list(decision.refused) == [0]
    assert decision.status.reason == Reason.POOL_REJECTED
    assert "1.34.0-gke.2201000" in (decision.status.message or "")


POLICIES = [
    (policy(topology="2x2x2"), None),
    (policy(), "not found in projects/proj/regions/us-central1; create it"),
    (policy(topology="2x2x4"), "places 2x2x4 slices, but spec.tpu.topology is 2x2x2"),
    (policy(error=QUOTA), "Insufficient regional quota"),  # the Compute API's own refusal, as classified
]


@pytest.mark.parametrize(("fact", "words"), POLICIES)
def test_a_workload_policy_must_exist_and_place_the_jobs_topology(fact, words):
    tpu7x = job(
        tpu={"type": "tpu7x", "topology": "2x2x2"},
        nodePool={"workloadPolicy": "ironwood-2x2x2"},
        trainer={"image": "example.com/team/jax-train:1"},
    )
    problem = placement.placement_problem(tpu7x, "1.34.0-gke.2201000", fact)
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem.message
        assert problem.permanent


def test_a_placement_problem_withholds_every_create_as_a_refusal_with_the_reason_in_the_status():
    decision = s.decide(s.Observed(job=flex_job(), now=NOW, pools=(), cluster_version="1.32.0-gke.1"))
    assert decision.create_pools == []
    assert list(decision.refused) == [0]
    assert decision.status.reason == Reason.POOL_REJECTED
    assert "1.33.0-gke.1712000" in (decision.status.message or "")
    assert [p.state for p in decision.status.node_pools] == [s.POOL_MISSING]


def test_without_a_placement_problem_nothing_is_refused():
    decision = s.decide(s.Observed(job=flex_job(), now=NOW, pools=(), cluster_version="1.33.5-gke.1"))
    assert decision.create_pools == [0] and decision.refused == {}


# --- a spec the operator cannot run --------------------------------------------------------------------


def invalid(status, pods=(), problems="spec.tpu.topology: '3x3' is not a v5e topology"):
    return s.decide_invalid(s.InvalidObserved(status, problems, generation=4, now=NOW, pods=pods))


def test_an_invalid_spec_fails_once_with_one_event_and_releases_live_pods_and_pools():
    held = TPUJobStatus(
        phase=Phase.RUNNING,
        node_pools=[
            NodePoolStatus(name="a", slice=0, state="RUNNING"),
            NodePoolStatus(name="b", slice=1, state=s.POOL_STOPPING),
            NodePoolStatus(name="c", slice=2, state=s.POOL_DELETED),
        ],
    )
    pods = (
        s.PodView("w0", 0, 0, 0, "Running"),
        s.PodView("w1", 0, 1, 0, "Running", deleting=True),
    )
    first = invalid(held, pods)
    assert (first.status.phase, first.status.reason) == (Phase.FAILED, Reason.INVALID_SPEC)
    assert first.status.observed_generation == 4
    assert first.delete_pods == ["w0"] and first.delete_pools == ["a"]
    assert [(e.type, e.reason) for e in first.events] == [("Warning", Reason.INVALID_SPEC)]
    assert first.create_pools == [] and not first.creates
    failed = next(c for c in first.status.conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", Reason.INVALID_SPEC)

    again = invalid(first.status)
    assert again.events == []  # the same problems: no second event
    assert invalid(first.status, problems="spec.tpu.slices: too many").events[0].reason == Reason.INVALID_SPEC


# --- settle ------------------------------------------------------------------------------------------------


def provisioning_pass(spec=None, **observed):
    the_job = job(**(spec or {}))
    seen = s.Observed(job=the_job, now=NOW, pools=(), **observed)
    return seen, s.decide(seen)


def test_accepted_creates_record_their_operation_and_are_looked_at_again_soon():
    observed, decision = provisioning_pass({"tpu": {"type": "v6e", "topology": "4x4", "slices": 2}})
    applied = s.Applied(operations={0: "op-0", 1: "op-1"})
    settled = s.settle(observed, decision, applied)
    assert [(p.state, p.operation) for p in settled.status.node_pools] == [
        ("PROVISIONING", "op-0"),
        ("PROVISIONING", "op-1"),
    ]
    assert settled.requeue_after == s.FIRST_POLL_SECONDS


def test_a_refused_create_shows_gkes_reason_and_waits_for_the_backoff():
    observed, decision = provisioning_pass()
    settled = s.settle(observed, decision, s.Applied(refused={0: QUOTA}, retry_refused_after=30.0))
    assert (settled.status.phase, settled.status.reason) == (Phase.PROVISIONING, Reason.QUOTA)
    # Which quota to raise and where, then GKE's own words; no zone move can help.
    assert settled.status.message.startswith("raise ") and settled.status.message.endswith(QUOTA.message)
    assert "TPU quota is regional" in settled.status.message
    assert [(p.state, p.message) for p in settled.status.node_pools] == [(s.POOL_MISSING, QUOTA.message)]
    assert settled.requeue_after == observed.poll_provisioning_seconds  # the poll comes first; ...
    assert settled.create_pools == []  # ... and nothing is asked for again in it (memory's backoff)
    assert [e.reason for e in settled.events] == [Reason.QUOTA]  # one phase event, for where it ends


def test_one_refused_slice_of_two_keeps_the_others_operation():
    observed, decision = provisioning_pass({"tpu": {"type": "v6e", "topology": "4x4", "slices": 2}})
    settled = s.settle(observed, decision, s.Applied(operations={1: "op-1"}, refused={0: QUOTA}))
    assert [(p.slice, p.state, p.operation) for p in settled.status.node_pools] == [
        (0, s.POOL_MISSING, None),
        (1, "PROVISIONING", "op-1"),
    ]
    assert settled.status.reason == Reason.QUOTA


def test_deletes_gke_accepted_are_stopping_and_a_refused_one_is_asked_again_at_the_poll():
    the_job = job()
    name = naming.node_pool_name(the_job, 0)
    status = TPUJobStatus(
        phase=Phase.SUCCEEDED, node_pools=[NodePoolStatus(name=name, slice=0, state="RUNNING")]
    )
    observed = s.Observed(job=the_job.model_copy(update={"status": status}), now=NOW)
    decision = s.decide(observed)
    assert decision.delete_pools == [name]
    stopping = s.settle(observed, decision, s.Applied(stopping={name}))
    assert stopping.status.node_pools[0].state == s.POOL_STOPPING
    refused = s.settle(observed, s.decide(observed), s.Applied(delete_refused=True))
    assert refused.status.node_pools[0].state == "RUNNING"
    assert refused.requeue_after == observed.poll_provisioning_seconds


def test_refused_pods_show_the_api_servers_words_and_are_asked_again_later():
    the_job = job(nodePool={"policy": "existing"})
    observed = s.Observed(job=the_job, now=NOW)
    decision = s.decide(observed)
    assert decision.create_pods
    words = 'pods "train-0-0" is forbidden: no PriorityClass with name urgent was found'
    settled = s.settle(observed, decision, s.Applied(pods_refused=words, retry_pods_after=60.0))
    assert settled.status.reason == Reason.POD_REJECTED
    assert words in (settled.status.message or "")
    assert settled.status.workers.pending == 0  # refused pods do not exist
    assert settled.requeue_after == 60.0


def test_refused_pods_are_not_created_again_while_their_backoff_lasts():
    the_job = job(nodePool={"policy": "existing"})
    words = "admission webhook denied the request"
    waiting = s.decide(s.Observed(job=the_job, now=NOW, pods_refused=words, pods_refused_wait=12.0))
    assert waiting.create_pods == []
    assert waiting.requeue_after == 12.0
    again = s.decide(s.Observed(job=the_job, now=NOW, pods_refused=words, pods_refused_wait=0.0))
    assert again.create_pods == [(0, 0)]


def test_nothing_met_leaves_the_decision_as_it_was():
    observed, decision = provisioning_pass()
    before = decision.status.to_wire()
    settled = s.settle(observed, decision, s.Applied())
    assert settled is decision and settled.status.to_wire() == before


@pytest.mark.parametrize(
    ("code", "backed_off"),
    [("GCE_QUOTA_EXCEEDED", True), ("GCE_STOCKOUT", False)],
)
def test_a_create_gke_ended_on_quota_is_given_back_and_asked_again_on_the_backoff(code, backed_off):
    """GKE ends a create on a quota shortfall at once (a stockout only after retrying): the pool goes, and
    a new create waits for the refusals' backoff (someone must raise the quota); after a stockout, not."""
    the_job = job()
    name = naming.node_pool_name(the_job, 0)
    ended = s.PoolView(0, name, "ERROR", "GKE's words", code, retrying=False)
    decision = s.decide(s.Observed(job=the_job, now=NOW, pools=(ended,)))
    assert decision.delete_pools == [name]
    if backed_off:
        assert decision.refused == {0: s.GKEError(Reason.QUOTA, "GKE's words", permanent=True)}
    else:
        assert decision.refused == {}
