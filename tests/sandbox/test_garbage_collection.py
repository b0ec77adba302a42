"""The real controller-manager garbage-collects a custom resource's pods once the resource is deleted."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.sandbox.helpers import namespaced_crd, tpu_nodes
from tpujob_sandbox import ensure_crd, wait_for

GROUP, VERSION, PLURAL, KIND = "sandbox-test.tpujob.dev", "v1", "owners", "Owner"
CRD = namespaced_crd(GROUP, KIND, PLURAL)


@pytest.fixture(scope="module")
def owner_crd(sandbox):
    ensure_crd(k8s.ApiextensionsV1Api(sandbox.api_client), CRD)
    return CRD


def test_pods_owned_by_a_custom_resource_are_deleted_with_it(sandbox, owner_crd, gke, core, namespace):
    objects = k8s.CustomObjectsApi(sandbox.api_client)
    owner = objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": "o"}},
    )
    reference = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": "o",
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    (node,) = tpu_nodes(gke, core, "gc")
    for name, node_name in (("pending", None), ("running", node)):
        pod = {
            "metadata": {"name": name, "ownerReferences": [reference]},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "image": "registry.example/sleeper:1"}],
            },
        }
        core.create_namespaced_pod(namespace, pod)
    wait_for(
        lambda: core.read_namespaced_pod("running", namespace).status.phase == "Running",
        timeout=20,
        what="the bound pod to run",
    )

    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "o")

    wait_for(
        lambda: not core.list_namespaced_pod(namespace).items,
        timeout=60,
        what="the garbage collector to delete the owned pods",
        last_state=lambda: [p.metadata.name for p in core.list_namespaced_pod(namespace).items],
    )
