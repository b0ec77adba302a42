"""Tenancy on the test bed: a job in namespace A cannot select, tolerate its way onto, or delete namespace B's
node pool; and a namespace's chip limit holds a job before any pool is asked for, until chips free up.

Refusals come from the API server where it serves the CRD's CEL rules (the 1.36 CRD server), else from the
operator (the job fails as InvalidSpec, nothing made): either way with the field's path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for
from tpujob_sandbox.jobs import Jobs
from tpujob_sandbox.operators import CHIP_LIMITED_NAMESPACE
from tpujob_sandbox.pytest_plugin import namespace_name


def make_namespace(core: k8s.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name, "labels": {"tpujob.dev/test": "true"}}})
    wait_for(
        lambda: any(
            a.secrets
            for a in core.list_namespaced_service_account(name).items
            if a.metadata.name == "default"
        ),
        timeout=30,
        what=f"the default service account in {name}",
    )


def tear_down(handle: Jobs, core: k8s.CoreV1Api) -> None:
    """Every TPUJob deleted through the operator (its finalizer releases what it made), then the namespace."""
    listed = lambda: handle.custom.list_namespaced_custom_object(  # noqa: E731
        c.GROUP, c.VERSION, handle.namespace, c.PLURAL
    )["items"]
    for job in listed():
        handle.delete(job["metadata"]["name"])
    wait_for(lambda: not listed(), timeout=90, what=f"the TPUJobs of {handle.namespace} to be deleted")
    core.delete_namespace(handle.namespace)


@pytest.fixture
def team_a(sandbox, core, operator, gke, request) -> Iterator[Jobs]:
    """A second team's namespace beside `jobs`' (team B's)."""
    name = namespace_name(f"a-{request.node.name}")
    make_namespace(core, name)
    handle = Jobs(sandbox, name)
    yield handle
    tear_down(handle, core)


def policy_namespace(sandbox: Any, core: k8s.CoreV1Api, name: str) -> Iterator[Jobs]:
    """A namespace the test bed's tenancy policy names (its name is fixed), made for one test and gone
    after it, so the next test that needs it makes it anew."""
    make_namespace(core, name)
    handle = Jobs(sandbox, name)
    yield handle
    tear_down(handle, core)
    wait_for(
        lambda: name not in [n.metadata.name for n in core.list_namespace().items],
        timeout=60,
        what=f"namespace {name} to be gone",
    )


@pytest.fixture
def limited(sandbox, core, operator, gke) -> Iterator[Jobs]:
    """The namespace whose jobs may hold 4 chips at once (the test bed's tenancy policy)."""
    yield from policy_namespace(sandbox, core, CHIP_LIMITED_NAMESPACE)


def refused_at(handle: Jobs, manifest: dict[str, Any], path: str) -> str:
    """The words of the refusal of `manifest` at `path`: the API server's (CEL), else the operator's."""
    try:
        handle.create(manifest)
    except k8s.ApiException as error:
        assert error.status == 422, error.body
        assert path in error.body, error.body
        return str(error.body)
    status = handle.wait_phase(manifest["metadata"]["name"], "Failed", timeout=30)
    assert status["reason"] == "InvalidSpec" and path in status["message"], status
    return str(status["message"])


def pool_of(gke, namespace: str) -> str:
    (name,) = [
        n for n, p in gke.node_pools().items() if p.config.labels.get(c.POOL_LABEL_NAMESPACE) == namespace
    ]
    return name


def test_a_job_cannot_select_tolerate_its_way_onto_or_delete_another_namespaces_pool(
    jobs, team_a, gke, kubelet, core
):
    # Team B's job runs on its own pool, whose nodes carry the job's own taint.
    created = jobs.create(plain_job("train"))
    (b_pod,) = jobs.wait_pods_running("train", 1)
    b_pool = pool_of(gke, jobs.namespace)
    (node,) = gke.node_names(b_pool)
    taints = core.read_node(node).spec.taints
    assert any(t.key == c.POOL_TAINT_KEY and t.value == created["metadata"]["uid"] for t in taints), taints

    # Team A cannot tolerate every taint, tolerate the operator's, or select the operator's node labels.
    tpu = {"tpu": {"type": "v5e", "topology": "2x2"}, "nodePool": {"policy": "existing"}}
    refusals = {
        "any-taint": (
            plain_job("any-taint", **tpu, pod={"tolerations": [{"operator": "Exists"}]}),
            "spec.pod.tolerations[0].key",
        ),
        "their-taint": (
            plain_job(
                "their-taint", **tpu, pod={"tolerations": [{"key": c.POOL_TAINT_KEY, "operator": "Exists"}]}
            ),
            "spec.pod.tolerations[0].key",
        ),
        "their-labels": (
            plain_job("their-labels", **tpu, pod={"nodeSelector": {c.POOL_LABEL_JOB: "train"}}),
            "spec.pod.nodeSelector",
        ),
    }
    for manifest, path in refusals.values():
        refused_at(team_a, manifest, path)
    for name in refusals:
        assert not team_a.pods(name)

    # A job on existing TPU nodes of the same kind finds B's node only, and cannot use it: its taint.
    team_a.create(plain_job("borrow", **tpu))
    wait_for(
        lambda: any(
            cond.type == "PodScheduled"
            and cond.reason == "Unschedulable"
            and c.POOL_TAINT_KEY in (cond.message or "")
            for pod in team_a.pods("borrow")
            for cond in pod.status.conditions or []
        ),
        timeout=60,
        what="team A's pod refused by the scheduler for B's taint",
    )
    assert all(not pod.spec.node_name for pod in team_a.pods("borrow"))

    # Team A's own job of the same name gets a pool of its own; deleting it deletes that pool only.
    team_a.create(plain_job("train"))
    team_a.wait_pods_running("train", 1)
    a_pool = pool_of(gke, team_a.namespace)
    assert a_pool != b_pool
    team_a.delete("train")
    wait_for(lambda: a_pool not in gke.node_pools(), timeout=60, what="team A's pool to be deleted")
    wait_for(lambda: team_a.gone("train"), timeout=60, what="team A's job to be gone")
    assert b_pool in gke.node_pools()
    assert jobs.status("train")["phase"] == "Running"
    assert core.read_namespaced_pod(b_pod.metadata.name, jobs.namespace).status.phase == "Running"


def test_a_namespace_over_its_chip_limit_holds_the_next_job_before_any_pool(limited, gke, kubelet):
    limited.create(plain_job("first"))  # v5e 2x2: 4 chips, the namespace's whole limit
    (pod,) = limited.wait_pods_running("first", 1)
    limited.create(plain_job("second"))
    wait_for(
        lambda: limited.status("second").get("reason") == "ChipLimit",
        timeout=30,
        what="the second job to wait for chips",
    )
    assert "hold 4 of the 4" in limited.status("second")["message"]
    assert (
        len([p for p in gke.node_pools().values() if p.config.labels.get(c.POOL_LABEL_JOB) == "second"]) == 0
    )
    kubelet.succeed(limited.namespace, pod.metadata.name)
    limited.wait_phase("first", "Succeeded")
    # The first job's pool goes, and with it its chips: the second is admitted and runs.
    limited.wait_pods_running("second", 1, timeout=90)


def test_a_poisoned_pod_in_one_namespace_leaves_another_namespaces_job_running_to_succeeded(
    team_a, jobs, core, kubelet
):
    """A tenant with `edit` in its own namespace labels its worker pod `tpujob.dev/slice=x`: the pod watch
    serves every namespace, and that label once raised out of it for ever. The pod is left out and said
    once, by an Event in its own namespace; team B's job is watched to the end."""

    def unreadable() -> list[Any]:
        return [
            e
            for e in core.list_namespaced_event(team_a.namespace).items
            if e.involved_object.kind == "Pod"
            and e.involved_object.name == evil.metadata.name
            and e.reason == "Unreadable"
        ]

    team_a.create(plain_job("evil"))
    (evil,) = team_a.wait_pods_running("evil", 1)
    poison = {"metadata": {"labels": {c.LABEL_SLICE: "x"}}}
    core.patch_namespaced_pod(evil.metadata.name, team_a.namespace, poison)
    (said,) = wait_for(unreadable, timeout=30, what="the Event on the poisoned pod")
    assert "tpujob.dev/slice" in said.message and "'x'" in said.message
    # The pod changes again, still unreadable: the watch sees it before team B's job (one stream, in order).
    core.patch_namespaced_pod(
        evil.metadata.name, team_a.namespace, {"metadata": {"annotations": {"again": "1"}}}
    )
    jobs.create(plain_job("victim"))
    (pod,) = jobs.wait_pods_running("victim", 1, timeout=90)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    done = jobs.wait_phase("victim", "Succeeded", timeout=60)
    # Events are posted in order from one queue: once the victim's last one is there, any second Event
    # about the poisoned pod would be too.
    wait_for(
        lambda: [e for e in jobs.events("victim") if e.reason == (done.get("reason") or "Succeeded")],
        timeout=30,
        what="the victim's Succeeded Event",
    )
    assert len(unreadable()) == 1, "said once, not at each change of the pod"
