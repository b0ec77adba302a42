"""The simulated cluster: where it is, which release channel it follows, and the rules GKE applies to a node
pool request because of them.

Sources for each rule are beside it. What GKE answers is INVALID_ARGUMENT (HTTP 400) for a request that can
never succeed as written.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from google.cloud import container_v1

from tpujob_sandbox.gke import zones
from tpujob_sandbox.gke.errors import GkeError, invalid_argument

# The cluster's GKE version (the node pools get it too): the first that runs every TPU generation simulated
# here, TPU7x included (see TPU7X_MIN_VERSION; a real version: xpk's tpu7x issue AI-Hypercomputer/xpk#751
# creates its cluster with --gke-version=1.34.0-gke.2201000). Tests set an older one to meet the refusals.
DEFAULT_VERSION = "1.34.0-gke.2201000"
# "To run TPUs [with flex-start], use GKE version 1.33.0-gke.1712000 or later" (GKE flex-start page).
FLEX_START_TPU_MIN_VERSION = "1.33.0-gke.1712000"
# Flex-start VMs run at most 7 days, the default too (same page: maxRunDurationSeconds).
FLEX_START_MAX_RUN_SECONDS = 7 * 24 * 3600
# "Ironwood (TPU7x) is available in GKE Standard clusters that run version 1.34.0-gke.2201000 and later"
# (GKE "About Ironwood (TPU7x) in GKE", https://docs.cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood,
# "Availability"). TPU7x's node label (cloud.google.com/gke-tpu-accelerator) is "tpu7x".
TPU7X_MIN_VERSION = "1.34.0-gke.2201000"
TPU7X_ACCELERATOR = "tpu7x"


def version_key(version: str) -> tuple[int, ...]:
    """1.33.5-gke.1201000 -> (1, 33, 5, 1201000): GKE versions compare by these numbers."""
    numbers = version.replace("-gke.", ".").split(".")
    return tuple(int(n) for n in numbers if n.isdigit())


class ReleaseChannel(enum.StrEnum):
    # New Standard clusters are enrolled in REGULAR unless told otherwise
    # (https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels).
    NONE = "none"
    RAPID = "rapid"
    REGULAR = "regular"
    STABLE = "stable"


@dataclass
class SimCluster:
    project: str = "tpujob-sandbox"
    location: str = "us-central1"  # a region (regional cluster) or a zone (zonal cluster)
    name: str = "sandbox"
    release_channel: ReleaseChannel = ReleaseChannel.REGULAR
    version: str = DEFAULT_VERSION
    workload_pool: str = ""  # "<project>.svc.id.goog" when Workload Identity is on
    # The cluster's maintenance window and exclusions as GetCluster returns them (`maintenancePolicy`), which
    # GKE's automatic node upgrades respect (upgrades.py); tests set them.
    maintenance_policy: container_v1.MaintenancePolicy = field(default_factory=container_v1.MaintenancePolicy)

    def __post_init__(self) -> None:
        if zones.region_of(self.location) not in zones.REGION_ZONES:
            raise ValueError(
                f"unknown location {self.location!r}; known regions: {', '.join(zones.REGION_ZONES)}"
            )

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/clusters/{self.name}"

    @property
    def region(self) -> str:
        return zones.region_of(self.location)

    @property
    def default_node_zones(self) -> list[str]:
        """Where a pool without `locations` goes: a zonal cluster's zone, a regional cluster's zones."""
        if zones.is_zone(self.location):
            return [self.location]
        return list(zones.REGION_ZONES[self.region])

    def resource(self) -> container_v1.Cluster:
        """What GetCluster answers (the fields a client reads)."""
        cluster = container_v1.Cluster(
            name=self.name,
            location=self.location,
            zone=self.location,
            locations=self.default_node_zones,
            status=container_v1.Cluster.Status.RUNNING,
            current_master_version=self.version,
            current_node_version=self.version,
            self_link=f"https://container.googleapis.com/v1/{self.parent}",
            endpoint="127.0.0.1",
        )
        channel = {
            ReleaseChannel.NONE: container_v1.ReleaseChannel.Channel.UNSPECIFIED,
            ReleaseChannel.RAPID: container_v1.ReleaseChannel.Channel.RAPID,
            ReleaseChannel.REGULAR: container_v1.ReleaseChannel.Channel.REGULAR,
            ReleaseChannel.STABLE: container_v1.ReleaseChannel.Channel.STABLE,
        }[self.release_channel]
        cluster.release_channel.channel = channel  # type: ignore[assignment]  # proto-plus enums type as int
        if self.workload_pool:
            cluster.workload_identity_config.workload_pool = self.workload_pool
        cluster.maintenance_policy = container_v1.MaintenancePolicy(self.maintenance_policy)
        return cluster

    # --- what GKE refuses because of this cluster ---------------------------------------------------

    def check_management(self, request_json: dict[str, Any]) -> None:
        """A cluster on a release channel upgrades its nodes itself: a pool asking for auto-upgrade off is
        refused. Message as GKE gives it (shared/reference/gke-tpu.md; terraform-provider-google issues quote
        it: "Auto_upgrade cannot be false when release_channel REGULAR is set"). Proto3 cannot
        tell an absent `autoUpgrade` from false: a `management` block without it counts as false, as on GKE;
        a request without `management` takes the channel's defaults."""
        management = (request_json.get("nodePool") or {}).get("management")
        if self.release_channel is ReleaseChannel.NONE or management is None:
            return
        if not management.get("autoUpgrade", False):
            raise invalid_argument(
                f"Auto_upgrade cannot be false when release_channel {self.release_channel.name} is set."
            )

    def check_locations(self, locations: list[str]) -> list[str]:
        """Node locations must be zones of the cluster's region; returns the pool's zones."""
        if not locations:
            return self.default_node_zones
        for location in locations:
            if not zones.is_zone(location) or zones.region_of(location) != self.region:
                raise bad_location(location, self)
        return list(locations)

    def check_machine_type(self, machine_type: str, is_tpu: bool, pool_zones: list[str]) -> None:
        """A TPU machine type exists only in the zones that offer it (see zones.py for the source). GKE's
        wording for a machine type a zone lacks: `Error 400: Invalid machine type "e2-standard-4" in zone
        "us-central2-b": GCE_NOT_FOUND` (keras-team/kinetic#305)."""
        if not is_tpu:
            return
        for zone in pool_zones:
            if not zones.offers(zone, machine_type):
                raise invalid_argument(
                    f'Invalid machine type "{machine_type}" in zone "{zone}": GCE_NOT_FOUND'
                )


