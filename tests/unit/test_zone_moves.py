"""When a job may leave its zone (status.capacity.fall_back_if_due): a stockout past zoneFallbackSeconds
moves; a quota shortfall never moves within its region (TPU quota is regional) and says which quota to raise
where; a queued flex-start request keeps its place unless the operator allows the move. Table tests."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from tests.unit.test_status import NOW, advance, make_job, pods, ready_pools, step
from tpujob import status as s
from tpujob.api.status import Phase, Reason
from tpujob.render import naming
from tpujob.status.pool_conditions import quota_advice, region_of_zone

ZONES = ("us-east5-a", "us-east5-b")
# The asynchronous shortfall as GKE relays it (the simulated GKE's errors.quota_message has this shape).
ASYNC_QUOTA = (
    "Insufficient quota to satisfy the request: Not all instances running in IGM after 1.20s. Expected 4, "
    "running 0, transitioning 4. Current errors: [GCE_QUOTA_EXCEEDED]: Instance 'gke-x' creation failed: "
    "Quota 'TPUS_V6E_SLICE' exceeded.  Limit: 4.0 in region us-east5."
)
SYNC_QUOTA = (
    'Insufficient regional quota to satisfy request: resource "TPU_LITE_PODSLICE_V5": request requires '
    "'16.0' and is short '12.0'."
)


@pytest.mark.parametrize(
    ("message", "zone", "names"),
    [
        (ASYNC_QUOTA, "us-east5-a", "raise quota TPUS_V6E_SLICE in region us-east5 "),
        (SYNC_QUOTA, "us-central1-a", "raise quota TPU_LITE_PODSLICE_V5 in region us-central1 "),
        ("quota exhausted", "us-central1-ai1a", "raise the TPU quota GKE names below in region us-central1 "),
        ("quota exhausted", "", "raise the TPU quota GKE names below (Google"),
    ],
)
def test_a_quota_message_names_the_quota_and_region_to_raise_then_gkes_words(message, zone, names):
    advice = quota_advice(message, zone)
    assert advice.startswith(names) and advice.endswith(f"GKE: {message}")
    assert quota_advice(advice, zone) == advice  # said once


@pytest.mark.parametrize(
    ("zone", "region"),
    [("us-east5-a", "us-east5"), ("us-central1-ai1a", "us-central1"), ("europe-west4-b", "europe-west4")],
)
def test_the_region_of_a_zone(zone, region):
    assert region_of_zone(zone) == region


def v6e_job(zones=ZONES, **capacity):
    return make_job(
        tpu={"type": "v6e", "topology": "4x4"},
        capacity={"zones": list(zones), "zoneFallbackSeconds": 600, **capacity},
    )


@pytest.mark.parametrize("retrying", [True, False], ids=["GKE retrying", "create ended"])
def test_quota_past_the_fallback_time_stays_in_its_zone_and_says_which_quota_to_raise(retrying):
    job = v6e_job()
    first = step(job, pools=(), zones=ZONES)
    name = naming.node_pool_name(job, 0)
    short = s.PoolView(0, name, "ERROR", ASYNC_QUOTA, "GCE_QUOTA_EXCEEDED", retrying=retrying, zone=ZONES[0])
    later = step(advance(job, first), pools=(short,), zones=ZONES, now=NOW + dt.timedelta(hours=2))
    assert later.status.zone == ZONES[0]
    assert (later.status.phase, later.status.reason) == (Phase.PROVISIONING, Reason.QUOTA)
    assert later.status.message.startswith("raise quota TPUS_V6E_SLICE in region us-east5 ")
    assert not any(e.reason == Reason.ZONE_FALLBACK for e in later.events)
    (event,) = [e for e in later.events if e.reason == Reason.QUOTA]
    assert event.type == "Warning" and "TPUS_V6E_SLICE in region us-east5" in event.message
    # Given back to be asked again in the same zone on the refusals' backoff (when GKE gave up), never moved.
    assert later.delete_pools == ([] if retrying else [name])
    assert later.create_pools == []


def test_quota_may_move_to_a_zone_of_another_region_where_the_quota_differs():
    zones = ("us-east5-a", "us-central1-b")
    job = v6e_job(zones)
    first = step(job, pools=(), zones=zones)
    name = naming.node_pool_name(job, 0)
    short = s.PoolView(0, name, "ERROR", ASYNC_QUOTA, "GCE_QUOTA_EXCEEDED", retrying=True, zone=zones[0])
    moved = step(advance(job, first), pools=(short,), zones=zones, now=NOW + dt.timedelta(seconds=600))
    assert moved.status.zone == "us-central1-b" and moved.delete_pools == [name]


def queued(job, attempt=0):
    return pods(job, attempt, "Pending", unschedulable="0/3 nodes are available", unschedulable_since="x")


@pytest.mark.parametrize("allowed", [False, True])
def test_a_queued_flex_start_request_keeps_its_place_past_the_fallback_time_unless_the_operator_allows(
    allowed,
):
    job = v6e_job(mode="flexStart")
    first = step(job, pools=(), zones=ZONES, flex_start_zone_fallback=allowed)
    pools = tuple(dataclasses.replace(p, zone=ZONES[0]) for p in ready_pools(job))
    waiting = step(advance(job, first), pools=pools, pods=queued(job), service_exists=True, zones=ZONES,
                   flex_start_zone_fallback=allowed)  # fmt: skip
    assert waiting.status.reason == Reason.WAITING_FOR_CAPACITY
    later = step(advance(job, waiting), pools=pools, pods=queued(job), service_exists=True, zones=ZONES,
                 flex_start_zone_fallback=allowed, now=NOW + dt.timedelta(hours=3))  # fmt: skip
    if allowed:
        assert later.status.zone == ZONES[1] and later.status.reason == Reason.ZONE_FALLBACK
        assert later.delete_pools == [naming.node_pool_name(job, 0)]
    else:
        assert later.status.zone == ZONES[0] and later.status.reason == Reason.WAITING_FOR_CAPACITY
        assert later.delete_pools == [] and later.delete_pods == []
        assert "its place in the queue" in later.status.message
        assert "TPUJOB_GKE_FLEX_START_ZONE_FALLBACK" in later.status.message


def test_a_pool_in_a_zone_the_catalog_does_not_list_is_asked_for_with_a_warning_and_a_refusal_says_so():
    job = make_job(tpu={"type": "v5e", "topology": "2x2"}, nodePool={"zone": "us-central1-f"})
    first = step(job, pools=(), zones=("us-central1-f",))
    assert first.create_pools == [0]
    (warning,) = [e for e in first.events if e.reason == "ZoneNotListed"]
    assert warning.type == "Warning" and "us-central1-f for v5e" in warning.message
    refusal = s.GKEError(
        Reason.POOL_REJECTED, 'Invalid machine type "x" in zone "us-central1-f"', permanent=True
    )
    refused = step(job, pools=(), zones=("us-central1-f",), gke_errors={0: refusal})
    assert refused.status.reason == Reason.POOL_REJECTED
    assert refused.status.message.startswith(refusal.message) and "does not list it" in refused.status.message
    listed = make_job(tpu={"type": "v5e", "topology": "2x2"}, nodePool={"zone": "us-central1-a"})
    assert not [
        e for e in step(listed, pools=(), zones=("us-central1-a",)).events if e.reason == "ZoneNotListed"
    ]
