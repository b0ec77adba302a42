"""The operator's Kubernetes permissions, in one place: the Helm chart and the tests use these rules.

Least privilege: no wildcards, no secrets; only what the handlers call. Nodes are only read, and only by a
cluster-wide operator (a Role cannot grant a cluster-scoped resource): their maintenance notices.
"""

from __future__ import annotations

from typing import Any

from tpujob.api import constants as c

RULES: list[dict[str, Any]] = [
    # Watch TPUJobs, add/remove the finalizer and kopf's annotations (patch), delete after the TTL.
    {"apiGroups": [c.GROUP], "resources": [c.PLURAL], "verbs": ["get", "list", "watch", "patch", "delete"]},
    # Write status through the status subresource only.
    {"apiGroups": [c.GROUP], "resources": [f"{c.PLURAL}/status"], "verbs": ["get", "patch"]},
    # One pod per TPU host: created, watched, deleted on restart/suspend.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete"]},
    # The headless Service that gives workers their hostnames.
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create"]},
    # Events for every transition a user sees in `kubectl describe`.
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]


# Cluster-wide operators only: list TPU nodes for `cloud.google.com/scheduled-maintenance-time` (GKE's
# maintenance notice), to checkpoint and restart a slice before its hosts go.
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
]


def cluster_role(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": RULES + CLUSTER_RULES,
    }
