"""The configured GKE cluster, as GetCluster shows it: whether the operator can make node pools in it (its
zones against the cluster's region), its Workload Identity, release channel and version, and what its
maintenance policy does to node upgrades. Read at start and at every sweep (reconciler/observe.py)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.cloud import container_v1

from tpujob.api.tenancy import TenancyPolicy
from tpujob.gke import CALL_TIMEOUT, classify_error
from tpujob.render import Cluster

# Settings named in a configuration error: the environment variable and its chart value.
SETTING_ZONE = "TPUJOB_GKE_ZONE (chart value gke.zone)"
SETTING_CLUSTER = (
    "TPUJOB_GKE_PROJECT, TPUJOB_GKE_LOCATION and TPUJOB_GKE_CLUSTER (chart values gke.project, gke.location, "
    "gke.cluster)"
)

_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z0-9]+$")


@dataclass(frozen=True)
class ClusterCheck:
    """What GetCluster says about the configured cluster, and whether the operator can make pools in it."""

    problem: str = ""  # empty: ready
    workload_identity: bool = False
    release_channel: str = ""
    version: str = ""
    maintenance: str = ""  # what the cluster's maintenance policy does to node upgrades (maintenance_summary)

    @property
    def ready(self) -> bool:
        return not self.problem


def region_of(location: str) -> str | None:
    """us-central1-a -> us-central1; us-central1 -> us-central1; None when it is neither."""
    if _REGION.match(location):
        return location
    match = _ZONE.match(location)
    return match["region"] if match else None


def zone_problem(cluster: Cluster, found: container_v1.Cluster) -> str:
    """Why node pools cannot go to the configured zones of this cluster ("" when they can)."""
    region = region_of(found.location or cluster.location)
    if not cluster.zones:
        return (
            f"{SETTING_ZONE} is empty and the cluster {cluster.parent} is regional: name a zone of {region}"
        )
    return next((p for zone in cluster.zones if (p := _one_zone_problem(zone, region, found))), "")


def _one_zone_problem(zone: str, region: str | None, found: container_v1.Cluster) -> str:
    if _REGION.match(zone):
        zones = ", ".join(found.locations) or f"{zone}-a, ..."
        return (
            f"{SETTING_ZONE} is {zone!r}, a region: node pools need a zone of the cluster's region "
            f"{region}, e.g. {zones}"
        )
    if region_of(zone) != region:
        return f"{SETTING_ZONE} is {zone!r}, which is not in the cluster's region {region}"
    return ""


def check_cluster(
    cluster: Cluster, client: container_v1.ClusterManagerClient, timeout: float = CALL_TIMEOUT
) -> ClusterCheck:
    try:
        found = client.get_cluster(name=cluster.parent, timeout=timeout)
    except gexc.NotFound as error:
        return ClusterCheck(
            f"GKE cluster {cluster.parent} not found ({error.message}); check {SETTING_CLUSTER}"
        )
    except gexc.GoogleAPICallError as error:
        refusal = classify_error(error)
        if refusal.permanent:
            return ClusterCheck(f"GKE refused to read cluster {cluster.parent}: {refusal.message}")
        raise
    return ClusterCheck(
        problem=zone_problem(cluster, found),
        workload_identity=bool(found.workload_identity_config.workload_pool),
        release_channel=found.release_channel.channel.name,
        version=found.current_master_version,
        maintenance=maintenance_summary(found.maintenance_policy, dt.datetime.now(dt.UTC)),
    )


# Exclusion scopes that hold node upgrades (container_v1 MaintenanceExclusionOptions.Scope: NO_UPGRADES
# "excludes all upgrades", NO_MINOR_OR_NODE_UPGRADES "also exclude all node pool upgrades"; NO_MINOR_UPGRADES
# lets node patch upgrades through).
_HOLD_NODE_UPGRADES = ("NO_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES")


def maintenance_summary(policy: container_v1.MaintenancePolicy, now: dt.datetime) -> str:
    """The cluster's maintenance policy as it bears on TPU pools, in one line: its window, and until when an
    active exclusion holds node upgrades. The operator's own pools carry their own exclusion (render.pools'
    UPGRADE_SHIELD); this is for pools made elsewhere (policy existing), and a reader's peace of mind."""
    window = policy.window
    if window.recurring_window.recurrence:
        recurring = window.recurring_window
        when = f"maintenance window {recurring.recurrence} from {_rfc3339(recurring.window.start_time)}"
    elif window.daily_maintenance_window.start_time:
        when = f"daily maintenance window from {window.daily_maintenance_window.start_time} UTC"
    else:
        when = "no maintenance window (GKE may upgrade nodes at any time)"
    holding = [
        (exclusion.end_time, name)
        for name, exclusion in window.maintenance_exclusions.items()
        if exclusion.start_time <= now < exclusion.end_time
        and exclusion.maintenance_exclusion_options.scope.name in _HOLD_NODE_UPGRADES
    ]
    if not holding:
        return f"{when}; no exclusion holds node upgrades now"
    end, name = max(holding)
    return f"{when}; node upgrades held until {_rfc3339(end)} (exclusion {name})"


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# What GKE's nodes are without a service account of their own: "If a custom service account is not specified,
# GKE uses the Compute Engine default service account" (GKE's node service accounts guide; CIS GKE 5.2.1),
# which has the project's Editor role unless an organization policy removed it; and the operator asks for
# the cloud-platform scope (api/spec.py DEFAULT_OAUTH_SCOPES), so the scope does not narrow it either.
LEAST_PRIVILEGE_NODE_ROLE = "roles/container.defaultNodeServiceAccount"


