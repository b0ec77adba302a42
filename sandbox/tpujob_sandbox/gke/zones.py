"""Where TPUs are: which zones offer which TPU machine types, the zones of each region, and capacity.

The simulation's own table, stated apart from the operator's catalog on purpose. Source: Cloud TPU "TPU
regions and zones", https://docs.cloud.google.com/tpu/docs/regions-zones (also /tpu/docs/types-zones),
worldwide and with its AI zones: North America: TPU7x us-central1-ai1a, us-central1-c; v6e us-central1-b,
us-east1-d, us-east5-a, us-east5-b and the AI zones us-central1-ai1a, us-south1-ai1b; v5p us-central1-a,
us-east5-a; v5e us-central1-a, us-south1-a, us-west1-c, us-west4-a; v4 us-central2-b. Europe: v6e
europe-west4-a; v5p and v5e europe-west4-b. Asia Pacific: v6e asia-northeast1-b; v5e asia-southeast1-b. (The
rows past europe-west4-a as issue #27's audit read them.) Single-tenant zones are left out.
A zone missing here may still offer a TPU on real GKE: the README says the table is a snapshot.

Capacity is unlimited unless a test limits it: `Capacity.set(zone, machine_type, vms)` stands for a stockout
(0 VMs free), `Quota.set(region, family, chips)` for a quota too small for the pool.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

# Compute Engine regions and their zones (https://cloud.google.com/compute/docs/regions-zones).
REGION_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-central2": ("us-central2-b",),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "us-east5": ("us-east5-a", "us-east5-b", "us-east5-c"),
    "us-south1": ("us-south1-a", "us-south1-b", "us-south1-c"),
    "us-west1": ("us-west1-a", "us-west1-b", "us-west1-c"),
    "us-west4": ("us-west4-a", "us-west4-b", "us-west4-c"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
    "asia-northeast1": ("asia-northeast1-a", "asia-northeast1-b", "asia-northeast1-c"),
    "asia-southeast1": ("asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c"),
}
# AI zones: a region's zones apart, for accelerators, named region-aiNx after their parent zone x; they are
# not among a cluster's default node locations, but a node pool may name one
# (https://docs.cloud.google.com/compute/docs/regions-zones/ai-zones, "Use AI zones in GKE").
AI_ZONES: dict[str, tuple[str, ...]] = {
    "us-central1": ("us-central1-ai1a",),
    "us-south1": ("us-south1-ai1b",),
}

_V4 = ("ct4p-hightpu-4t",)
_V5E = ("ct5lp-hightpu-1t", "ct5lp-hightpu-4t", "ct5lp-hightpu-8t")
_V5P = ("ct5p-hightpu-4t",)
_V6E = ("ct6e-standard-1t", "ct6e-standard-4t", "ct6e-standard-8t")
_TPU7X = ("tpu7x-standard-1t", "tpu7x-standard-4t")

TPU_MACHINE_TYPES_BY_ZONE: dict[str, frozenset[str]] = {
    zone: frozenset(types)
    for zone, types in (
        ("us-central1-a", _V5E + _V5P),
        ("us-central1-b", _V6E),
        ("us-central1-c", _TPU7X),
        ("us-central1-ai1a", _TPU7X + _V6E),
        ("us-central2-b", _V4),
        ("us-east1-d", _V6E),
        ("us-east5-a", _V6E + _V5P),
        ("us-east5-b", _V6E),
        ("us-south1-a", _V5E),
        ("us-south1-ai1b", _V6E),
        ("us-west1-c", _V5E),
        ("us-west4-a", _V5E),
        ("europe-west4-a", _V6E),
        ("europe-west4-b", _V5E + _V5P),
        ("asia-northeast1-b", _V6E),
        ("asia-southeast1-b", _V5E),
    )
}


# Flex-start (Dynamic Workload Scheduler) TPU node pools: "TPU v3 and v4 are not supported"; v6e in
# asia-northeast1-b, us-east5-a, us-east5-b; v5e in us-west4-a; v5p in us-east5-a (GKE "About flex-start
# provisioning mode", https://cloud.google.com/kubernetes-engine/docs/concepts/dws). TPU7x is not listed
# there, but xpk ships Ironwood flex-start recipes (AI-Hypercomputer/xpk
# docs/usage/tpu7x/recipes/flex_filestore_recipe.md and flex_lustre_recipe.md: `xpk cluster create
# --tpu-type=tpu7x-2x2x2 --flex`, zone "Example: us-central1-c", the one TPU7x zone of the table above):
# tpu7x flex-start in us-central1-c (README, "Assumed").
FLEX_START_ZONES: dict[str, frozenset[str]] = {
    "tpu7x": frozenset({"us-central1-c"}),
    "tpu-v6e-slice": frozenset({"asia-northeast1-b", "us-east5-a", "us-east5-b"}),
    "tpu-v5-lite-podslice": frozenset({"us-west4-a"}),
    "tpu-v5p-slice": frozenset({"us-east5-a"}),
}


def region_of(location: str) -> str:
    """us-central1-a -> us-central1; a region is its own region."""
    return location if location in REGION_ZONES else location.rsplit("-", 1)[0]


def is_zone(location: str) -> bool:
    """A zone of a known region: a standard zone or one of its AI zones."""
    region = region_of(location)
    return location in REGION_ZONES.get(region, ()) or location in AI_ZONES.get(region, ())


def offers(zone: str, machine_type: str) -> bool:
    return machine_type in TPU_MACHINE_TYPES_BY_ZONE.get(zone, frozenset())


# The regional quota metric each TPU machine family counts against, in chips. v5e's are Compute Engine's own
# regional metrics, as public `gcloud compute regions describe` outputs list them: TPU_LITE_PODSLICE_V5 and,
# for Spot, PREEMPTIBLE_TPU_LITE_PODSLICE_V5 ("Four metrics, all v5e, none of which governs v6e": the
# regional list carries only the older metrics). The other generations' quotas live in the Cloud Quotas API
# under names no public error body shows: the names below are assumed (README, "What nobody knows"), kept in
# the same shape. Spot VMs count against a quota of their own (Cloud TPU "Quotas": on-demand, preemptible and
# reserved quota types).
_QUOTA_METRICS = {
    "ct5lp": "TPU_LITE_PODSLICE_V5",
    "ct4p": "TPU_V4_PODSLICE",  # assumed
    "ct5p": "TPU_V5P_PODSLICE",  # assumed
    "ct6e": "TPU_V6E_SLICE",  # assumed
    "tpu7x": "TPU7X",  # assumed
}


def quota_family(machine_type: str, *, spot: bool = False) -> str:
    """The regional quota metric a TPU VM of `machine_type` counts against (chips), Spot's apart."""
    family = machine_type.split("-")[0]
    metric = _QUOTA_METRICS.get(family, f"TPU_{family.upper()}")
    return f"PREEMPTIBLE_{metric}" if spot else metric


@dataclass
class _Limits:
    """Free units per key; a missing key is unlimited."""

    free: dict[tuple[str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, where: str, what: str, units: int | None) -> None:
        with self.lock:
            if units is None:
                self.free.pop((where, what), None)
            else:
                self.free[(where, what)] = units

    def available(self, where: str, what: str) -> int | None:
        with self.lock:
            return self.free.get((where, what))

    def take(self, where: str, what: str, units: int) -> bool:
        """Take `units` if there are that many free (or no limit)."""
        with self.lock:
            free = self.free.get((where, what))
            if free is None:
                return True
            if free < units:
                return False
            self.free[(where, what)] = free - units
            return True

    def give_back(self, where: str, what: str, units: int) -> None:
        with self.lock:
            if (where, what) in self.free:
                self.free[(where, what)] += units

    def clear(self) -> None:
        with self.lock:
            self.free.clear()


class Capacity(_Limits):
    """Free TPU VMs per (zone, machine type): 0 is a stockout."""


class Quota(_Limits):
    """Free TPU chips per (region, quota family)."""
