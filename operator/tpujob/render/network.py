"""The NetworkPolicy that guards the TPUJob workers of a namespace: who may reach them. Pure: the namespace
and the operator's settings in, the manifest out.

Without it every pod of the cluster reaches every worker, and the default trainer serves TensorFlow's gRPC
worker server (8470), which runs the graphs it is sent ("TensorFlow servers are meant for internal
communication only. They are not built for use in an untrusted network": tensorflow/SECURITY.md). So the
workers of a namespace admit (ingress; egress stays open):

- every port from the namespace's own TPUJob workers, and from no other pod: the ports the workers talk on
  are the TPU runtime's between hosts (8471; tpu7x's TPU_PROCESS_PORT), TensorFlow's worker server (8470),
  the Multislice coordinator (MEGASCALE_PORT, 8080), JAX's distributed coordinator (8476, jax._src.clusters
  cloud_tpu_cluster) and whatever the team's own code opens (a PyTorch/XLA rendezvous, a port set by flag).
  A list of ports would protect nothing here (the workers are one team's code) and would hang, not fail,
  a job whose framework uses one more;
- the trainer's metrics port (9090) from the peers the operator is given (TPUJOB_NETWORK_POLICY_METRICS_FROM:
  the operator itself, which reads worker 0's step counter there, and Prometheus; the chart fills both in).

One policy per namespace, not one per job: the namespace is the tenant (whoever may create a TPUJob there may
already exec into its pods), so one job's workers reaching another's of the same team opens nothing a
tenant does not have. What it buys: the policy is made once, by the first job of a namespace, and every
later job's pods are guarded from their first instant without a request of their own (a job's pods must
never serve the pod network unguarded; one request per job fewer on the hot path: issue #51).

NetworkPolicies add up: a team that wants more in (a TensorBoard, a debugger) adds its own policy selecting
the job's pods. Traffic from the pod's own node (kubelet probes, GKE's TPU device plugin reading the
runtime's metrics) is always allowed by NetworkPolicy ("traffic to and from the node where a Pod is running
is always allowed", kubernetes.io/docs/concepts/services-networking/network-policies/). A policy is only
enforced where the cluster's network plugin does (GKE: Dataplane V2 or network policy enforcement on), and
never for hostNetwork pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpujob.api import constants as c

# The policy's name in each namespace with TPUJobs; the name is what the operator (and its watch) knows it by.
NAMESPACE_POLICY_NAME = "tpujob-workers"


def workers_selector() -> dict[str, Any]:
    """Every TPUJob worker pod of the namespace (each pod the operator makes carries its job's name label)."""
    return {"matchExpressions": [{"key": c.LABEL_JOB_NAME, "operator": "Exists"}]}


def network_policy(namespace: str, metrics_from: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The namespace's workers' NetworkPolicy (networking.k8s.io/v1). Owned by no job (it guards every job
    of the namespace): it goes with the namespace. `metrics_from`: NetworkPolicyPeers that may read the
    trainers' metrics port."""
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": workers_selector()}]}]
    if metrics_from:
        ingress.append(
            {
                "from": [dict(peer) for peer in metrics_from],
                "ports": [{"protocol": "TCP", "port": c.PORT_TRAINER_METRICS}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NAMESPACE_POLICY_NAME,
            "namespace": namespace,
            "labels": {c.LABEL_MANAGED_BY: c.MANAGED_BY},
        },
        "spec": {"podSelector": workers_selector(), "policyTypes": ["Ingress"], "ingress": ingress},
    }
