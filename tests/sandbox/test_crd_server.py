"""Kubernetes 1.36's CRD server behind kube-apiserver 1.20's aggregator: how it is built (pure parts) and
that the test bed serves every custom resource from it, at the one address, with CEL."""

from __future__ import annotations

import json
import ssl
import urllib.request

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.sandbox.helpers import namespaced_crd
from tpujob_sandbox import ensure_crd, wait_crd_served, wait_for
from tpujob_sandbox.aggregation import REGISTRAR_LABEL, api_service, served_versions
from tpujob_sandbox.binaries.crdserver import kubernetes_version, package_version, wanted_packages
from tpujob_sandbox.controlplane import ControlPlane
from tpujob_sandbox.crdregistrar import wanted

# --- the build: what is downloaded from Debian unstable ---------------------------------------------------

DEPENDS = """\
golang-k8s-apiextensions-apiserver-dev
  Depends: golang-k8s-apiserver-dev
  Depends: <golang-any>
golang-k8s-apiserver-dev
  Depends: golang-1.27-go
golang-1.27-go
  Depends: golang-1.27-src
  Depends: libc6
golang-1.27-src
libc6
  Depends: libgcc-s1
golang-golang-x-tools
golang-golang-x-net-dev
"""


def test_only_go_sources_and_the_toolchain_are_downloaded():
    assert wanted_packages(DEPENDS) == [
        "golang-1.27-go",
        "golang-1.27-src",
        "golang-golang-x-net-dev",
        "golang-k8s-apiextensions-apiserver-dev",
        "golang-k8s-apiserver-dev",
    ]


def test_the_candidate_version_names_the_cache_and_the_kubernetes_release():
    show = "Package: golang-k8s-apiextensions-apiserver-dev\nVersion: 0.36.4-1\n\nVersion: 0.35.0-2\n"
    assert package_version(show) == "0.36.4-1"
    assert kubernetes_version("0.36.4-1") == "1.36.4"


# --- the registrar: one APIService per served version of an Established CRD ------------------------------


def crd_object(group: str, versions: dict[str, bool], established: bool = True) -> dict:
    return {
        "metadata": {"name": f"things.{group}"},
        "spec": {"group": group, "versions": [{"name": v, "served": s} for v, s in versions.items()]},
        "status": {"conditions": [{"type": "Established", "status": "True" if established else "False"}]},
    }


def test_the_registrar_wants_every_served_version_of_established_crds_only():
    crds = {
        "a": crd_object("a.example", {"v1": True, "v1beta1": False}),
        "b": crd_object("b.example", {"v2": True}, established=False),
    }
    assert wanted(crds) == {("a.example", "v1")}
    assert served_versions(crds["a"]) == [("a.example", "v1")]


def test_an_api_service_points_at_the_crd_server_with_kube_apiservers_crd_priorities():
    body = api_service("a.example", "v1", port=1234, ca_pem=b"CA", group_priority=1000, version_priority=100)
    assert body["metadata"] == {"name": "v1.a.example", "labels": {REGISTRAR_LABEL: "true"}}
    assert body["spec"]["service"] == {"namespace": "kube-system", "name": "tpujob-crd-server", "port": 1234}
    assert (body["spec"]["groupPriorityMinimum"], body["spec"]["versionPriority"]) == (1000, 100)


# --- on the test bed --------------------------------------------------------------------------------------

GROUP = "crd-server-test.tpujob.dev"
CRD = namespaced_crd(
    GROUP,
    "Widget",
    "widgets",
    {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer"}, "max": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {
                        "rule": "self.size <= self.max",
                        "message": "size must not exceed max",
                        "fieldPath": ".size",
                    }
                ],
            }
        },
    },
)


@pytest.fixture(scope="module")
def widgets(sandbox):
    if not sandbox.control_plane.serves_crds:
        pytest.skip("this test bed serves custom resources from kube-apiserver itself")
    extensions = k8s.ApiextensionsV1Api(sandbox.api_client)
    ensure_crd(extensions, CRD)
    yield extensions
    extensions.delete_custom_resource_definition(CRD["metadata"]["name"])


def widget(name: str, size: int, limit: int) -> dict:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, "max": limit},
    }


