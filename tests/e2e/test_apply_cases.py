"""Every case of tests/apply_cases.py and every example, applied to the test bed's Kubernetes 1.36 CRD server:
the server's verdict, field path and words are the table's, which are the operator's (test_apply_cases.py).

Each case goes twice: through the API (a server-side dry run, whose 422 lists the causes with their field
paths) and through `kubectl apply --dry-run=server`, as a user applies it, whose error names the same path.
Also here: an unknown field is refused under kubectl's strict field validation and warned otherwise, and a
job stored before a rule existed still has its other fields updated (ratcheting)."""

from __future__ import annotations

import copy
import json
import re

import pytest
import yaml
from kubernetes import client as k8s

from tests.apply_cases import CASES, REFUSED, Case
from tests.e2e.kubectl_cli import Kubectl
from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob.api.crd import crd
from tpujob.api.messages import SHAPE_FIXED
from tpujob_sandbox import wait_for
from tpujob_sandbox.operators import install_crd


@pytest.fixture(autouse=True)
def _needs_cel(sandbox):
    if not sandbox.control_plane.serves_crds:
        pytest.skip("this API server serves the CRD without CEL (kube-apiserver 1.20 in process)")


def named(case: Case) -> dict:
    """The case's manifest in the test's namespace, named after the case (unless its name is the fault)."""
    body = copy.deepcopy(case.manifest)
    body.setdefault("metadata", {}).pop("namespace", None)  # each test applies into its own
    if not (case.refused_at or "").startswith("metadata."):
        body["metadata"]["name"] = re.sub(r"[^a-z0-9-]", "-", case.name.lower())[:48].strip("-")
    return body


def in_namespace(manifest: dict, namespace: str) -> dict:
    manifest["metadata"]["namespace"] = namespace
    return manifest


def refusals(causes: list[dict]) -> list[dict]:
    """The causes that name a field (a schema refusal adds one with no field: "some validation rules were not
    checked because the object was invalid")."""
    return [cause for cause in causes if cause.get("field") not in (None, "", "<nil>")]


def server_causes(custom: k8s.CustomObjectsApi, namespace: str, body: dict) -> list[dict] | None:
    """None when the server accepts `body` (dry run); else the causes of its refusal."""
    try:
        custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, body, dry_run="All", field_validation="Strict"
        )
    except k8s.ApiException as error:
        assert error.status == 422, error.body
        return json.loads(error.body)["details"]["causes"]
    return None


def verdict_problems(case: Case, causes: list[dict] | None) -> list[str]:
    """What differs between the server's answer and the table's: nothing when they agree."""
    if case.refused_at is None:
        return [] if causes is None else [f"{case.name}: refused ({causes}); the table accepts it"]
    if causes is None:
        return [f"{case.name}: accepted; the table says {case.refused_at}"]
    named = refusals(causes)
    problems = []
    if {cause["field"] for cause in named} != {case.refused_at}:
        problems.append(f"{case.name}: refused at {[c['field'] for c in named]}, not {case.refused_at}")
    if not any(case.message_part in cause["message"] for cause in named):
        problems.append(f"{case.name}: no message has {case.message_part!r}: {named}")
    return problems


def test_the_api_server_gives_every_cases_verdict(operator, custom, namespace):
    """Every case through the API (one namespace, one dry run each), every disagreement listed at once."""
    problems = [
        problem
        for case in CASES
        for problem in verdict_problems(case, server_causes(custom, namespace, named(case)))
    ]
    assert not problems, "\n".join(problems)


def test_kubectl_apply_shows_every_verdict_with_its_field(kubectl: Kubectl, namespace, tmp_path):
    """All cases in one multi-document apply, as a user would: accepted ones are created (dry run), each
    refused one is named with its field path."""
    documents = [named(case) for case in CASES]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    result = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
    accepted = set(re.findall(r"tpujob\.tpujob\.dev/(\S+) created \(server dry run\)", result.stdout))
    refused_names = {
        doc["metadata"]["name"] for doc, case in zip(documents, CASES, strict=True) if case.refused_at
    }
    assert accepted == {doc["metadata"]["name"] for doc in documents} - refused_names, result.stderr
    for doc, case in zip(documents, CASES, strict=True):
        if case.refused_at is None:
            continue
        line = next((ln for ln in result.stderr.splitlines() if f'"{doc["metadata"]["name"]}"' in ln), "")
        assert f"{case.refused_at}: " in line, f"{case.name}: {line or 'not named in kubectl output'}"
    assert len(REFUSED) == len(refused_names)


