"""Each job's NetworkPolicy on the test bed: made before the job's first pod, selecting its pods and no other
job's, owned by the job and garbage-collected with it, including across an operator killed mid-way. The test
bed runs no network plugin that enforces a policy: these tests prove the objects and their selectors (what
a plugin enforces), not packets dropped."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for
from tpujob_sandbox.operators import E2E_METRICS_FROM

MULTI_HOST = {"type": "v5p", "topology": "2x2x4"}


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector of matchLabels only (what the operator writes) against a pod's labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def policy_of(sandbox, namespace: str, name: str):
    try:
        return k8s.NetworkingV1Api(sandbox.api_client).read_namespaced_network_policy(name, namespace)
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise


def test_each_job_gets_its_own_policy_before_its_pods_and_loses_it_with_the_job(sandbox, jobs, kubelet):
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    jobs.create(plain_job("other"))
    train_pods = jobs.wait_pods_running("train", 4)
    (other_pod,) = jobs.wait_pods_running("other", 1)
    policy = policy_of(sandbox, jobs.namespace, "train")
    assert policy is not None
    (owner,) = policy.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "TPUJob",
        "train",
        jobs.get("train")["metadata"]["uid"],
        True,
    )
    # Made before the pods it guards (a worker never starts open to the pod network).
    assert all(policy.metadata.creation_timestamp <= p.metadata.creation_timestamp for p in train_pods)
    spec = k8s.ApiClient().sanitize_for_serialization(policy.spec)
    assert spec["policyTypes"] == ["Ingress"]
    assert all(selects(spec["podSelector"], p.metadata.labels) for p in train_pods)
    assert not selects(spec["podSelector"], other_pod.metadata.labels)
    same_job, metrics = spec["ingress"]
    # Every port from the job's own pods (the TPU runtime's, TensorFlow's, the coordinators'), and from no
    # other job's pods.
    (peer,) = same_job["from"]
    assert "ports" not in same_job and set(peer) == {"podSelector"}
    assert all(selects(peer["podSelector"], p.metadata.labels) for p in train_pods)
    assert not selects(peer["podSelector"], other_pod.metadata.labels)
    # The trainers' metrics port from the operator and Prometheus only (the operator's setting).
    assert metrics == {
        "from": E2E_METRICS_FROM,
        "ports": [{"port": c.PORT_TRAINER_METRICS, "protocol": "TCP"}],
    }
    assert policy_of(sandbox, jobs.namespace, "other") is not None

    for pod in train_pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")
    assert policy_of(sandbox, jobs.namespace, "train") is not None  # a finished job keeps it with its pods
    jobs.delete("train")
    wait_for(lambda: jobs.gone("train"), timeout=60, what="the TPUJob to be deleted")
    wait_for(
        lambda: policy_of(sandbox, jobs.namespace, "train") is None,
        timeout=60,
        what="the job's NetworkPolicy to be garbage-collected with it",
    )
    assert policy_of(sandbox, jobs.namespace, "other") is not None  # another job's stays


def test_an_operator_killed_right_after_making_the_policy_finishes_the_job_with_one(
    sandbox, jobs, kubelet, operator
):
    """SIGKILL as soon as the policy exists (before or while the Service and pods are made): the restarted
    operator makes what is missing, the policy again refused as existing, and nothing is left after."""
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    wait_for(
        lambda: policy_of(sandbox, jobs.namespace, "train"), timeout=60, interval=0.01, what="the policy"
    )
    with operator.killed():
        pass
    running = jobs.wait_pods_running("train", 4, timeout=90)
    networking = k8s.NetworkingV1Api(sandbox.api_client)
    (policy,) = networking.list_namespaced_network_policy(jobs.namespace).items
    assert policy.metadata.owner_references[0].uid == jobs.get("train")["metadata"]["uid"]
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded", timeout=60)
    jobs.delete("train")
    wait_for(lambda: jobs.gone("train"), timeout=60, what="the TPUJob to be deleted")
    wait_for(
        lambda: not networking.list_namespaced_network_policy(jobs.namespace).items,
        timeout=60,
        what="no NetworkPolicy left in the namespace",
    )


def test_a_policy_deleted_under_a_running_job_comes_back_before_its_next_pod(sandbox, jobs, kubelet):
    """The policy is a fact the operator watches, not one it assumes from the Service: deleted under a
    running job (by a tenant with `edit`, or by hand), it is made again, and the job's next pod starts
    after it."""
    networking = k8s.NetworkingV1Api(sandbox.api_client)
    jobs.create(plain_job("train"))
    (first,) = jobs.wait_pods_running("train", 1)
    before = policy_of(sandbox, jobs.namespace, "train")
    assert before is not None
    networking.delete_namespaced_network_policy("train", jobs.namespace)
    again = wait_for(
        lambda: (
            (p := policy_of(sandbox, jobs.namespace, "train")) and p.metadata.uid != before.metadata.uid and p
        ),
        timeout=30,
        what="the job's NetworkPolicy made again",
    )
    (owner,) = again.metadata.owner_references
    assert owner.uid == jobs.get("train")["metadata"]["uid"]
    kubelet.fail(jobs.namespace, first.metadata.name)  # a restart: the next attempt's pod
    (second,) = jobs.wait_pods_running("train", 1, attempt=1, timeout=90)
    assert again.metadata.creation_timestamp <= second.metadata.creation_timestamp
    assert policy_of(sandbox, jobs.namespace, "train").metadata.uid == again.metadata.uid, "made once"
