"""The operator's own pods and Services, watched without kopf's per-object machinery.

A pass reads a job's pods and whether its Service exists. kopf would handle each of those objects as it
handles a TPUJob: a worker task per object, its memory, loggers and patch per event, a handler call
through its invocation layer, and at start every listed object held until all are indexed. For 2 of
every 3 objects the operator watches, that bought nothing: the pass needs a small view of each pod and
the Service's existence. So these two watches feed plain maps instead:
- the stream is kopf's own (`kopf._cogs.clients.watching.infinite_watch`: the list in chunks, the watch
  from its resourceVersion, resumed after a server timeout, listed again after 410 Gone or a broken
  list; kopf's login and its label selectors, set in startup.watch_only_owned);
- `OwnedCache` keeps a view per object by job; a listing is gathered apart and swapped in whole when it
  ends, so an object deleted while the watch was down leaves the map at the relist, and readers never
  see half a listing;
- the jobs whose objects changed get a pass, as kopf's handlers asked before.

Every object of these watches is in a tenant's namespace, and a tenant can write its labels and annotations:
nothing read from one may stop a watch that serves every namespace. An object the view cannot read is left
out of the map and said once (a WARNING and an Event on the object, through `unreadable`); a failure of an
event's handling is logged and the watch goes on with the next event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

import kopf

# kopf's private watch stream: kopf has no public API for a watch without its per-object machinery, and
# the stream is what kopf's own watches run on (its chunked list, resume, relist after 410 and login), so
# writing another would mean a second watch client to keep right. Pinned: pyproject.toml holds kopf at one
# version, and tests/unit/test_kopf_private.py fails on an upgrade that moves or changes these names.
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from tpujob.api import constants as c
from tpujob.render.network import NAMESPACE_POLICY_NAME

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (namespace, job name)

JOB_RESOURCE = references.Resource(
    group=c.GROUP,
    version=c.VERSION,
    plural=c.PLURAL,
    kind=c.KIND,
    namespaced=True,
    verbs=frozenset({"list", "watch"}),
)
POD_RESOURCE = references.Resource(
    group="", version="v1", plural="pods", kind="Pod", namespaced=True, verbs=frozenset({"list", "watch"})
)
SERVICE_RESOURCE = references.Resource(
    group="",
    version="v1",
    plural="services",
    kind="Service",
    namespaced=True,
    verbs=frozenset({"list", "watch"}),
)
# The namespaces' workers' NetworkPolicies (one per namespace with TPUJobs, with TPUJOB_NETWORK_POLICY): a
# pass knows its namespace's exists.
NETWORK_POLICY_RESOURCE = references.Resource(
    group="networking.k8s.io",
    version="v1",
    plural="networkpolicies",
    kind="NetworkPolicy",
    namespaced=True,
    verbs=frozenset({"list", "watch"}),
)


def workload_resource(version: str) -> references.Resource:
    """Kueue's Workloads the operator made (one per job labelled kueue.x-k8s.io/queue-name), with
    TPUJOB_KUEUE, in the version Kueue serves (reconciler/kueue.py KueueServed)."""
    return references.Resource(
        group=c.KUEUE_GROUP,
        version=version,
        plural="workloads",
        kind="Workload",
        namespaced=True,
        verbs=frozenset({"list", "watch"}),
    )


# After a watch fails past kopf's own retries (its stream raises): wait, then watch again.
RESTART_SECONDS = 5.0


def job_key(body: Mapping[str, Any]) -> JobKey | None:
    """The job an owned object belongs to: its namespace and its job-name label."""
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(c.LABEL_JOB_NAME)
    namespace = meta.get("namespace")
    if not (isinstance(job, str) and isinstance(namespace, str)):
        return None
    return (namespace, job) if job and namespace else None


def namespace_policy_key(body: Mapping[str, Any]) -> JobKey | None:
    """The workers' NetworkPolicy of a namespace (render/network.py), by its name: (namespace, "")."""
    meta = body.get("metadata") or {}
    namespace = meta.get("namespace")
    if meta.get("name") != NAMESPACE_POLICY_NAME or not isinstance(namespace, str) or not namespace:
        return None
    return (namespace, "")


