"""Bad input is rejected with the field and what is allowed; good input parses with defaults."""

import contextlib

import pytest

from tests.manifests import MALFORMED, base_job
from tpujob import tpu
from tpujob.api import OPERATOR_ZONE_SETTING, DefaultZones, InvalidTPUJob, parse_tpujob
from tpujob.api.status import TPUJobStatus
from tpujob.render import Cluster, render_plan


def test_the_table_is_large_enough():
    assert len(MALFORMED) >= 25


@pytest.mark.parametrize(
    ("manifest", "path", "fragment"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_manifest_names_the_field_and_what_is_allowed(manifest, path, fragment):
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(manifest)
    problems = caught.value.problems
    assert any(p.path == path and fragment in p.message for p in problems), [str(p) for p in problems]


@pytest.mark.parametrize(("manifest",), [(m[1],) for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_nothing_is_rendered_from_a_malformed_manifest(manifest):
    rendered = []
    with contextlib.suppress(InvalidTPUJob):
        rendered.append(render_plan(parse_tpujob(manifest), Cluster()))
    assert rendered == []


def test_valid_manifest_gets_the_documented_defaults():
    job = parse_tpujob(base_job())
    assert job.spec.tpu.slices == 1
    assert job.spec.capacity.mode == "onDemand"
    assert job.spec.node_pool.policy == "create"
    assert job.spec.run_policy.max_restarts == 3
    assert job.spec.run_policy.suspend is False
    assert job.spec.run_policy.provisioning_timeout_seconds is None  # wait for capacity as long as it takes
    pool = job.spec.node_pool
    assert (pool.max_pods_per_node, pool.gvnic) == (16, True)
    assert pool.oauth_scopes is None  # the operator's setting (Cluster.node_oauth_scopes), never a job's


def test_a_shared_reservation_and_a_provisioning_timeout_are_accepted():
    manifest = base_job(
        capacity={"mode": "reservation", "reservation": "projects/other-project/reservations/res-1"},
        runPolicy={"provisioningTimeoutSeconds": 3600},
    )
    job = parse_tpujob(manifest)
    assert job.spec.capacity.reservation == "projects/other-project/reservations/res-1"
    assert job.spec.run_policy.provisioning_timeout_seconds == 3600


@pytest.mark.parametrize(
    "tpu", [{"type": "tpu7x", "topology": "2x2x2"}, {"type": "tpu7x", "topology": "1x1x1"}]
)
def test_tpu7x_flex_start_is_accepted_as_xpk_offers_it(tpu):
    # xpk ships Ironwood flex-start recipes (docs/usage/tpu7x/recipes/flex_*_recipe.md); v4 stays refused
    # (tests/manifests.py "flex-start-on-v4").
    manifest = base_job(
        tpu=tpu,
        capacity={"mode": "flexStart"},
        nodePool={"workloadPolicy": "ironwood-2x2x2"} if tpu["topology"] == "2x2x2" else {},
        trainer={"image": "example.com/team/jax-train:1"},
    )
    assert parse_tpujob(manifest).spec.capacity.mode == "flexStart"


def test_status_fields_for_provisioning_round_trip_through_the_wire():
    status = {
        "phase": "Provisioning",
        "provisioningSince": "2026-01-01T00:00:00Z",
        "nodePools": [
            {
                "name": "p0",
                "slice": 0,
                "state": "PROVISIONING",
                "operation": "operation-123",
                "zone": "us-central1-a",
            }
        ],
    }
    wire = TPUJobStatus.model_validate(status).to_wire()
    assert wire["provisioningSince"] == "2026-01-01T00:00:00Z"
    assert wire["nodePools"][0]["operation"] == "operation-123"
    assert wire["nodePools"][0]["zone"] == "us-central1-a"
    assert TPUJobStatus.model_validate(wire).to_wire() == wire


def test_status_in_the_manifest_is_ignored_not_trusted():
    manifest = base_job()
    manifest["status"] = {"phase": "Succeeded", "bogus": 1}
    assert parse_tpujob(manifest).status is None


def test_every_problem_is_reported_at_once():
    manifest = base_job()
    manifest["spec"]["tpu"]["type"] = "v3"
    manifest["spec"]["trainer"]["image"] = ""
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(manifest)
    assert {p.path for p in caught.value.problems} == {"spec.tpu.type", "spec.trainer.image"}


# The operator's own zone (TPUJOB_GKE_ZONE, chart value gke.zone) against a job that names no zone.
OPERATOR_ZONE = DefaultZones(("us-central2-b",), OPERATOR_ZONE_SETTING)  # offers only v4


def test_a_job_whose_tpu_the_operators_zone_lacks_is_refused_naming_the_chart_value_and_the_fix():
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(base_job(tpu={"type": "v5e", "topology": "2x2"}), OPERATOR_ZONE)
    [problem] = caught.value.problems
    assert problem.path == "spec.nodePool.zone"
    assert "us-central2-b, the operator's zone (chart value gke.zone, env TPUJOB_GKE_ZONE)" in problem.message
    assert "which does not offer v5e TPUs" in problem.message
    assert "set spec.nodePool.zone or spec.capacity.zones" in problem.message
    assert f"zones that offer v5e: {', '.join(tpu.ZONES['v5e'])}" in problem.message


@pytest.mark.parametrize(
    ("zones", "spec"),
    [
        (("us-central2-b",), {"tpu": {"type": "v4", "topology": "2x2x1"}}),  # the zone offers it
        (("us-central2-b", "us-central1-a"), {}),  # one of the operator's zones offers v5e
        (("us-central2-b",), {"nodePool": {"zone": "us-central1-a"}}),  # the job names its zone
        (("us-central2-b",), {"capacity": {"zones": ["us-central1-a", "europe-west4-b"]}}),
        (("us-central2-b",), {"nodePool": {"policy": "existing"}}),  # no pools made
        (("us-central1",), {}),  # a region: the cluster check names the setting, for every job alike
        ((), {}),  # no zone configured (existing-pool operators)
        (("asia-southeast1-b",), {}),  # v5e in Asia
        (("us-central1-ai1a",), {"tpu": {"type": "v6e", "topology": "2x2"}}),  # an AI zone
    ],
)
def test_a_job_the_operators_zones_can_hold_or_that_names_its_own_passes(zones, spec):
    parse_tpujob(base_job(**spec), DefaultZones(zones, OPERATOR_ZONE_SETTING))


def test_the_problem_says_none_of_several_operator_zones_offers_the_tpu():
    zones = DefaultZones(("us-central1-a", "us-central2-b"), OPERATOR_ZONE_SETTING)
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(base_job(tpu={"type": "v6e", "topology": "2x2"}), zones)
    assert "us-central1-a, us-central2-b, the operator's zone" in str(caught.value)
    assert "none of which offers v6e TPUs" in str(caught.value)


def test_operator_zones_the_catalog_does_not_know_for_sure_are_left_to_gke():
    """A zone the catalog does not list (or lists from an unverified row) may offer the TPU: GKE decides."""
    for unknown in ("us-central1-f", "europe-west4-b"):
        zones = DefaultZones(("us-central1-a", unknown), OPERATOR_ZONE_SETTING)
        assert parse_tpujob(base_job(tpu={"type": "v6e", "topology": "2x2"}), zones)
    assert parse_tpujob(base_job(tpu={"type": "v6e", "topology": "2x2"}, nodePool={"zone": "us-central1-f"}))


@pytest.mark.parametrize(
    "zone", ["asia-northeast1-b", "europe-west4-a", "us-central1-ai1a", "us-south1-ai1b"]
)
def test_real_v6e_zones_pass_the_pattern_and_the_catalog(zone):
    parse_tpujob(base_job(tpu={"type": "v6e", "topology": "2x2"}, nodePool={"zone": zone}))
    parse_tpujob(base_job(tpu={"type": "v6e", "topology": "2x2"}, capacity={"zones": [zone]}))


@pytest.mark.parametrize(("tpu_type", "topology"), [("v5e", "2x2"), ("v5p", "2x2x1")])
def test_v5e_and_v5p_in_europe_west4_b_pass(tpu_type, topology):
    parse_tpujob(base_job(tpu={"type": tpu_type, "topology": topology}, nodePool={"zone": "europe-west4-b"}))


@pytest.mark.parametrize("zone", ["us-central1-ai", "us-central1-aia", "us-central1-ai1", "us-central1"])
def test_a_malformed_zone_fails_the_pattern(zone):
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(base_job(nodePool={"zone": zone}))
    assert caught.value.problems[0].path == "spec.nodePool.zone"
    assert "does not match" in caught.value.problems[0].message


def test_the_pools_of_a_job_go_to_the_operators_zones_that_offer_its_tpu():
    job = parse_tpujob(base_job())  # v5e
    cluster = Cluster(zone="us-central1-b,us-central1-a,europe-west4-b")
    assert render_plan(job, cluster).node_pools[0]["locations"] == ["us-central1-a"]
    assert [p["locations"] for p in render_plan(job, Cluster(zone="us-central1")).node_pools] == [
        ["us-central1"]
    ]
