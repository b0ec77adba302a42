"""Kueue's topology-aware scheduling with a `nodePool.policy: existing` TPUJob: Kueue places each slice's
pods on the nodes of a flavor with a Topology (tpujob_sandbox.kueue.tas, after Kueue's TAS snapshot), and the
operator puts each worker on the domain the assignment gives its rank, as Kueue's topology ungater does for
its own integrations (operator status/tas.py)."""

from __future__ import annotations

from tests.e2e.test_kueue import on_releases, queued, workload_of
from tests.manifests import plain_job
from tests.sandbox.helpers import create_pool, pool_request
from tpujob.api import constants as c
from tpujob.status.tas import worker_selectors
from tpujob_sandbox import wait_for

HOSTNAME = "kubernetes.io/hostname"
V5E_2X4 = {"type": "v5e", "topology": "2x4", "machineType": "ct5lp-hightpu-4t"}  # two hosts of 4 chips
LABELS = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "2x4",
}


def v5e_2x4_pool(name: str):
    return pool_request(
        name=name,
        initialNodeCount=2,
        config={"machineType": "ct5lp-hightpu-4t"},
        placementPolicy={"type": "COMPACT", "tpuTopology": "2x4"},
    )


@on_releases("v0.19.2", "v0.14.8")  # the assignment in v1beta2's compact slices, and in v1beta1's domains
def test_an_existing_pool_job_runs_on_the_domains_kueue_assigned(jobs, gke, kubelet, kueue, core):
    for pool in ("tas-a", "tas-b"):
        create_pool(gke, v5e_2x4_pool(pool))
    topology = kueue.topology([c.NODE_LABEL_NODEPOOL, HOSTNAME])
    flavor = kueue.resource_flavor(node_labels=LABELS, topology=topology, prefix="v5e-tas")
    # Quota for both pools' chips: which nodes the job gets is the topology assignment's choice.
    cluster_queue = kueue.cluster_queue({flavor: {c.TPU_RESOURCE: 16}})
    queue = kueue.local_queue(jobs.namespace, cluster_queue)
    jobs.create(queued(plain_job("tas", tpu=V5E_2X4, nodePool={"policy": "existing"}), queue))
    running = jobs.wait_pods_running("tas", 2, timeout=120)
    assignment = next(
        a
        for a in workload_of(jobs, kueue, "tas")["status"]["admission"]["podSetAssignments"]
        if a["name"] == "slice-0"
    )
    # Kueue's shape for the version served: v1beta2 packs the domains in slices, v1beta1 lists them.
    assert ("slices" in assignment["topologyAssignment"]) == (kueue.version == "v1beta2")
    wanted = worker_selectors(assignment["topologyAssignment"], 2)
    assert len({w[HOSTNAME] for w in wanted}) == 2  # one host each
    for pod in running:
        worker = int(pod.metadata.labels[c.LABEL_WORKER])
        assert {k: pod.spec.node_selector[k] for k in wanted[worker]} == wanted[worker]
        assert pod.spec.node_name == wanted[worker][HOSTNAME]  # on its assigned domain's node
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[c.NODE_LABEL_NODEPOOL] == wanted[worker][c.NODE_LABEL_NODEPOOL]
    assert gke.calls_received().get("CreateNodePool", 0) == 2  # the platform's two pools, none of the job's
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("tas", "Succeeded", timeout=60)
    wait_for(
        lambda: any(
            x["type"] == "Finished" and x["status"] == "True"
            for x in workload_of(jobs, kueue, "tas")["status"].get("conditions") or []
        ),
        timeout=30,
        what="the Workload finished",
    )
