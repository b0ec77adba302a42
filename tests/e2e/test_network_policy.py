"""The namespace's workers' NetworkPolicy on the test bed: made by the first job of a namespace before its
first pod, selecting every TPUJob worker of the namespace and no other pod, made once for all its jobs
(including across an operator killed mid-way), and made again when deleted under running jobs. The test bed
runs no network plugin that enforces a policy: these tests prove the objects and their selectors (what a
plugin enforces), not packets dropped."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob.render.network import NAMESPACE_POLICY_NAME
from tpujob_sandbox import wait_for
from tpujob_sandbox.operators import E2E_METRICS_FROM

MULTI_HOST = {"type": "v5p", "topology": "2x2x4"}


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, and matchExpressions with Exists: what the operator writes)."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    expressions = selector.get("matchExpressions") or []
    assert all(e["operator"] == "Exists" for e in expressions), expressions
    return all(
        labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items()
    ) and all(e["key"] in labels for e in expressions)


def policies(sandbox, namespace: str) -> list:
    return k8s.NetworkingV1Api(sandbox.api_client).list_namespaced_network_policy(namespace).items


def test_the_first_job_makes_the_namespace_s_policy_before_its_pods_and_later_jobs_share_it(
    sandbox, core, jobs, kubelet
):
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    train_pods = jobs.wait_pods_running("train", 4)
    (policy,) = policies(sandbox, jobs.namespace)
    assert policy.metadata.name == NAMESPACE_POLICY_NAME
    assert not policy.metadata.owner_references  # no job's: deleting one job opens no other
    # Made before the pods it guards (a worker never starts open to the pod network).
    assert all(policy.metadata.creation_timestamp <= p.metadata.creation_timestamp for p in train_pods)
    jobs.create(plain_job("other"))
    (other_pod,) = jobs.wait_pods_running("other", 1)
    assert [p.metadata.uid for p in policies(sandbox, jobs.namespace)] == [policy.metadata.uid]  # shared
    spec = k8s.ApiClient().sanitize_for_serialization(policy.spec)
    assert spec["policyTypes"] == ["Ingress"]
    assert all(selects(spec["podSelector"], p.metadata.labels) for p in [*train_pods, other_pod])
    # A pod of the namespace that is no TPUJob's worker is neither guarded nor let in.
    bystander = core.create_namespaced_pod(
        jobs.namespace,
        {
            "metadata": {"name": "notebook", "labels": {"app": "notebook"}},
            "spec": {"containers": [{"name": "c", "image": "registry.example/sleeper:1"}]},
        },
    )
    assert not selects(spec["podSelector"], bystander.metadata.labels)
    workers, metrics = spec["ingress"]
    # Every port from the namespace's workers (the TPU runtime's, TensorFlow's, the coordinators'), from no
    # other pod and no other namespace.
    (peer,) = workers["from"]
    assert "ports" not in workers and set(peer) == {"podSelector"}
    assert all(selects(peer["podSelector"], p.metadata.labels) for p in train_pods)
    assert not selects(peer["podSelector"], bystander.metadata.labels)
    # The trainers' metrics port from the operator and Prometheus only (the operator's setting).
    assert metrics == {
        "from": E2E_METRICS_FROM,
        "ports": [{"port": c.PORT_TRAINER_METRICS, "protocol": "TCP"}],
    }

    for pod in train_pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")
    jobs.delete("train")
    wait_for(lambda: jobs.gone("train"), timeout=60, what="the TPUJob to be deleted")
    # The other job's workers stay guarded: the policy is the namespace's, not the deleted job's.
    assert [p.metadata.uid for p in policies(sandbox, jobs.namespace)] == [policy.metadata.uid]


def test_an_operator_killed_right_after_making_the_policy_finishes_the_job_with_one(
    sandbox, jobs, kubelet, operator
):
    """SIGKILL as soon as the policy exists (before or while the Service and pods are made): the restarted
    operator makes what is missing, the policy again refused as existing, and there is still one."""
    jobs.create(plain_job("train", tpu=MULTI_HOST))
    wait_for(lambda: policies(sandbox, jobs.namespace), timeout=60, interval=0.01, what="the policy")
    with operator.killed():
        pass
    running = jobs.wait_pods_running("train", 4, timeout=90)
    (policy,) = policies(sandbox, jobs.namespace)
    assert policy.metadata.name == NAMESPACE_POLICY_NAME
    for pod in running:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded", timeout=60)


def test_a_policy_deleted_under_a_running_job_comes_back_before_its_next_pod(sandbox, jobs, kubelet):
    """The policy is a fact the operator watches, not one it assumes from the Service: deleted under a
    running job (by a tenant with `edit`, or by hand), it is made again, and the job's next pod starts
    after it."""
    networking = k8s.NetworkingV1Api(sandbox.api_client)
    jobs.create(plain_job("train"))
    (first,) = jobs.wait_pods_running("train", 1)
    (before,) = policies(sandbox, jobs.namespace)
    networking.delete_namespaced_network_policy(NAMESPACE_POLICY_NAME, jobs.namespace)
    again = wait_for(
        lambda: next(
            (p for p in policies(sandbox, jobs.namespace) if p.metadata.uid != before.metadata.uid), None
        ),
        timeout=30,
        what="the namespace's NetworkPolicy made again",
    )
    kubelet.fail(jobs.namespace, first.metadata.name)  # a restart: the next attempt's pod
    (second,) = jobs.wait_pods_running("train", 1, attempt=1, timeout=90)
    assert again.metadata.creation_timestamp <= second.metadata.creation_timestamp
    assert [p.metadata.uid for p in policies(sandbox, jobs.namespace)] == [again.metadata.uid], "made once"
