"""Compute Engine reservations as GKE sees them when a node pool consumes a specific one.

A pool asks for one with `config.reservationAffinity` {consumeReservationType: SPECIFIC_RESERVATION, key:
compute.googleapis.com/reservation-name, values: [NAME or projects/P/reservations/NAME]} (GKE "Consuming
reserved zonal resources"). A reservation holds `count` VMs of one machine type in one zone; a pool's VMs
come out of it and go back when the pool is deleted (Compute "Reservations overview": a VM consuming a
reservation frees its slot when it is deleted).

GKE's answers to a create that names one, synchronous (both public texts are the create call's own error):
- no such reservation in the pool's zone: 404 NOT_FOUND, `Google Compute Engine: reservation "NAME" not
  found for node pool "POOL" at zone "ZONE".` (GoogleCloudPlatform/cluster-toolkit#5043, a Terraform
  `error creating NodePool: googleapi: Error 404: ...`);
- too few free VMs of the pool's machine type: 429, `Reservation does not have enough resources for the
  request: specific reservation "NAME" is insufficient for node pool "POOL" at zone "ZONE": required N and
  short of M VM count of machine type MT.` (GoogleCloudPlatform/gsutil#1000, `gcloud container node-pools
  create ... --reservation-affinity specific`: `ResponseError: code=429, message=...`). Its status name
  (RESOURCE_EXHAUSTED, HTTP 429's google.rpc code) and the absence of an ErrorInfo reason are assumed
  (README).

Test control: `create(name, zone, machine_type, count)`; `resize(name, count)` (the owner enlarges it).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from tpujob_sandbox.gke import errors

SPECIFIC = "SPECIFIC_RESERVATION"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
_SHARED = re.compile(r"^projects/(?P<project>[^/]+)/reservations/(?P<name>[^/]+)$")


@dataclass
class Reservation:
    project: str
    name: str
    zone: str
    machine_type: str
    count: int
    in_use: int = 0

    @property
    def free(self) -> int:
        return max(self.count - self.in_use, 0)


def parse_reference(value: str, project: str) -> tuple[str, str]:
    """A reservationAffinity value -> (project, name): `NAME` is the pool's own project's, and
    `projects/P/reservations/NAME` a reservation shared from project P (GKE "Consuming reserved zonal
    resources", shared reservations)."""
    shared = _SHARED.match(value)
    return (shared["project"], shared["name"]) if shared else (project, value)


def specific_reservation(affinity_type: str, key: str, values: list[str]) -> str | None:
    """The reservation a pool's reservationAffinity names, when it consumes a specific one."""
    if affinity_type != SPECIFIC or key != RESERVATION_KEY or not values:
        return None
    return values[0]


def short_of(reservation: Reservation | None, machine_type: str, vms: int) -> int:
    """VMs the reservation lacks for `vms` of `machine_type` (a reservation of another type has none)."""
    if reservation is None or reservation.machine_type != machine_type:
        return vms
    return max(vms - reservation.free, 0)


def not_found_error(value: str, pool: str, zone: str) -> errors.GkeError:
    # Verbatim shape: GoogleCloudPlatform/cluster-toolkit#5043 (the module docstring).
    return errors.GkeError(
        404,
        "NOT_FOUND",
        f'Google Compute Engine: reservation "{value}" not found for node pool "{pool}" at zone "{zone}".',
    )


def insufficient_error(
    value: str, pool: str, zone: str, vms: int, short: int, machine_type: str
) -> errors.GkeError:
    # Verbatim shape: GoogleCloudPlatform/gsutil#1000 (the module docstring); RESOURCE_EXHAUSTED assumed.
    return errors.GkeError(
        429,
        "RESOURCE_EXHAUSTED",
        f'Reservation does not have enough resources for the request: specific reservation "{value}" is '
        f'insufficient for node pool "{pool}" at zone "{zone}": required {vms} and short of {short} VM count '
        f"of machine type {machine_type}.",
    )


@dataclass
class Reservations:
    """The project's reservations (and those shared with it), keyed by (project, name)."""

    project: str
    _items: dict[tuple[str, str], Reservation] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, name: str, zone: str, machine_type: str, count: int, *, project: str = "") -> None:
        """Test control: a specific reservation of `count` VMs of `machine_type` in `zone`."""
        with self._lock:
            key = (project or self.project, name)
            self._items[key] = Reservation(key[0], name, zone, machine_type, count)

    def resize(self, name: str, count: int, *, project: str = "") -> None:
        """Test control: the owner changes its VM count (VMs in use stay in use)."""
        with self._lock:
            self._items[(project or self.project, name)].count = count

    def get(self, name: str, *, project: str = "") -> Reservation | None:
        with self._lock:
            found = self._items.get((project or self.project, name))
            return None if found is None else Reservation(**vars(found))

    def take(self, value: str, pool: str, zone: str, machine_type: str, vms: int) -> tuple[str, str]:
        """Consume `vms` VMs for `pool` from the reservation `value` names, or raise GKE's refusal; the key
        of what was taken, for `give_back`."""
        key = parse_reference(value, self.project)
        with self._lock:
            found = self._items.get(key)
            if found is None or found.zone != zone:  # a zonal resource: GKE looks in the pool's zone
                raise not_found_error(value, pool, zone)
            short = short_of(found, machine_type, vms)
            if short:
                raise insufficient_error(value, pool, zone, vms, short, machine_type)
            found.in_use += vms
        return key

    def give_back(self, key: tuple[str, str], vms: int) -> None:
        with self._lock:
            if key in self._items:
                self._items[key].in_use = max(self._items[key].in_use - vms, 0)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
