"""Operator settings from environment variables (the Helm chart sets them), with documented defaults."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tpujob.render import Cluster

# name -> (default, meaning). The README's table and the chart's values are written from this.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "TPUJOB_GKE_PROJECT": ("", "Google Cloud project of the GKE cluster (required for policy create)"),
    "TPUJOB_GKE_LOCATION": ("", "GKE cluster location: a region or a zone"),
    "TPUJOB_GKE_CLUSTER": ("", "GKE cluster name"),
    "TPUJOB_GKE_ZONE": ("", "zone for TPU node pools; default: TPUJOB_GKE_LOCATION (zonal clusters)"),
    "TPUJOB_GKE_ENDPOINT": ("", "GKE API endpoint override (the sandbox's simulated GKE); empty: Google's"),
    "TPUJOB_NAMESPACE": ("", "watch only this namespace; empty: the whole cluster"),
    "TPUJOB_METRICS_PORT": ("8000", "port of the Prometheus /metrics endpoint; 0 disables it"),
    "TPUJOB_HEALTH_PORT": ("8081", "port of the liveness endpoint /healthz"),
    "TPUJOB_RESYNC_SECONDS": ("30", "look at every TPUJob at least this often"),
    "TPUJOB_SWEEP_SECONDS": ("300", "delete node pools whose TPUJob is gone this often"),
    "TPUJOB_WORKERS": ("16", "threads for Kubernetes and GKE calls"),
    "TPUJOB_RESTART_BACKOFF_SECONDS": ("10", "first wait before an application restart; doubles, max 6 min"),
    "TPUJOB_UNSCHEDULABLE_GRACE_SECONDS": (
        "30",
        "a pod unschedulable this long shows the scheduler's reason as the job's (reason Unschedulable)",
    ),
}


@dataclass(frozen=True)
class OperatorConfig:
    cluster: Cluster
    gke_endpoint: str | None
    namespace: str | None
    metrics_port: int
    health_port: int
    resync_seconds: float
    sweep_seconds: float
    workers: int
    restart_backoff_seconds: float
    unschedulable_grace_seconds: float

    @property
    def gke_configured(self) -> bool:
        return bool(self.cluster.project and self.cluster.location and self.cluster.cluster)


def from_environment(env: Mapping[str, str] | None = None) -> OperatorConfig:
    source = os.environ if env is None else env

    def get(name: str) -> str:
        return source.get(name, "") or ENVIRONMENT[name][0]

    location = get("TPUJOB_GKE_LOCATION")
    return OperatorConfig(
        cluster=Cluster(
            project=get("TPUJOB_GKE_PROJECT"),
            location=location,
            cluster=get("TPUJOB_GKE_CLUSTER"),
            zone=get("TPUJOB_GKE_ZONE") or location,
        ),
        gke_endpoint=get("TPUJOB_GKE_ENDPOINT") or None,
        namespace=get("TPUJOB_NAMESPACE") or None,
        metrics_port=int(get("TPUJOB_METRICS_PORT")),
        health_port=int(get("TPUJOB_HEALTH_PORT")),
        resync_seconds=float(get("TPUJOB_RESYNC_SECONDS")),
        sweep_seconds=float(get("TPUJOB_SWEEP_SECONDS")),
        workers=int(get("TPUJOB_WORKERS")),
        restart_backoff_seconds=float(get("TPUJOB_RESTART_BACKOFF_SECONDS")),
        unschedulable_grace_seconds=float(get("TPUJOB_UNSCHEDULABLE_GRACE_SECONDS")),
    )


def sandbox_environment(sandbox_dir: Path) -> dict[str, str]:
    """The env that points the operator at a `tpujob sandbox` (its kubeconfig and simulated GKE)."""
    info = json.loads((sandbox_dir / "sandbox.json").read_text())
    return {
        "KUBECONFIG": info["kubeconfig"],
        "TPUJOB_GKE_ENDPOINT": info["gkeEndpoint"],
        "TPUJOB_GKE_PROJECT": info["project"],
        "TPUJOB_GKE_LOCATION": info["location"],
        "TPUJOB_GKE_CLUSTER": info["cluster"],
        "TPUJOB_GKE_ZONE": info["zone"],
    }
