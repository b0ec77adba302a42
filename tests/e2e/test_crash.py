"""SIGKILL the operator at every step of a job's life, start it again: the job converges, GKE saw
exactly one create per pool, and nothing is orphaned."""

from __future__ import annotations

import json

from google.cloud import container_v1

from tests.manifests import plain_job
from tests.sandbox.helpers import render_cluster
from tpujob.api import constants as c
from tpujob_sandbox import OperatorProcess, wait_for

MULTI_HOST = {"type": "v5p", "topology": "2x2x4"}


def finish(jobs, kubelet, gke, core, name, pods):
    running = jobs.wait_pods_running(name, pods, timeout=90)
    # One pod per host, all of the first attempt: the crash neither duplicated nor restarted anything.
    assert len(jobs.pods(name)) == pods
    assert {p.metadata.labels[c.LABEL_ATTEMPT] for p in jobs.pods(name)} == {"0"}
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    assert jobs.wait_phase(name, "Succeeded", timeout=60).get("restarts", 0) == 0
    # GKE drains the nodes (deleting their pods) and removes them with the pools.
    wait_for(lambda: not gke.node_pools(), timeout=60, what="the node pools to be deleted")
    wait_for(
        lambda: not [n for n in core.list_node().items if f"tj-{name}" in n.metadata.name],
        timeout=30,
        what="the TPU nodes to go",
    )


def test_killed_right_after_the_pool_create_call(jobs, gke, kubelet, core, operator):
    gke.inject_pool_fault("slow", provisioning_seconds=3 / gke.time_scale)
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    wait_for(lambda: gke.calls["CreateNodePool"] == 1, timeout=30, interval=0.01, what="the create call")
    with operator.killed():
        pass
    finish(jobs, kubelet, gke, core, "train", 4)
    assert gke.calls["CreateNodePool"] == 1


def test_killed_while_polling_provisioning(jobs, gke, kubelet, core, operator):
    gke.inject_pool_fault("slow", provisioning_seconds=4 / gke.time_scale)
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    jobs.wait_phase("train", "Provisioning", timeout=30)
    with operator.killed():
        wait_for(
            lambda: gke.node_pools() and all(p.status.name == "RUNNING" for p in gke.node_pools().values()),
            timeout=30,
            what="the pool to finish provisioning while the operator is down",
        )
    finish(jobs, kubelet, gke, core, "train", 4)
    assert gke.calls["CreateNodePool"] == 1


def test_killed_after_some_pods_exist(jobs, gke, kubelet, core, operator):
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    wait_for(lambda: jobs.pods("train"), timeout=30, interval=0.01, what="the first pod")
    with operator.killed():
        pass
    finish(jobs, kubelet, gke, core, "train", 4)
    assert gke.calls["CreateNodePool"] == 1


def test_killed_during_cleanup(jobs, gke, kubelet, core, operator):
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    for pod in jobs.wait_pods_running("train", 4):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")
    jobs.delete("train")
    with operator.killed():
        pass
    wait_for(lambda: jobs.gone("train"), timeout=60, what="the TPUJob to be deleted")
    wait_for(lambda: not gke.node_pools(), timeout=60, what="the node pools to be deleted")
    assert gke.calls["CreateNodePool"] == 1
    wait_for(lambda: not jobs.pods("train"), timeout=60, what="the pods to be garbage-collected")


def test_pools_of_vanished_jobs_are_swept_at_startup(jobs, gke, operator):
    """A pool labelled as ours whose TPUJob is gone (deleted while no operator ran): deleted."""
    manifest = plain_job("ghost")
    manifest["metadata"].update(namespace=jobs.namespace, uid="00000000-dead-beef-0000-000000000000")
    from tpujob.api import parse_tpujob
    from tpujob.render import render_plan

    (pool,) = render_plan(parse_tpujob(manifest), render_cluster(gke)).node_pools
    with operator.killed():
        gke.client().create_node_pool(
            parent=gke.parent, node_pool=container_v1.NodePool.from_json(json.dumps(pool))
        )
        wait_for(lambda: gke.node_pools().get(pool["name"]), timeout=10, what="the orphan pool")
    wait_for(
        lambda: pool["name"] not in gke.node_pools(), timeout=60, what="the sweep to delete the orphan pool"
    )


def test_killed_while_gke_retries_a_stockout(jobs, gke, kubelet, core, operator):
    """Killed the instant GKE accepted the create, before its answer (so the status has no record of GKE's
    operation): the new process finds the operation and keeps waiting on GKE's retry, with no delete and
    no second create."""
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", 0)
    gke.pools.retry_window_seconds = 36000  # still retrying when capacity returns, however slow the restart
    gke.on_accepted("CreateNodePool", operator.kill)
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    wait_for(lambda: gke.calls["CreateNodePool"] == 1 and operator not in OperatorProcess.running,
             timeout=30, what="the create call and the kill")  # fmt: skip
    operator.start()
    status = wait_for(
        lambda: (st := jobs.status("train")).get("reason") == "Stockout" and st,
        timeout=30,
        what="the stockout after the restart",
    )
    assert status["nodePools"][0]["operation"].startswith("operation-")
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", None)
    finish(jobs, kubelet, gke, core, "train", 4)
    calls = (gke.calls["CreateNodePool"], gke.calls["DeleteNodePool"])
    assert calls == (1, 1), [line for line in operator.log().splitlines() if "pool" in line.lower()][-25:]
