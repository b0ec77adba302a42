"""Bad input is rejected with the field and what is allowed; good input parses with defaults."""

import contextlib

import pytest

from tests.manifests import MALFORMED, base_job
from tpujob.api import InvalidTPUJob, parse_tpujob
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
