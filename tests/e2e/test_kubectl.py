"""kubectl's conventions for the TPUJob CRD, on the test bed with a real kubectl (the pinned 1.33 from
tests/chart/tools.py, never the machine's): `kubectl explain` describes every field, the short name and the
category resolve, `kubectl wait` sees the Succeeded condition, `kubectl get` shows the printer columns."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.kubectl_cli import Kubectl, table
from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob.api.crd import PRINTER_COLUMNS, crd
from tpujob_sandbox import wait_for

# `kubectl explain` of kubectl 1.27 and later renders OpenAPI v3 (/openapi/v3) by default; the test bed's
# 1.20 API server publishes only OpenAPI v2 (/openapi/v2; v3 came in 1.24 as alpha). kubectl falls back to
# v2 on its own when /openapi/v3 does not answer, but --output=plaintext-openapiv2 asks for the v2
# renderer outright: the same output on every server, no probe first. (The KUBECTL_EXPLAIN_OPENAPIV3
# variable of kubectl 1.24-1.26 is gone from 1.33.)
EXPLAIN_V2 = "--output=plaintext-openapiv2"


# --- kubectl explain ---------------------------------------------------------------------------------


def crd_schema(path: str) -> dict[str, Any]:
    """The CRD's openAPIV3Schema node at an explain path: "tpujob.spec.capacity"."""
    node = crd(cel=False)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path.split(".")[1:]:
        node = node["properties"][part]
    return node


FIELD_LINE = re.compile(
    r"^ {2,3}(?P<name>[A-Za-z][A-Za-z0-9]*)\t<(?P<type>[^>]+)>(?P<required> -required-)?$"
)


def explained(output: str) -> tuple[str, dict[str, str]]:
    """(the resource's DESCRIPTION, field -> its description) of `kubectl explain` plaintext, whitespace
    folded (kubectl wraps descriptions at 80 columns)."""
    description: list[str] = []
    fields: dict[str, list[str]] = {}
    current: list[str] = []
    section = ""
    for line in output.splitlines():
        if line in ("DESCRIPTION:", "FIELDS:"):
            section = line
        elif section == "DESCRIPTION:":
            description.append(line)
        elif section == "FIELDS:" and (match := FIELD_LINE.match(line)):
            current = fields.setdefault(match["name"], [])
        elif section == "FIELDS:":
            current.append(line)
    return " ".join(" ".join(description).split()), {
        k: " ".join(" ".join(v).split()) for k, v in fields.items()
    }


def fold(text: str) -> str:
    return " ".join(text.split())


def explain(kubectl: Kubectl, path: str, *extra: str) -> str:
    # The API server adds a new CRD to its OpenAPI document a moment after the CRD is Established.
    return wait_for(
        lambda: (result := kubectl.run("explain", path, *extra)).returncode == 0 and result.stdout,
        timeout=30,
        what=f"kubectl explain {path}",
        last_state=lambda: kubectl.run("explain", path, *extra).stderr,
    )


# The API server describes these itself in its OpenAPI document, whatever the CRD says (the CRD may not
# describe metadata at all): Kubernetes' own text for TypeMeta and ObjectMeta.
SERVER_DESCRIBED = {
    "apiVersion": "APIVersion defines the versioned schema",
    "kind": "Kind is a string value representing the REST resource",
    "metadata": "Standard object's metadata.",
}


# `kubectl explain` renders OpenAPI. Kubernetes 1.36's CRD server, run on its own as here, publishes no
# OpenAPI for the CRDs it serves (its /openapi/v3 lists only its own group; /openapi/v2 is 404), and
# kube-apiserver 1.20 in front aggregates only v2: on this test bed explain has no document for a TPUJob
# (README, "Two API servers"). These two run where kube-apiserver serves the CRD itself (envtest, or the
# benches' --crd-server in-process).
NO_OPENAPI = "the 1.36 CRD server publishes no OpenAPI for its CRDs: kubectl explain has nothing to render"


@pytest.mark.parametrize("path", ["tpujob", "tpujob.spec", "tpujob.spec.capacity", "tpujob.spec.runPolicy"])
def test_kubectl_explain_prints_every_field_with_its_description(sandbox, kubectl, path):
    """Every property of the CRD at that path is listed, with the CRD's description word for word."""
    if sandbox.control_plane.serves_crds:
        pytest.skip(NO_OPENAPI)
    schema = crd_schema(path)
    output = explain(kubectl, path, EXPLAIN_V2)
    assert re.search(rf"^KIND:\s+{c.KIND}$", output, re.MULTILINE), output
    description, fields = explained(output)
    assert description == fold(schema["description"]), output
    assert sorted(fields) == sorted(schema["properties"]), output
    for name, prop in schema["properties"].items():
        if path == "tpujob" and name in SERVER_DESCRIBED:
            assert fields[name].startswith(SERVER_DESCRIBED[name]), f"{name}: {fields[name]!r}"
            continue
        assert prop.get("description"), f"{path}.{name} has no description in the CRD: add one to the model"
        assert fields[name] == fold(prop["description"]), f"{path}.{name}: {fields[name]!r}\n{output}"