class View(Protocol):
    """An object made into what a pass reads; `warn` hears of each field read as absent. Raises for an
    object it cannot read at all."""

    def __call__(self, body: Mapping[str, Any], warn: Callable[[str], None], /) -> Any: ...


# Told of an object left out of the map, or with fields read as absent: (the object, what is wrong).
Unreadable = Callable[[Mapping[str, Any], str], None]


def _said_nowhere(_body: Mapping[str, Any], _problem: str) -> None:
    return None


class OwnedCache(Mapping[JobKey, list[Any]]):
    """A view of each owned object, by its job: `cache[key]` lists the views of the job's objects, and
    raises KeyError for a job with none (as kopf's indexes did). Fed one watch event at a time; pure but
    for `unreadable`, told once per object and problem."""

    def __init__(
        self,
        view: View,
        unreadable: Unreadable = _said_nowhere,
        key: Callable[[Mapping[str, Any]], JobKey | None] = job_key,
    ) -> None:
        self._view = view
        self._key = key  # what an object is kept by: its job (job_key), or its namespace
        self._unreadable = unreadable
        self._by_job: dict[JobKey, dict[str, Any]] = {}  # key -> {uid: view}
        self._job_of: dict[str, JobKey] = {}  # uid -> key
        self._listing: dict[str, tuple[JobKey, Any]] | None = None  # a listing being gathered
        # What was said of each object whose fields could not be read (uid -> the problem), so an object is
        # said once per problem, not at each of its events; an object leaves it when deleted or readable.
        self._said: dict[str, str] = {}
        self._listing_seen: set[str] = set()  # every uid of the listing being gathered, readable or not
        self.listed = False  # a whole listing has been swapped in at least once

    def _read(self, body: Mapping[str, Any]) -> tuple[bool, Any]:
        """(True, the view), or (False, None) for an object the view cannot read; either way a problem is
        said once."""
        problems: list[str] = []
        readable, view = True, None
        try:
            view = self._view(body, problems.append)
        except Exception as error:  # whatever a tenant wrote: the object is left out, the watch goes on
            readable = False
            problems.append(f"{error}; the operator ignores this object until it is fixed")
        uid = body["metadata"]["uid"]
        problem = "; ".join(problems)
        if problem and self._said.get(uid) != problem:
            self._unreadable(body, problem)
        if problem:
            self._said[uid] = problem
        else:
            self._said.pop(uid, None)
        return readable, view

    def __getitem__(self, key: JobKey) -> list[Any]:
        return list(self._by_job[key].values())

    def __iter__(self) -> Iterator[JobKey]:
        return iter(self._by_job)

    def __len__(self) -> int:
        return len(self._by_job)

    def listed_object(self, body: Mapping[str, Any]) -> None:
        """An object of a listing (kopf's event type None): kept apart until the listing ends."""
        if self._listing is None:
            self._listing, self._listing_seen = {}, set()
        self._listing_seen.add(body["metadata"]["uid"])
        key = self._key(body)
        if key is not None:
            readable, view = self._read(body)
            if readable:
                self._listing[body["metadata"]["uid"]] = (key, view)

    def listing_ended(self) -> set[JobKey]:
        """The listing replaces the map whole; the jobs whose objects differ from what the map held."""
        listing, self._listing = self._listing or {}, None
        self._said = {uid: said for uid, said in self._said.items() if uid in self._listing_seen}
        self._listing_seen = set()
        before = self._by_job
        self._by_job, self._job_of = {}, {}
        for uid, (key, view) in listing.items():
            self._by_job.setdefault(key, {})[uid] = view
            self._job_of[uid] = key
        self.listed = True
        return {
            key for key in before.keys() | self._by_job.keys() if before.get(key) != self._by_job.get(key)
        }

    def changed(self, event_type: str, body: Mapping[str, Any]) -> JobKey | None:
        """A watch event (ADDED, MODIFIED, DELETED): the map updated; the job it belongs to, if any."""
        uid = body["metadata"]["uid"]
        old_key = self._job_of.pop(uid, None)
        if old_key is not None:
            views = self._by_job.get(old_key, {})
            views.pop(uid, None)
            if not views:
                self._by_job.pop(old_key, None)
        key = self._key(body)
        if event_type == "DELETED":
            self._said.pop(uid, None)
        elif key is not None:
            readable, view = self._read(body)
            if readable:
                self._by_job.setdefault(key, {})[uid] = view
                self._job_of[uid] = key
        return key or old_key


