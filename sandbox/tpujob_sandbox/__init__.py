"""tpujob's test bed: a real Kubernetes control plane plus simulated GKE and kubelet (`tpujob sandbox`).

    tpujob sandbox up --dir DIR        # background; writes DIR/kubeconfig and DIR/sandbox.json
    tpujob sandbox operator --dir DIR  # `tpujob operator` pointed at it
    tpujob sandbox status --dir DIR
    tpujob sandbox down --dir DIR      # stops every process it started; logs stay in DIR/logs

Parts (each module says more):
- binaries: etcd, kube-apiserver, kube-scheduler, kube-controller-manager from KUBEBUILDER_ASSETS, the cache
  (~/.cache/tpujob/kubernetes-1.20.2) or built once from Debian's Kubernetes source package; Kubernetes
  1.36's CRD server and etcd 3.5, built once from Debian unstable's Go packages.
- controlplane: the real control plane on loopback (token auth, RBAC, service accounts, GC, scheduler), with
  every custom resource served by the 1.36 CRD server behind kube-apiserver's aggregator (aggregation,
  crdregistrar).
- gke (+ gke_facts): GKE's cluster, node pool and operation REST API as GKE behaves (release channels,
  zones, capacity, quota, asynchronous stockouts, workload policies), faults on demand; registers TPU Nodes.
- kubelet: pod phases for pods on those nodes; the trainer image runs as a local process.
- bed: all of it as one `Sandbox`; operators: `tpujob operator` on it as users run it.
- pytest_plugin: the fixtures tests use (sandbox, gke, kubelet, namespace, operator, jobs).
- kueue: Kueue's real CRDs and a simulator of its controllers; crdgate: the gate in front of the CRD API.
- cli: `tpujob sandbox`; probe: `tpujob operator` with a probe into what it keeps.
- addresses (loopback addresses for nodes and pods), pki (keys and certificates), exec_token (a kubeconfig
  exec credential plugin), partition (a TCP proxy that can black-hole), listeners (closing a socket a
  thread accepts on), processes (child processes that die
  with their parent), forkserver (real trainers started as forks of an interpreter that imported TensorFlow
  once), machine (cache, locks, Debian packages), layout (a state folder's shared files),
  timescale (the test bed's clock), waiting (wait on a condition with a deadline), crdfiles (CRD files read
  once per process), reads (GETs by path, retried as client-go retries a GET cut mid-answer), listwatch
  (a list kept current by a watch, which a simulated controller scans as a real one scans its informer).

The names below are the test bed's API for tests and benchmarks. They load on first use, so
`tpujob sandbox status` does not import the Kubernetes and Google clients.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Sandbox": "bed",
    "start_sandbox": "bed",
    "FLEX_START_LOCATION": "bed",
    "ControlPlane": "controlplane",
    "find_binaries": "binaries",
    "GkeSimulator": "gke",
    "ReleaseChannel": "gke",
    "SimCluster": "gke",
    "KubeletSimulator": "kubelet",
    "EXIT_CODE_SIGTERM": "kubelet",
    "OperatorProcess": "operators",
    "operator_python": "operators",
    "install_crd": "operators",
    "install_peering_crds": "operators",
    "wait_crd_served": "operators",
    "ensure_crd": "operators",
    "operator_kubeconfig": "operators",
    "service_account_token": "operators",
    "token_kubeconfig": "operators",
    "operator_env": "operators",
    "Jobs": "jobs",
    "namespace_name": "pytest_plugin",
    "TIME_SCALE": "pytest_plugin",
    "wait_for": "waiting",
    "Timeout": "waiting",
    "free_port": "processes",
    "pid_alive": "processes",
    "log_tail": "processes",
    "start_process": "processes",
    "stop_process": "processes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tpujob_sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tpujob_sandbox.{_EXPORTS[name]}"), name)
