"""Bad input is rejected with the field and what is allowed; good input parses with defaults."""

import contextlib

import pytest

from tests.manifests import MALFORMED, base_job
from tpujob.api import InvalidTPUJob, parse_tpujob
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
    assert pool.oauth_scopes == ["https://www.googleapis.com/auth/cloud-platform"]


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
