"""A slice of more than 16 hosts on the test bed: its host list is one ConfigMap the pods' env reads (the
simulated kubelet resolves configMapKeyRef as a kubelet does, and holds a pod in CreateContainerConfigError
without it), created before the pods and collected with the job (issue #39, bounded work per job)."""

from __future__ import annotations

from tests.manifests import plain_job
from tpujob_sandbox import wait_for

HOSTS = 32  # v5p 4x4x8


def test_a_large_slices_pods_run_on_one_host_list_collected_with_the_job(jobs):
    jobs.create(plain_job("wide", tpu={"type": "v5p", "topology": "4x4x8"}, nodePool={"policy": "create"}))
    pods = jobs.wait_pods_running("wide", HOSTS, timeout=180)
    held = jobs.core.read_namespaced_config_map("wide-s0-hosts", jobs.namespace)
    assert held.metadata.owner_references[0].kind == "TPUJob"
    names = held.data["TPU_WORKER_HOSTNAMES"].split(",")
    assert names[:2] == ["wide-s0-w0.wide", "wide-s0-w1.wide"] and len(names) == HOSTS
    for pod in pods:
        (entry,) = [e for e in pod.spec.containers[0].env if e.name == "TPU_WORKER_HOSTNAMES"]
        assert entry.value is None
        assert entry.value_from.config_map_key_ref.name == "wide-s0-hosts"
    jobs.delete("wide")
    wait_for(lambda: jobs.gone("wide"), timeout=120, what="the job and its pools gone")

    def collected() -> bool:
        found = jobs.core.list_namespaced_config_map(jobs.namespace).items
        return not [m for m in found if m.metadata.name == "wide-s0-hosts"]

    wait_for(collected, timeout=120, what="the garbage collector to delete the job's host list")
