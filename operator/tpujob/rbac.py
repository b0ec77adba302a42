"""The operator's Kubernetes permissions, in one place: the Helm chart and the tests use these rules.

Least privilege: no wildcards, no secrets; only what the handlers call. Nodes are only read, and only by a
cluster-wide operator (a Role cannot grant a cluster-scoped resource): their maintenance notices and the TPU
device plugin's hardware conditions.

Nothing the operator does needs kube-system: the TPU device plugin is scraped by Prometheus (the chart's
PodMonitor), not read by the operator; host lists are ConfigMaps in each job's namespace; the replicas
meet in a ClusterKopfPeering (a KopfPeering in the watched namespace when namespace-scoped). A
cluster-wide operator still gets RULES in a ClusterRole, so it may write pods and ConfigMaps in
kube-system too: a TPUJob may be created in any namespace, and its pods go there, and RBAC grants but
never subtracts. RoleBindings per team namespace would need every namespace named at install and the
operator watching a list of them. The chart takes the system namespaces back instead with a
ValidatingAdmissionPolicy (templates/protected-namespaces.yaml, rbac.protectedNamespaces) that refuses the
operator's own ServiceAccount every write there, on Kubernetes 1.30+.
"""

from __future__ import annotations

from typing import Any

from tpujob import peering
from tpujob.api import constants as c

# What kopf does with its peering object: read and watch it, write its own record (kopf's RBAC docs);
# the operator creates it at start when no replica has yet.
PEERING_VERBS = ["get", "list", "watch", "patch", "create"]

RULES: list[dict[str, Any]] = [
    # Watch TPUJobs, add/remove the finalizer and kopf's annotations (patch), delete after the TTL.
    {"apiGroups": [c.GROUP], "resources": [c.PLURAL], "verbs": ["get", "list", "watch", "patch", "delete"]},
    # Write status through the status subresource only.
    {"apiGroups": [c.GROUP], "resources": [f"{c.PLURAL}/status"], "verbs": ["get", "patch"]},
    # One pod per TPU host: created, watched, deleted on restart/suspend; a kept worker's annotation
    # tpujob.dev/restart-attempt patched (restartStrategy RecreateSlice: its trainer restarts in place).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # The headless Service that gives workers their hostnames.
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create"]},
    # The namespace's workers' NetworkPolicy (render/network.py), made by its first job before its pods:
    # watched, so a pass knows it exists (one deleted under running jobs is made again); never read one by
    # one, changed or deleted.
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["list", "watch", "create"],
    },
    # A large slice's host list, once per slice (render/plan.py hosts_config_map): created, read back when
    # the name is taken (only the job's own is rewritten), its data replaced when the job's slice changed.
    # Owned by the job, collected with it.
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
    # Events for every transition a user sees in `kubectl describe`; a worker's own read for the kubelet's
    # FailedMount and FailedAttachVolume (the only place the kubelet says why a volume does not mount).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "create", "patch"]},
    # Active and standby replicas (kopf peering): a namespace-scoped operator's KopfPeering.
    {"apiGroups": [peering.GROUP], "resources": [peering.NAMESPACED_PLURAL], "verbs": PEERING_VERBS},
]


# Cluster-wide operators only: list TPU nodes for `cloud.google.com/scheduled-maintenance-time` (GKE's
# maintenance notice), to checkpoint and restart a slice before its hosts go; watch them for the TPU device
# plugin's MegascaleHangDetected and SliceErrorDetected conditions, to restart a hung slice within seconds.
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    # A cluster-wide operator's replicas meet in a ClusterKopfPeering.
    {"apiGroups": [peering.GROUP], "resources": [peering.CLUSTER_PLURAL], "verbs": PEERING_VERBS},
]


# With Kueue (TPUJOB_KUEUE, the chart's kueue.enabled): what a Kueue job integration does with Workloads
# (Kueue's jobframework RBAC markers: create, watch, update; status for its conditions), and what it reads
# (the LocalQueue a job names).
KUEUE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [c.KUEUE_GROUP],
        "resources": ["workloads"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": [c.KUEUE_GROUP], "resources": ["workloads/status"], "verbs": ["get", "patch"]},
    {"apiGroups": [c.KUEUE_GROUP], "resources": ["localqueues"], "verbs": ["get"]},
]
# Cluster-scoped, so a cluster-wide operator's only: the admission's flavors (their node labels and
# tolerations go on the pods), the classes a Workload's priority comes from, and the ClusterQueues a queued
# job waits in (their quota and reservation: its start estimate, reconciler/start_estimates.py).
KUEUE_CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [c.KUEUE_GROUP],
        "resources": ["resourceflavors", "workloadpriorityclasses", "clusterqueues"],
        "verbs": ["get"],
    },
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list"]},
    # Kueue's visibility API, where it is served: a queued job's position in its ClusterQueue.
    {
        "apiGroups": [c.KUEUE_VISIBILITY_GROUP],
        "resources": ["clusterqueues/pendingworkloads"],
        "verbs": ["get"],
    },
    # The Workload CRD alone: how many pod sets the installed Kueue allows (spec.podSets maxItems).
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": [c.KUEUE_WORKLOAD_CRD],
        "verbs": ["get"],
    },
]


# With metrics auth (TPUJOB_METRICS_AUTH, the chart's metrics.auth.enabled): who asks for /metrics is checked
# as controller-runtime's metrics filter checks it (pkg/metrics/filters WithAuthenticationAndAuthorization):
# a TokenReview of the bearer token, then a SubjectAccessReview of GET on the path. Cluster-scoped, so a
# ClusterRole of its own even for a namespace-scoped operator.
METRICS_AUTH_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]
# What a scraper needs then (kubebuilder's metrics-reader ClusterRole): bound to Prometheus' ServiceAccount.
METRICS_READER_RULES: list[dict[str, Any]] = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]

# The users' side: roles aggregated into Kubernetes' default edit and view ClusterRoles (and admin), as
# JobSet, Kueue and Kubeflow ship theirs, so a team granted `edit` in its namespace may run TPUJobs there.
USER_EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [c.GROUP],
        "resources": [c.PLURAL],
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": [c.GROUP], "resources": [f"{c.PLURAL}/status"], "verbs": ["get", "list", "watch"]},
]
USER_VIEW_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [c.GROUP],
        "resources": [c.PLURAL, f"{c.PLURAL}/status"],
        "verbs": ["get", "list", "watch"],
    },
]


def cluster_role(name: str, kueue: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": RULES + CLUSTER_RULES + (KUEUE_RULES + KUEUE_CLUSTER_RULES if kueue else []),
    }