def test_kubectl_explain_falls_back_to_openapi_v2_by_itself_on_this_server(sandbox, kubectl):
    """Without the flag kubectl 1.33 probes /openapi/v3, which a 1.20 API server lacks, and renders v2."""
    if sandbox.control_plane.serves_crds:
        pytest.skip(NO_OPENAPI)
    with_flag = explain(kubectl, "tpujob.spec.capacity", EXPLAIN_V2)
    assert explain(kubectl, "tpujob.spec.capacity") == with_flag


# --- short name, category, printer columns ---------------------------------------------------------


def test_short_name_and_category_come_from_discovery(kubectl):
    names = crd()["spec"]["names"]
    assert "tj" in names["shortNames"]
    assert names["categories"] == ["tpujob"], "Kubeflow and JobSet do not join `all`; neither does TPUJob"
    resources = kubectl.ok("api-resources", f"--api-group={c.GROUP}", "--no-headers").split()
    assert resources[:2] == [c.PLURAL, ",".join(names["shortNames"])], resources
    assert kubectl.ok("api-resources", "--categories=tpujob", "-o", "name").split() == [c.CRD_NAME]
    assert c.CRD_NAME not in kubectl.ok("api-resources", "--categories=all", "-o", "name").split()


def test_kubectl_get_by_short_name_and_category_shows_the_printer_columns(kubectl, jobs):
    jobs.create(plain_job("train"))
    jobs.wait_pods_running("train", 1)
    jobs.wait_phase("train", "Running")
    # Without -o wide, the columns of priority 0 (Message is for -o wide).
    columns = ["NAME", *(column["name"].upper() for column in PRINTER_COLUMNS if not column.get("priority"))]
    assert columns == [
        "NAME",
        "TYPE",
        "TOPOLOGY",
        "SLICES",
        "PHASE",
        "RESTARTS",
        "CLUSTERQUEUE",
        "QUEUE",
        "REASON",
        "PROGRESS",
        "ETA",
        "AGE",
    ]
    # The short name; the category (kubectl expands categories first, so `tpujob` is the category here,
    # which test_short_name_and_category_come_from_discovery shows holds TPUJobs only); plural; full name.
    for resource in ("tj", "tpujob", "tpujobs", c.CRD_NAME):
        header, rows = table(kubectl.ok("get", resource, "-n", jobs.namespace))
        assert header == columns, f"kubectl get {resource}: {header}"
        # No Kueue queue: its ClusterQueue and Queue are empty.
        assert [row[:9] for row in rows] == [
            ["train", "v5e", "2x2", "1", "Running", "0", "", "", "Running"]
        ], rows
    # Not in `all`: `kubectl get all` shows the job's pod and Service, not the TPUJob.
    everything = kubectl.ok("get", "all", "-n", jobs.namespace, "-o", "name").split()
    assert any(name.startswith("pod/") for name in everything), everything
    assert not [n for n in everything if n.startswith(f"{c.SINGULAR}.{c.GROUP}/")], everything


# --- kubectl wait ------------------------------------------------------------------------------------


def test_kubectl_wait_for_succeeded_returns_once_the_job_succeeds(kubectl, jobs, kubelet):
    jobs.create(plain_job("train"))
    (pod,) = jobs.wait_pods_running("train", 1)
    # Started before the job ends: kubectl reads the condition, then watches for it.
    waiting = kubectl.start(
        "wait", "--for=condition=Succeeded", "tj/train", "-n", jobs.namespace, "--timeout=60s"
    )
    try:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
        out, err = waiting.communicate(timeout=90)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, err
    assert out.strip() == f"{c.SINGULAR}.{c.GROUP}/train condition met"
    assert jobs.status("train")["phase"] == "Succeeded"


def test_kubectl_wait_for_succeeded_times_out_on_a_running_job(kubectl, jobs):
    jobs.create(plain_job("train"))
    jobs.wait_phase("train", "Running")
    result = kubectl.run(
        "wait", "--for=condition=Succeeded", "tj/train", "-n", jobs.namespace, "--timeout=3s"
    )
    assert result.returncode != 0
    assert "timed out waiting for the condition" in result.stderr
