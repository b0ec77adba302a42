"""The simulators' list-and-watch cache (tpujob_sandbox.listwatch) on the test bed: empty while its resource
is not served, then following creates, updates and deletes, and empty again once the CRD is gone; of a core
resource by path and field selector, what leaves the selection leaves the cache."""

from __future__ import annotations

import functools

from kubernetes import client as k8s

from tests.sandbox.helpers import namespaced_crd
from tpujob_sandbox import ensure_crd, wait_for
from tpujob_sandbox.listwatch import ListWatch, json_list, retry_after

GROUP = "listwatch.test.tpujob.dev"
CRD = namespaced_crd(GROUP, "Gadget", "gadgets")


def gadget(name: str, size: int) -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": {"size": size}}


def sizes(cache: ListWatch) -> dict[str, int]:
    return {obj["metadata"]["name"]: obj["spec"]["size"] for obj in cache.items()}


def test_the_cache_follows_its_resource_from_not_served_to_gone(sandbox, namespace):
    custom = k8s.CustomObjectsApi(sandbox.api_client)
    extensions = k8s.ApiextensionsV1Api(sandbox.api_client)
    lists = []

    def list_gadgets(**kwargs):
        if not kwargs.get("watch"):
            lists.append(kwargs)
        return custom.list_cluster_custom_object(GROUP, "v1", "gadgets", **kwargs)

    cache = ListWatch(list_gadgets, name="gadgets", retry_seconds=0.1)
    cache.start()
    try:
        wait_for(lambda: lists, timeout=10, what="a first list (answered 404: not served)")
        assert cache.items() == []

        ensure_crd(extensions, CRD)
        create = functools.partial(custom.create_namespaced_custom_object, GROUP, "v1", namespace, "gadgets")
        create(gadget("a", 1))
        create(gadget("b", 2))
        wait_for(lambda: sizes(cache) == {"a": 1, "b": 2}, timeout=30, what="both gadgets cached",
                 last_state=lambda: sizes(cache))  # fmt: skip
        listed_once_served = len(lists)

        custom.patch_namespaced_custom_object(GROUP, "v1", namespace, "gadgets", "a", {"spec": {"size": 10}})
        custom.delete_namespaced_custom_object(GROUP, "v1", namespace, "gadgets", "b")
        wait_for(lambda: sizes(cache) == {"a": 10}, timeout=30, what="the update and the delete cached",
                 last_state=lambda: sizes(cache))  # fmt: skip
        assert len(lists) == listed_once_served  # followed by the watch, not by listing again

        extensions.delete_custom_resource_definition(CRD["metadata"]["name"])
        wait_for(lambda: not cache.items(), timeout=60, what="the cache emptied once the CRD is gone",
                 last_state=lambda: sizes(cache))  # fmt: skip
    finally:
        cache.stop()
        try:
            extensions.delete_custom_resource_definition(CRD["metadata"]["name"])
        except k8s.ApiException as error:
            assert error.status == 404


def test_a_cache_of_pending_pods_by_path_drops_a_pod_that_leaves_pending(sandbox, namespace):
    core = k8s.CoreV1Api(sandbox.api_client)
    query = {"fieldSelector": f"status.phase=Pending,metadata.namespace={namespace}"}
    cache = ListWatch(json_list(sandbox.api_client, "/api/v1/pods", query), name="pending", retry_seconds=0.1)
    cache.start()

    def names() -> set[str]:
        return {obj["metadata"]["name"] for obj in cache.items()}

    try:
        for name in ("waits", "runs"):
            pod = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nowhere:1"}]}}
            core.create_namespaced_pod(namespace, pod)
        wait_for(lambda: names() == {"waits", "runs"}, timeout=30, what="both pending pods cached",
                 last_state=names)  # fmt: skip
        assert all(isinstance(obj["spec"], dict) for obj in cache.items())  # the API server's JSON

        # No kubelet runs these: the status is written as one would, and the pod leaves the selection.
        core.patch_namespaced_pod_status("runs", namespace, {"status": {"phase": "Running"}})
        wait_for(lambda: names() == {"waits"}, timeout=30, what="the running pod dropped", last_state=names)
    finally:
        cache.stop()


def test_a_resource_not_served_is_listed_again_later_and_later_up_to_a_bound():
    waits = [retry_after(0.25, not_served) for not_served in range(6)]
    assert waits == [0.25, 0.25, 0.5, 1.0, 2.0, 2.0]
    assert retry_after(5.0, 3) == 5.0  # never below the cache's own retry