def node_account_warning(cluster: Cluster) -> str:
    """Why the TPU pools' nodes would run with too much Google access ("" when they have their own account).
    Said at start: every process on a TPU node (a tenant's trainer included, where Workload Identity does not
    intercept its metadata requests) can take the node account's token."""
    if cluster.node_service_account:
        return ""
    scopes = ", ".join(scope.rsplit("/", 1)[-1] for scope in cluster.node_oauth_scopes)
    return (
        "TPUJOB_GKE_NODE_SERVICE_ACCOUNT (the chart's gke.nodeServiceAccount) is empty: the TPU pools' nodes "
        "run as the project's Compute Engine default service account (often Editor), with scopes "
        f"{scopes}; give them an account of their own with {LEAST_PRIVILEGE_NODE_ROLE} "
        "(and roles/artifactregistry.reader for private images)"
    )


def host_network_warning(tenancy: TenancyPolicy, cluster: Cluster, workload_identity: bool) -> str:
    """Why granting host networking gives a tenant the nodes' Google identity ("" when nobody is granted
    it, or the identity is safe to share). A pod on the node's network reaches the node's metadata server
    as the node itself does (api/tenancy.py's hostNetwork: "its Google identity"); without Workload
    Identity every pod does, and with the default node account that identity is the project's Editor."""
    if tenancy.defaults.host_network:
        granted = "every namespace (the tenancy policy's defaults)"
    else:
        names = sorted(name for name in tenancy.namespaces if tenancy.for_namespace(name).host_network)
        if not names:
            return ""
        granted = "namespace" + ("s " if len(names) > 1 else " ") + ", ".join(names)
    unsafe = []
    if not workload_identity:
        unsafe.append("the cluster runs without Workload Identity (enable it: the cluster's workloadPool)")
    if not cluster.node_service_account:
        unsafe.append(
            "the TPU nodes run as the Compute Engine default service account (give them their own: "
            "TPUJOB_GKE_NODE_SERVICE_ACCOUNT)"
        )
    if not unsafe:
        return ""
    return (
        f"the tenancy policy grants hostNetwork to {granted}, whose trainers can act as the TPU nodes' "
        f"Google service account, and {' and '.join(unsafe)}; or take hostNetwork back"
    )