def feed(
    cache: OwnedCache,
    event: Any,
    on_change: Callable[[str, Mapping[str, Any], JobKey], None],
    on_listed: Callable[[set[JobKey]], None],
) -> None:
    """One event of the watch stream into `cache`, and its callback. Never raises: a failure is logged and
    the watch goes on with the next event, so no object of one namespace stops the watch of every other."""
    try:
        if event is watching.Bookmark.LISTED:
            on_listed(cache.listing_ended())
        elif isinstance(event, watching.Bookmark) or event.get("type") == "BOOKMARK":
            return
        elif event["type"] is None:
            cache.listed_object(event["object"])
        elif (key := cache.changed(event["type"], event["object"])) is not None:
            on_change(event["type"], event["object"], key)
    except Exception:  # a bug of ours, not the tenant's: said in full, and the watch goes on
        log.exception("a watch event could not be handled; the watch goes on")


async def watch_owned(
    settings: kopf.OperatorSettings,
    resource: references.Resource | Callable[[], Awaitable[references.Resource]],
    namespace: str | None,
    cache: OwnedCache,
    on_change: Callable[[str, Mapping[str, Any], JobKey], None],
    on_listed: Callable[[set[JobKey]], None],
    on_failure: Callable[[str], None] | None = None,
) -> None:
    """Feed `cache` from the resource's watch, forever (`watch`): `on_change(type, body, key)` for each watch
    event of an owned object, `on_listed(changed jobs)` at the end of each listing."""
    await watch(
        settings, resource, namespace, lambda event: feed(cache, event, on_change, on_listed), on_failure
    )


async def watch(
    settings: kopf.OperatorSettings,
    resource: references.Resource | Callable[[], Awaitable[references.Resource]],
    namespace: str | None,
    consume: Callable[[Any], None],
    on_failure: Callable[[str], None] | None = None,
) -> None:
    """Hand each event of the resource's watch stream to `consume` (which must not raise), forever. With
    `on_failure`, a watch that fails is said there (once per problem, and "" when it lists again) instead
    of logged each time: an API that may not be installed (Kueue's). `resource` may be found anew each time
    the watch starts (Kueue's Workloads: the version served); one that cannot be found fails as a watch
    does."""
    where = references.NamespaceName(namespace) if namespace is not None else None
    said = ""
    while True:
        try:
            found = resource if isinstance(resource, references.Resource) else await resource()
            async for event in watching.infinite_watch(settings=settings, resource=found, namespace=where):
                if event is watching.Bookmark.LISTED and said and on_failure is not None:
                    said = ""
                    on_failure("")
                consume(event)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if on_failure is None:
                log.exception("watching %s failed; watching again in %.0f s", resource, RESTART_SECONDS)
            else:
                what = (
                    f"{resource.plural}.{resource.group}/{resource.version}"
                    if isinstance(resource, references.Resource)
                    else "Kueue's Workloads"
                )
                problem = f"the operator cannot watch {what}: {error}"
                if problem != said:
                    log.warning("%s (is Kueue installed, and the chart's kueue.enabled set?)", problem)
                    said = problem
                    on_failure(problem)
        await asyncio.sleep(RESTART_SECONDS)
