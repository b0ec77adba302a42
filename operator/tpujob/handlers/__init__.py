"""kopf glue: which events start a reconcile pass, and kopf's settings. No decisions live here.

Level-triggered, like Kubernetes' own controllers: every TPUJob event, every event of a pod the
operator owns, a requeue the last pass asked for, and a periodic resync all run the same pass for
the job (tpujob.reconciler), one at a time per job. The pass reads jobs, pods and Services from
kopf's in-memory indexes (fed by watches), so a pass that finds nothing to do makes no API call.

kopf itself writes nothing to a TPUJob: no finalizer of its own (the pass adds ours before the first
node pool is requested; a job without pools has nothing to release), no last-handled-configuration
annotation (no handler reacts to spec diffs), and the resync is one loop over the index rather than a
kopf timer per job (a timer needs a finalizer and holds a task per job). Measured by
bench/operator_bench.py: a job's whole start costs its pods, its Service, one status write and one event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kopf
from prometheus_client import start_http_server

from tpujob import gke, kube, metrics
from tpujob.api import constants as c
from tpujob.config import OperatorConfig, from_environment
from tpujob.reconciler import Outcome, Reconciler, pod_view

log = logging.getLogger(__name__)

JOBS = (c.GROUP, c.VERSION, c.PLURAL)
RESYNC_CONCURRENCY = 8
RETRY_SECONDS = 2.0
OWNED = {c.LABEL_MANAGED_BY: c.MANAGED_BY}


class _NoDiffBase(kopf.DiffBaseStorage):
    """No handler reacts to spec changes (every pass reads the whole spec), so kopf keeps no diff base:
    no annotation write per job, no deep copy of every body on every event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


@dataclass(frozen=True)
class Indexes:
    """kopf's watch-fed indexes, the state a pass reads: jobs by (namespace, name), their pods and Services
    by (namespace, job name)."""

    jobs: kopf.Index[Any, Any]
    pods: kopf.Index[Any, Any]
    services: kopf.Index[Any, Any]


class Runtime:
    """Per-process state shared by the handlers (kopf's memo)."""

    def __init__(self, config: OperatorConfig, reconciler: Reconciler) -> None:
        self.config = config
        self.reconciler = reconciler
        self.locks: dict[str, asyncio.Lock] = {}
        # Jobs with a pass requested but not yet begun: more events for them need no pass of their own.
        self.queued: set[tuple[str, str]] = set()
        self.passes: set[asyncio.Task[None]] = set()
        self.requeues: dict[str, asyncio.TimerHandle] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.indexes: Indexes  # set by start_loops, before the watches deliver any event


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = from_environment()
    # Our finalizer and annotation prefixes, so nothing the operator writes uses kopf's defaults.
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = _NoDiffBase()
    # The operator posts its own events for every transition; kopf's log lines would be noise.
    settings.posting.level = logging.WARNING
    # Watches end server-side every few minutes and resume from their resourceVersion, so a silently
    # broken connection is noticed; the client timeout is a backstop above the server's.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # One replica with the Recreate strategy: no peering objects (and no RBAC for them) needed.
    settings.peering.standalone = True
    # The CRD exists before the operator starts (the chart installs it first): discover resources once
    # instead of watching CRDs and namespaces cluster-wide, which the least-privilege RBAC does not allow
    # (kopf would retry those 403s at every start, and a namespace-scoped operator has no cluster scope).
    settings.scanning.disabled = True
    # kopf keeps a task per watched object until it has been idle this long (default 5 s): in a burst of
    # 1000 jobs that is thousands of tasks at once. Our handlers return at once, so a short wait will do.
    settings.queueing.idle_timeout = 0.1
    # Kubernetes and GKE calls are synchronous and run in these threads.
    settings.execution.max_workers = config.workers
    # A slow API server must not hang a pass.
    settings.networking.request_timeout = 60
    pools = policies = None
    if config.gke_configured:
        pools = gke.NodePools(config.cluster, gke.make_client(config.gke_endpoint))
        region = gke.region_of(config.cluster.location) or config.cluster.location
        policies = gke.WorkloadPolicies(config.cluster.project, region, config.gke_endpoint)
    else:
        log.warning("no GKE cluster configured (TPUJOB_GKE_*): only policy 'existing' jobs can run")
    if config.metrics_port:
        metrics.register()
        start_http_server(config.metrics_port)
    reconciler = Reconciler(
        config.cluster,
        kube.Kube.login(settings),
        pools,
        config.restart_backoff_seconds,
        policies=policies,
        unschedulable_grace_seconds=config.unschedulable_grace_seconds,
    )
    memo.runtime = Runtime(config, reconciler)


