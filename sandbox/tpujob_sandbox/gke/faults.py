"""Faults on demand, for tests: a call answered with an error, or a pool whose provisioning ends otherwise.

Lack of capacity and quota are not faults here: they are states of the zone and the region
(zones.Capacity, zones.Quota) that GKE meets while provisioning, as on real GKE.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tpujob_sandbox.gke import errors, zones


class CallFault(enum.StrEnum):
    """A request answered with the HTTP error real GKE gives in that situation."""

    QUOTA = "quota"
    TOO_MANY_OPERATIONS = "too_many_operations"
    INCOMPATIBLE_OPERATION = "incompatible_operation"
    INTERNAL = "internal"
    UNAVAILABLE = "unavailable"


class PoolFault(enum.StrEnum):
    """How a node pool's provisioning ends."""

    ERROR = "error"  # the pool ends in ERROR (an internal GCE error), the operation with INTERNAL
    SLOW = "slow"  # provisioning takes `provisioning_seconds` (GKE time)


@dataclass
class InjectedCallFault:
    fault: CallFault
    rpc: str
    pool: str | None
    remaining: int | None  # None: every matching call


@dataclass
class InjectedPoolFault:
    fault: PoolFault
    pool: str | None
    remaining: int | None
    provisioning_seconds: float | None


def call_fault_error(fault: CallFault, cluster: str, project: str, machine_type: str) -> errors.GkeError:
    """The error real GKE answers for each injected call fault."""
    if fault is CallFault.QUOTA:
        # The body names a quota metric (kubeflow/kubeflow#842: resource "CPUS"), never a machine type.
        metric = zones.quota_family(machine_type) if machine_type.startswith(("ct", "tpu")) else "CPUS"
        return errors.quota_refusal(metric, project)
    if fault is CallFault.TOO_MANY_OPERATIONS:
        return errors.too_many_operations(cluster)
    if fault is CallFault.INCOMPATIBLE_OPERATION:
        return errors.incompatible_operation(errors.new_operation_name())
    if fault is CallFault.INTERNAL:
        return errors.GkeError(500, "INTERNAL", "Internal error encountered.")
    return errors.GkeError(503, "UNAVAILABLE", "The service is currently unavailable.")


Injected = TypeVar("Injected", InjectedCallFault, InjectedPoolFault)


def _take(injected_list: list[Injected], matches: Callable[[Injected], bool]) -> Injected | None:
    for injected in injected_list:
        if matches(injected):
            if injected.remaining is not None:
                injected.remaining -= 1
                if injected.remaining <= 0:
                    injected_list.remove(injected)
            return injected
    return None


class Faults:
    def __init__(self) -> None:
        self._calls: list[InjectedCallFault] = []
        self._pools: list[InjectedPoolFault] = []
        self._lock = threading.Lock()

    def inject_call(self, fault: CallFault | str, rpc: str, pool: str | None, times: int | None) -> None:
        with self._lock:
            self._calls.append(InjectedCallFault(CallFault(fault), rpc, pool, times))

    def inject_pool(
        self, fault: PoolFault | str, pool: str | None, times: int | None, provisioning_seconds: float | None
    ) -> None:
        with self._lock:
            self._pools.append(InjectedPoolFault(PoolFault(fault), pool, times, provisioning_seconds))

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self._pools.clear()

    def take_call(self, rpc: str, pool: str | None) -> CallFault | None:
        with self._lock:
            found = _take(self._calls, lambda f: f.rpc == rpc and f.pool in (None, pool))
        return found.fault if found else None

    def take_pool(self, pool: str) -> InjectedPoolFault | None:
        with self._lock:
            found = _take(self._pools, lambda f: f.pool in (None, pool))
        return found