def check_tpu7x(cluster: SimCluster, accelerator: str) -> None:
    """A TPU7x pool on a cluster older than GKE documents for Ironwood is refused at once. No public body of
    this refusal was found: the INVALID_ARGUMENT and its words are ours (README, "Assumed")."""
    if accelerator != TPU7X_ACCELERATOR or version_key(cluster.version) >= version_key(TPU7X_MIN_VERSION):
        return
    raise invalid_argument(
        f"TPU7x (Ironwood) node pools require GKE version {TPU7X_MIN_VERSION} or later; cluster "
        f'"{cluster.name}" runs {cluster.version}. Upgrade the cluster to create this node pool.'
    )


def check_flex_start(cluster: SimCluster, accelerator: str, zone: str, max_run_seconds: int) -> None:
    """What GKE documents for flex-start TPU pools: versions, generations, zones, run duration. The refusals'
    wording is ours (INVALID_ARGUMENT, as for any request GKE cannot serve as written)."""
    if version_key(cluster.version) < version_key(FLEX_START_TPU_MIN_VERSION):
        raise invalid_argument(
            f"Flex-start TPU node pools need GKE {FLEX_START_TPU_MIN_VERSION} or later; the cluster runs "
            f"{cluster.version}."
        )
    offered = zones.FLEX_START_ZONES.get(accelerator)
    if offered is None:
        raise invalid_argument(f"Flex-start does not support accelerator {accelerator!r}.")
    if zone not in offered:
        raise invalid_argument(
            f"Flex-start for {accelerator} is not available in zone {zone!r}; "
            f"available: {', '.join(sorted(offered))}."
        )
    if max_run_seconds > FLEX_START_MAX_RUN_SECONDS:
        raise invalid_argument(
            f"maxRunDuration {max_run_seconds}s exceeds the flex-start limit of "
            f"{FLEX_START_MAX_RUN_SECONDS}s."
        )


def bad_location(location: str, cluster: SimCluster) -> GkeError:
    """GKE refuses a node location outside the cluster's region, or a region given as a zone."""
    if not zones.is_zone(location):
        return invalid_argument(
            f'Location "{location}" is not a valid zone. Node locations must be zones in the cluster\'s '
            f'region "{cluster.region}".'
        )
    return invalid_argument(
        f'Node location "{location}" is not in the cluster\'s region "{cluster.region}"; node locations '
        f"must be zones of {cluster.region}: {', '.join(zones.REGION_ZONES[cluster.region])}."
    )
