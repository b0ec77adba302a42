"""A job's NetworkPolicy: who may reach its worker pods. Pure: the job and the operator's settings in, the
manifest out.

Without it every pod of the cluster reaches every worker, and the default trainer serves TensorFlow's gRPC
worker server (8470), which runs the graphs it is sent ("TensorFlow servers are meant for internal
communication only. They are not built for use in an untrusted network": tensorflow/SECURITY.md). So each
job's pods admit (ingress; egress stays open):

- every port from the same job's pods, and from no other pod: the ports the workers talk on are the TPU
  runtime's between hosts (8471; tpu7x's TPU_PROCESS_PORT), TensorFlow's worker server (8470), the Multislice
  coordinator (MEGASCALE_PORT, 8080), JAX's distributed coordinator (8476, jax._src.clusters
  cloud_tpu_cluster) and whatever the team's own code opens (a PyTorch/XLA rendezvous, a port set by flag).
  A list of ports would protect nothing here (the job's pods are one team's code) and would hang, not fail,
  a job whose framework uses one more;
- the trainer's metrics port (9090) from the peers the operator is given (TPUJOB_NETWORK_POLICY_METRICS_FROM:
  the operator itself, which reads worker 0's step counter there, and Prometheus; the chart fills both in).

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
from tpujob.api.job import TPUJob
from tpujob.render import naming
from tpujob.render.meta import job_labels, owned_metadata


def worker_selector(job: TPUJob) -> dict[str, Any]:
    """The job's worker pods (every pod the operator makes for it carries both labels)."""
    return {"matchLabels": job_labels(job)}


def network_policy_name(job: TPUJob) -> str:
    """The job's name, as its Service's: one of each per job, named alike in `kubectl get`."""
    return naming.service_name(job)


def network_policy(job: TPUJob, metrics_from: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The job's NetworkPolicy (networking.k8s.io/v1), owned by the job: garbage-collected with it.
    `metrics_from`: NetworkPolicyPeers that may read the trainers' metrics port."""
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": worker_selector(job)}]}]
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
        "metadata": owned_metadata(job, network_policy_name(job), job_labels(job)),
        "spec": {"podSelector": worker_selector(job), "policyTypes": ["Ingress"], "ingress": ingress},
    }
