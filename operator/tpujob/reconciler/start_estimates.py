"""What a queued job's start estimate is made from (status/start_estimate.py): its ClusterQueue, read from
the API server (its quota, its queueing strategy, the reservation and pending count its status shows), and
the operator's own jobs in it, from the watch-fed maps the glue hands over (`source`: every job's body as
the watch has it, with its Workloads). One gathering per ClusterQueue serves every waiting job's pass for
FACTS_TTL_SECONDS. Reads only; the parsing is pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tpujob import kube, tpu
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.status import start_estimate as se

log = logging.getLogger(__name__)

FACTS_TTL_SECONDS = 2.0
# (the job's body as JSON text, its Workloads as the watch shows them), for every job the operator watches.
Source = Callable[[], Iterable[tuple[str, list[s.WorkloadView]]]]


def count(value: Any) -> int | None:
    """A quantity of chips (an integer, or Kubernetes' decimal form: "16", "1k"); None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    scale = {"k": 1000, "M": 1000**2, "G": 1000**3}.get(value[-1:], 1)
    digits = value[:-1] if scale > 1 else value
    return int(digits) * scale if digits.isdigit() else None


def queue_quota(cq: Mapping[str, Any]) -> tuple[dict[str, int], bool]:
    """A ClusterQueue's nominal google.com/tpu quota per flavor (spec.resourceGroups, in the queue's order),
    and whether it admits in StrictFIFO order (spec.queueingStrategy; BestEffortFIFO by default)."""
    spec = cq.get("spec") or {}
    quota: dict[str, int] = {}
    for group in spec.get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                if (
                    resource.get("name") == c.TPU_RESOURCE
                    and (n := count(resource.get("nominalQuota"))) is not None
                ):
                    quota[str(flavor.get("name"))] = n
    return quota, spec.get("queueingStrategy") == "StrictFIFO"


def queue_reservation(cq: Mapping[str, Any]) -> tuple[dict[str, int] | None, int | None]:
    """What the ClusterQueue's status says is reserved, google.com/tpu per flavor (status.flavorsReservation:
    every workload's, the operator's or not), and how many workloads wait (status.pendingWorkloads); None
    for what Kueue has not written yet."""
    status = cq.get("status") or {}
    pending = status.get("pendingWorkloads")
    pending = pending if isinstance(pending, int) and not isinstance(pending, bool) else None
    if "flavorsReservation" not in status:
        return None, pending
    reserved: dict[str, int] = {}
    for flavor in status.get("flavorsReservation") or ():
        for resource in flavor.get("resources") or ():
            if resource.get("name") == c.TPU_RESOURCE:
                reserved[str(flavor.get("name"))] = count(resource.get("total")) or 0
    return reserved, pending


def _time(text: Any) -> dt.datetime | None:
    return s.parse_timestamp(text) if isinstance(text, str) and text else None


def _deadline(body: Mapping[str, Any]) -> dt.datetime | None:
    """When activeDeadlineSeconds fails the job (it counts from status.startTime)."""
    seconds = ((body.get("spec") or {}).get("runPolicy") or {}).get("activeDeadlineSeconds")
    start = _time((body.get("status") or {}).get("startTime"))
    if not isinstance(seconds, int) or start is None:
        return None
    return start + dt.timedelta(seconds=seconds)


def _what(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"TPUJob {meta.get('namespace')}/{meta.get('name')}"


def holder(body: Mapping[str, Any], workload: s.WorkloadView, now: dt.datetime) -> se.Holder:
    """A TPUJob whose Workload holds quota: its chips per flavor (the admission's podSetAssignments: each pod
    set's google.com/tpu flavor and resourceUsage) and when it gives them back."""
    chips: dict[str, int] = {}
    for assignment in (workload.admission or {}).get("podSetAssignments") or ():
        flavor = (assignment.get("flavors") or {}).get(c.TPU_RESOURCE)
        used = count((assignment.get("resourceUsage") or {}).get(c.TPU_RESOURCE))
        if flavor and used:
            chips[str(flavor)] = chips.get(str(flavor), 0) + used
    status = body.get("status") or {}
    progress = status.get("progress") or {}
    attempt = status.get("attempt", 0)
    current = progress.get("attempt", 0) == attempt
    ends, bound, unknown = se.holder_end(
        _what(body),
        _time(progress.get("eta")) if current else None,
        _deadline(body),
        now,
        running=status.get("phase") == "Running" and current,
        stalled=bool(progress.get("stalled")) and current,
        finished=status.get("phase") in ("Succeeded", "Failed") or workload.is_true("Finished"),
    )
    return se.Holder(_what(body), chips, ends, bound, unknown)


def job_chips(body: Mapping[str, Any]) -> int:
    """The google.com/tpu a job's Workload asks for: every pod's chips (its hosts' VMs)."""
    want = (body.get("spec") or {}).get("tpu") or {}
    shape = tpu.resolve_slice(want["type"], want["topology"], want.get("machineType"))
    return int(want.get("slices", 1)) * shape.hosts * shape.chips_per_host


def fits_flavor(labels: Mapping[str, str], workload: s.WorkloadView) -> bool:
    """Whether a flavor's nodeLabels agree with every pod set's node selector (Kueue's flavorassigner: a
    flavor whose labels the pods' selector refuses is not tried)."""
    for pod_set in workload.pod_sets:
        selector = json.loads(dict(pod_set.fields).get("template.spec.nodeSelector") or "{}")
        if any(key in selector and selector[key] != value for key, value in labels.items()):
            return False
    return True


def waiter(
    body: Mapping[str, Any], workload: s.WorkloadView, flavors: Mapping[str, Mapping[str, str]]
) -> se.Waiter:
    """A TPUJob waiting in the queue: its chips, the queue's flavors it may take, Kueue's order of it."""
    meta = body.get("metadata") or {}
    since = _time(workload.queue_order_time) or dt.datetime.max.replace(tzinfo=dt.UTC)
    return se.Waiter(
        key=str(meta.get("uid") or ""),
        what=_what(body),
        chips=job_chips(body),
        flavors=tuple(name for name, labels in flavors.items() if fits_flavor(labels, workload)),
        priority=workload.priority,
        since=since,
        deadline=_deadline(body),
        runs_at_most=_runs_at_most(body),
        tie=workload.uid,
    )


def _runs_at_most(body: Mapping[str, Any]) -> float | None:
    """activeDeadlineSeconds of a job whose clock waits for its admission (no status.startTime yet)."""
    seconds = ((body.get("spec") or {}).get("runPolicy") or {}).get("activeDeadlineSeconds")
    started = (body.get("status") or {}).get("startTime")
    return float(seconds) if isinstance(seconds, int) and not started else None


def gather(
    name: str,
    jobs: Iterable[tuple[str, list[s.WorkloadView]]],
    flavors: Mapping[str, Mapping[str, str]],
    now: dt.datetime,
) -> tuple[tuple[se.Holder, ...], tuple[se.Waiter, ...]]:
    """The operator's jobs holding quota in ClusterQueue `name` (their Workload's admission names it) and
    those waiting in it (their status names it; their Workload has no reservation). A job whose body cannot
    be read is left out: its quota then counts as held by someone the operator does not know."""
    holders: list[se.Holder] = []
    waiters: list[se.Waiter] = []
    needle = f'"clusterQueue":"{name}"'
    for wire, workloads in jobs:
        for workload in workloads:
            try:
                reserved = workload.is_true("QuotaReserved")
                if reserved and (workload.admission or {}).get("clusterQueue") == name:
                    holders.append(holder(json.loads(wire), workload, now))
                elif not reserved and workload.active and not workload.deleting and needle in wire:
                    body = json.loads(wire)
                    if workload.is_true("Finished") or body.get("status", {}).get("phase") != "Queued":
                        continue
                    if (body["status"].get("queue") or {}).get("clusterQueue") == name:
                        waiters.append(waiter(body, workload, flavors))
            except (ValueError, KeyError, TypeError, AttributeError, tpu.CatalogError) as error:
                log.debug("a job left out of ClusterQueue %s's start estimates: %s", name, error)
    return tuple(holders), tuple(waiters)


class StartEstimates:
    """The facts of each ClusterQueue a waiting job asks about, gathered at most once per FACTS_TTL_SECONDS.
    `source` is set by the glue (the watch-fed maps); without it, no estimate is made."""

    def __init__(self, api: kube.Kube, flavor: Callable[[str, str], s.FlavorView | None]) -> None:
        self.api = api
        self.flavor = flavor  # KueueReader.flavor: a ResourceFlavor's labels (cached)
        self.source: Source | None = None
        self._cache: dict[str, tuple[float, se.QueueFacts]] = {}
        self._lock = threading.Lock()

    def facts(
        self,
        name: str,
        version: str,
        now: dt.datetime,
        own: tuple[dict[str, Any], s.WorkloadView] | None = None,
    ) -> se.QueueFacts | None:
        """The ClusterQueue's facts; `own`, the waiting job of the pass (its body, its Workload), is among
        its waiters even before its status says where it waits (the pass is what writes that)."""
        found = self._facts(name, version, now)
        if found is None or own is None or found.problem:
            return found
        body, workload = own
        uid = (body.get("metadata") or {}).get("uid")
        if any(w.key == uid for w in found.waiters):
            return found
        try:
            mine = waiter(body, workload, self._labels(found.quota, version))
        except (ValueError, KeyError, TypeError, AttributeError, tpu.CatalogError):
            return found
        return dataclasses.replace(found, waiters=(*found.waiters, mine))

    def _labels(self, quota: Mapping[str, int], version: str) -> dict[str, dict[str, str]]:
        """The node labels of the queue's flavors (ResourceFlavors read through the reader's cache)."""
        labels: dict[str, dict[str, str]] = {}
        for flavor in quota:
            view = self.flavor(flavor, version)
            if view is not None:
                labels[flavor] = view.node_labels
        return labels

    def _facts(self, name: str, version: str, now: dt.datetime) -> se.QueueFacts | None:
        if self.source is None or not name:
            return None
        clock = time.monotonic()
        with self._lock:
            cached = self._cache.get(name)
        if cached is not None and clock - cached[0] < FACTS_TTL_SECONDS:
            return cached[1]
        found = self._gather(name, version, now)
        with self._lock:
            self._cache = {k: v for k, v in self._cache.items() if clock - v[0] < FACTS_TTL_SECONDS}
            self._cache[name] = (clock, found)
        return found

    def _gather(self, name: str, version: str, now: dt.datetime) -> se.QueueFacts:
        assert self.source is not None
        try:
            cq = self.api.get_kueue_object(version, "clusterqueues", name)
        except kube.ApiError as error:
            return se.QueueFacts(name, problem=f"ClusterQueue {name} cannot be read: {error}")
        if cq is None:
            return se.QueueFacts(name, problem=f"ClusterQueue {name} does not exist")
        quota, strict = queue_quota(cq)
        reserved, pending = queue_reservation(cq)
        holders, waiters = gather(name, self.source(), self._labels(quota, version), now)
        return se.QueueFacts(name, quota, reserved, pending, strict, holders, waiters)