def test_an_unknown_field_is_refused_under_strict_validation_and_warned_otherwise(
    kubectl, namespace, tmp_path
):
    manifest = in_namespace(plain_job("typo"), namespace)
    manifest["spec"]["tpu"]["topolgy"] = "2x2"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(manifest))
    strict = kubectl.run("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
    assert strict.returncode != 0 and 'unknown field "spec.tpu.topolgy"' in strict.stderr, strict.stderr
    warned = kubectl.run("apply", "--dry-run=server", "--validate=warn", "-n", namespace, "-f", str(path))
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: unknown field "spec.tpu.topolgy"' in warned.stderr, warned.stderr


def test_a_job_stored_before_a_rule_keeps_taking_updates_of_its_other_fields(
    sandbox, jobs, custom, namespace
):
    """Ratcheting (GA in Kubernetes 1.33): the CRD without its CEL takes a job the CEL refuses; with the CEL
    back, a label can still be changed, but a new bad value is refused."""
    extensions = k8s.ApiextensionsV1Api(sandbox.api_client)
    bad = in_namespace(plain_job("stored-before"), namespace)
    bad["spec"]["tpu"] = {"type": "v5e", "topology": "2x2x2"}  # v5e takes AxB: refused by CEL
    without = crd(cel=False)
    without["metadata"]["resourceVersion"] = extensions.read_custom_resource_definition(
        c.CRD_NAME
    ).metadata.resource_version
    extensions.replace_custom_resource_definition(c.CRD_NAME, without)

    probe = {**bad, "metadata": {**bad["metadata"], "name": "cel-probe"}}  # never stored: a dry run

    def without_in_effect() -> bool:
        """The CRD server swaps its validator in after the update: until then the old CEL still refuses."""
        try:
            custom.create_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, probe, dry_run="All"
            )
        except k8s.ApiException as error:
            if error.status != 422:
                raise
            return False
        return True

    try:
        wait_for(without_in_effect, timeout=30, what="the CRD without its CEL to be in effect")
        custom.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, bad)
    finally:
        install_crd(sandbox)
        # The same swap, back: until it is done the rule-less validator would take the bad patch below (and
        # the next tests' bad manifests).
        wait_for(lambda: not without_in_effect(), timeout=30, what="the CRD's CEL back in effect")
    custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "stored-before", {"metadata": {"labels": {"team": "a"}}}
    )
    with pytest.raises(k8s.ApiException) as refused:
        custom.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "stored-before", {"spec": {"tpu": {"topology": "4x4x4"}}}
        )
    assert refused.value.status == 422


def test_kubectl_refuses_a_bad_job_naming_the_field_and_the_fix(kubectl, namespace, tmp_path):
    manifest = in_namespace(plain_job("bad-topology"), namespace)
    manifest["spec"]["tpu"] = {"type": "v5e", "topology": "2x2x2"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = kubectl.run("apply", "-n", namespace, "-f", str(path))
    assert result.returncode != 0
    assert re.search(r"spec\.tpu\.topology: Invalid value: .*v5e", result.stderr), result.stderr


def test_a_running_jobs_shape_is_refused_at_apply_and_its_other_fields_still_change(jobs, kubelet):
    """The CRD's transition rules on the 1.36 server: once the job has left Pending and Queued, spec.tpu,
    spec.capacity and spec.nodePool cannot change, each refusal naming its field; a label, or the run
    policy's suspend, still can (tests/apply_cases.py TRANSITIONS are the same verdicts without a server)."""
    jobs.create(plain_job("running"))
    (pod,) = jobs.wait_pods_running("running", 1)
    for field, value in (
        ("tpu", {"type": "v5e", "topology": "2x4"}),
        ("capacity", {"mode": "spot"}),
        ("nodePool", {"policy": "existing"}),
    ):
        with pytest.raises(k8s.ApiException) as refused:
            jobs.custom.patch_namespaced_custom_object(
                c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, "running", {"spec": {field: value}}
            )
        assert refused.value.status == 422, refused.value.body
        assert f"spec.{field}" in refused.value.body and SHAPE_FIXED in refused.value.body
    jobs.custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, "running", {"metadata": {"labels": {"team": "b"}}}
    )
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("running", "Succeeded")