def test_a_crd_applied_at_the_clusters_address_lands_in_the_136_server(sandbox, widgets):
    if not isinstance(sandbox.control_plane, ControlPlane):
        pytest.skip("the CRD server's own port is known to the control plane that started it")
    plane = sandbox.control_plane
    pki = plane.state_dir / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(pki / "front-proxy-client.crt", pki / "front-proxy-client.key")
    request = urllib.request.Request(
        f"https://127.0.0.1:{plane.ports.crd_server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        f"{CRD['metadata']['name']}",
        headers={"X-Remote-User": "admin", "X-Remote-Group": "system:masters"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        assert json.load(response)["spec"]["group"] == GROUP
    version = urllib.request.Request(
        f"https://127.0.0.1:{plane.ports.crd_server}/version",
        headers={"X-Remote-User": "admin", "X-Remote-Group": "system:masters"},
    )
    with urllib.request.urlopen(version, context=context, timeout=10) as response:
        served = json.load(response)
    assert (served["major"], int(served["minor"].rstrip("+"))) >= ("1", 36), served


def test_cel_refuses_at_create_with_the_rules_field_path(sandbox, widgets, namespace):
    objects = k8s.CustomObjectsApi(sandbox.api_client)
    objects.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", widget("fits", 2, 3))
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", widget("big", 4, 3))
    assert refused.value.status == 422
    causes = json.loads(refused.value.body)["details"]["causes"]
    assert [(c["field"], c["message"]) for c in causes] == [
        ("spec.size", "Invalid value: size must not exceed max")
    ]


def test_ratcheting_lets_an_object_stored_before_a_rule_change_its_other_fields(sandbox, widgets, namespace):
    """A value stored before a rule existed may stay while other fields change (CRD validation ratcheting,
    GA in 1.33: a rule is skipped where the value it sits on is unchanged); a new bad value is refused."""
    objects = k8s.CustomObjectsApi(sandbox.api_client)
    extensions = widgets
    name = CRD["metadata"]["name"]
    objects.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", widget("old", 5, 9))
    _set_max_rules(extensions, name, [k8s.V1ValidationRule(rule="self <= 8", message="max is at most 8")])
    try:
        wait_for(
            lambda: _refused(objects, namespace, widget("new", 1, 9)),
            timeout=30,
            what="the new rule to apply to new objects",
        )
        objects.patch_namespaced_custom_object(
            GROUP, "v1", namespace, "widgets", "old", {"spec": {"size": 6}}
        )
        with pytest.raises(ApiException, match="max is at most 8"):
            objects.patch_namespaced_custom_object(
                GROUP, "v1", namespace, "widgets", "old", {"spec": {"max": 10}}
            )
    finally:
        _set_max_rules(extensions, name, None)


def _set_max_rules(extensions: k8s.ApiextensionsV1Api, name: str, rules: list | None) -> None:
    """Read, set spec.max's rules, replace; read again on a conflict, as client-go's retry.RetryOnConflict
    does (CI, 2026-11-30: the CRD changed between the read and the replace, 409)."""

    def replaced() -> bool:
        current = extensions.read_custom_resource_definition(name)
        schema = current.spec.versions[0].schema.open_apiv3_schema
        schema.properties["spec"].properties["max"].x_kubernetes_validations = rules
        try:
            extensions.replace_custom_resource_definition(name, current)
        except ApiException as error:
            if error.status != 409:
                raise
            return False
        return True

    wait_for(replaced, timeout=30, what=f"the CRD {name} replaced without a conflict")


def _refused(objects: k8s.CustomObjectsApi, namespace: str, body: dict) -> bool:
    try:
        objects.create_namespaced_custom_object(GROUP, "v1", namespace, "widgets", body, dry_run="All")
    except ApiException as error:
        return error.status == 422
    return False


def test_a_custom_object_in_a_missing_namespace_is_refused(sandbox, widgets):
    objects = k8s.CustomObjectsApi(sandbox.api_client)
    with pytest.raises(ApiException) as refused:
        objects.create_namespaced_custom_object(
            GROUP, "v1", "no-such-namespace", "widgets", widget("x", 1, 2)
        )
    assert refused.value.status == 404, refused.value.body


def test_a_deleted_crd_is_unregistered_from_the_aggregator(sandbox):
    if not sandbox.control_plane.serves_crds:
        pytest.skip("this test bed serves custom resources from kube-apiserver itself")
    extensions = k8s.ApiextensionsV1Api(sandbox.api_client)
    registration = k8s.ApiregistrationV1Api(sandbox.api_client)
    body = json.loads(json.dumps(CRD).replace(GROUP, f"gone.{GROUP}"))
    extensions.create_custom_resource_definition(body)
    wait_crd_served(extensions, body["metadata"]["name"])
    assert registration.read_api_service(f"v1.gone.{GROUP}").metadata.labels == {REGISTRAR_LABEL: "true"}
    extensions.delete_custom_resource_definition(body["metadata"]["name"])

    def unregistered() -> bool:
        try:
            registration.read_api_service(f"v1.gone.{GROUP}")
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(unregistered, timeout=30, what="the registrar to remove the deleted CRD's APIService")