@kopf.on.startup()
async def start_loops(
    memo: kopf.Memo,
    tpujob_index: kopf.Index[Any, Any],
    pod_index: kopf.Index[Any, Any],
    service_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    runtime: Runtime = memo.runtime
    runtime.indexes = Indexes(tpujob_index, pod_index, service_index)
    runtime.tasks = [
        asyncio.create_task(_sweep_forever(runtime)),
        asyncio.create_task(_resync_forever(runtime)),
    ]


@kopf.on.cleanup()
async def stop_loops(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    for task in [*runtime.tasks, *runtime.passes]:
        task.cancel()
    for handle in runtime.requeues.values():
        handle.cancel()


async def _resync_forever(runtime: Runtime) -> None:
    """A safety net: every job gets a pass at least every resync interval, so a lost watch event or a
    lost requeue is made good. One loop for all jobs, a few passes at a time."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(runtime.config.resync_seconds)
        if (
            runtime.config.namespace is None
        ):  # nodes are cluster-scoped: a namespaced operator cannot read them
            try:
                await loop.run_in_executor(None, runtime.reconciler.refresh_maintenance)
            except Exception:
                log.exception("reading maintenance notices failed; will retry")
        keys = list(runtime.indexes.jobs)
        for start in range(0, len(keys), RESYNC_CONCURRENCY):
            batch = keys[start : start + RESYNC_CONCURRENCY]
            results = await asyncio.gather(
                *(reconcile(runtime, ns, name) for ns, name in batch),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, Exception):
                    log.error("resync pass failed: %r", result)


async def _sweep_forever(runtime: Runtime) -> None:
    """Read the cluster (GetCluster), then delete node pools whose TPUJob is gone: at start (after a crash)
    and then periodically."""
    loop = asyncio.get_running_loop()
    jobs = runtime.indexes.jobs
    while True:
        try:
            await loop.run_in_executor(None, runtime.reconciler.check_cluster)
        except Exception:
            log.exception("reading the GKE cluster failed; will retry")
        live = {body["metadata"]["uid"] for key in list(jobs) for body in jobs.get(key, [])}
        try:
            deleted = await loop.run_in_executor(
                None, runtime.reconciler.sweep_orphans, live, runtime.config.namespace
            )
            if deleted:
                log.warning("orphan sweep deleted node pools: %s", ", ".join(deleted))
        except Exception:
            log.exception("orphan sweep failed; will retry")
        await asyncio.sleep(runtime.config.sweep_seconds)


# --- indexes: the watched state every pass reads without API calls ---------------------------------


# The metadata a pass, the finalizer patch and the Events read; managedFields and annotations (kubectl's
# last-applied copy of the spec) would only be held in memory, once per job.
INDEXED_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "finalizers",
    "deletionTimestamp",
)


@kopf.index(*JOBS)
def tpujob_index(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): indexed_job(body)}


def indexed_job(body: Any) -> dict[str, Any]:
    meta = body["metadata"]
    indexed = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: meta[key] for key in INDEXED_METADATA if key in meta},
        "spec": body.get("spec"),
    }
    if body.get("status") is not None:
        indexed["status"] = body["status"]
    return indexed


@kopf.index("", "v1", "pods", labels=OWNED)
def pod_index(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, labels.get(c.LABEL_JOB_NAME, "")): pod_view(body)}


@kopf.index("", "v1", "services", labels=OWNED)
def service_index(namespace: str, name: str, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): True}


def _values(index: kopf.Index[Any, Any], key: Any) -> Iterator[Any]:
    try:
        yield from index[key]
    except KeyError:
        return


# --- the pass -------------------------------------------------------------------------------------


async def reconcile(runtime: Runtime, namespace: str, name: str) -> None:
    key = (namespace, name)
    jobs, pods, services = runtime.indexes.jobs, runtime.indexes.pods, runtime.indexes.services
    bodies = list(_values(jobs, key))
    if not bodies:
        runtime.queued.discard(key)
        return
    uid = bodies[0]["metadata"]["uid"]
    lock = runtime.locks.setdefault(uid, asyncio.Lock())
    async with lock:
        runtime.queued.discard(key)  # the pass reads the state from here: a newer event needs a new pass
        bodies = list(_values(jobs, key))  # the newest, after waiting for the lock
        if not bodies or bodies[0]["metadata"].get("deletionTimestamp"):
            return
        body = bodies[0]
        job_pods = list(_values(pods, key))
        service_exists = any(_values(services, key))
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(
                None, runtime.reconciler.reconcile, body, job_pods, service_exists
            )
        except Exception:
            # A conflict or an unreachable API: the pass is idempotent, so simply run it again soon.
            log.exception("%s/%s: reconcile failed; retrying", namespace, name)
            outcome = Outcome(requeue_after=RETRY_SECONDS)
    _schedule(runtime, uid, outcome.requeue_after, lambda: reconcile(runtime, namespace, name))


def _schedule(runtime: Runtime, uid: str, delay: float | None, again: Any) -> None:
    """One pending requeue per job: the soonest asked for. A pass that needs no look, or a later one,
    leaves an earlier pass' request standing (the first poll of a pool just requested, a backoff's end)."""
    if delay is None:
        return
    loop = asyncio.get_running_loop()
    when = loop.time() + max(delay, 0.1)
    pending = runtime.requeues.get(uid)
    if pending is not None and loop.time() < pending.when() <= when:
        return
    if pending is not None:
        pending.cancel()
    runtime.requeues[uid] = loop.call_at(when, lambda: asyncio.ensure_future(again()))


def request_pass(runtime: Runtime, namespace: str, name: str) -> None:
    """A pass for the job soon, as client-go's work queue would: however many events arrive before it
    begins (a job's pods come in a burst), the job is queued once. The kopf handler returns at once, so
    kopf drops the event's body instead of holding it while the pass waits for the job's lock."""
    key = (namespace, name)
    if key in runtime.queued:
        return
    runtime.queued.add(key)
    task = asyncio.create_task(reconcile(runtime, namespace, name))
    runtime.passes.add(task)
    task.add_done_callback(runtime.passes.discard)


@kopf.on.event(*JOBS)
async def on_tpujob_event(
    type: str,
    body: kopf.Body,
    uid: str,
    namespace: str,
    name: str,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    runtime: Runtime = memo.runtime
    if type == "DELETED":
        _forget(runtime, uid)
        return
    if runtime.reconciler.is_own_write(body):
        return  # the echo of the last pass' status write: that pass saw all the rest
    request_pass(runtime, namespace, name)


@kopf.on.event("", "v1", "pods", labels=OWNED)
async def on_pod_event(
    namespace: str,
    labels: kopf.Labels,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    job_name = labels.get(c.LABEL_JOB_NAME)
    if job_name:
        request_pass(memo.runtime, namespace, job_name)


def _forget(runtime: Runtime, uid: str) -> None:
    handle = runtime.requeues.pop(uid, None)
    if handle:
        handle.cancel()
    runtime.locks.pop(uid, None)
    runtime.reconciler.forget(uid)


def _holds_finalizer(body: kopf.Body, **_: Any) -> bool:
    return c.FINALIZER in (body.get("metadata", {}).get("finalizers") or [])


# Only for jobs holding our finalizer (added by the pass before the first node pool is requested): kopf
# adds no finalizer of its own, so a job that never had pools is deleted at once, its pods and Service by
# garbage collection. When the handler is done, kopf removes the finalizer.
@kopf.on.delete(*JOBS, when=_holds_finalizer)
async def on_delete(body: kopf.Body, uid: str, memo: kopf.Memo, **_: Any) -> None:
    """The finalizer: node pools go first; pods and the Service follow by garbage collection."""
    runtime: Runtime = memo.runtime
    handle = runtime.requeues.pop(uid, None)
    if handle:
        handle.cancel()
    loop = asyncio.get_running_loop()
    # Under the job's lock: a pass that began before the deletion must not recreate a pool after it.
    async with runtime.locks.setdefault(uid, asyncio.Lock()):
        remaining = await loop.run_in_executor(None, runtime.reconciler.release_pools, dict(body))
    if remaining:
        raise kopf.TemporaryError(f"waiting for node pools to be deleted: {', '.join(remaining)}", delay=5)
    _forget(runtime, uid)
