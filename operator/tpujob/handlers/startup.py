"""Start and stop: kopf's settings, the operator's clients and metrics endpoint, the periodic loops."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

import kopf
from prometheus_client import start_http_server

from tpujob import gke, gke_cluster, kube, kubelogin, metrics, metrics_auth, peering
from tpujob.api import constants as c
from tpujob.config import OperatorConfig, from_environment
from tpujob.handlers import nodes, owned
from tpujob.handlers.events import (
    NETWORK_POLICIES,
    OWNED_SELECTOR,
    PODS,
    SERVICES,
    WORKLOADS,
    JobFeed,
    pod_changed,
)
from tpujob.handlers.loops import lead_forever, resync_forever, sweep_forever, trim_heap_forever
from tpujob.handlers.workqueue import Indexes, Runtime, request_pass
from tpujob.ratelimit import RequestLimiter
from tpujob.reconciler import CREATE_CONCURRENCY, Reconciler, Settings, pod_view, workload_view

log = logging.getLogger(__name__)
# How long a stopping operator keeps sending its waiting status writes, and then its queued Events.
DRAIN_SECONDS = 5.0
LIST_PAGE = 500


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """kopf's watches log in as the operator's own calls do (tpujob.kubelogin): the service account in a
    pod, else the kubeconfig with its exec plugin. kopf calls this again when the token expires or the API
    server refuses it (401)."""
    return kubelogin.kopf_connection(kubelogin.load(), trust_env=settings.networking.trust_env)


def set_peering(settings: kopf.OperatorSettings, config: OperatorConfig, priority: int) -> None:
    """kopf's peering mode, set here and nowhere else: cli.py's kopf.run passes no standalone=, peering_name=
    or priority=. kopf.run copies those into these same settings before any startup handler runs, and kopf
    reads them only once every startup handler has finished (kopf 1.45: _core/reactor/running.py
    spawn_tasks maps them, then runs the startup handlers and only then sets the flag its watch and peering
    tasks wait for; orchestration.adjust_tasks reads peering.guess_selectors there). So what is set here is
    what kopf uses. (kopf.run's clusterwide=, what it watches, also sets peering.clusterwide; a peering
    replica sets the same value here, beside the peering's name.)

    Replicas meet in a peering object: the one of highest priority works, the others stand by and take over
    when its record in the object goes stale (peering_lifetime_seconds after its last write). Without
    TPUJOB_PEERING the operator runs standalone, even if a kopf peering object named "default" exists."""
    settings.peering.standalone = config.peering is None
    if config.peering is not None:
        settings.peering.name = config.peering
        settings.peering.clusterwide = config.namespace is None
        settings.peering.mandatory = True
        settings.peering.priority = priority
        settings.peering.lifetime = config.peering_lifetime_seconds


def watch_only_owned(settings: kopf.OperatorSettings) -> None:
    """kopf watches only the operator's own pods and Services: the API server filters them by label, so
    the handlers and indexes filter nothing, and pods of other workloads cost the operator nothing."""
    for resource in (PODS, SERVICES, NETWORK_POLICIES, WORKLOADS):
        settings.watching.label_selectors[resource] = OWNED_SELECTOR


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = from_environment()
    # The operator posts its own events for every transition; kopf's log lines would be noise.
    settings.posting.level = logging.WARNING
    # Watches end server-side every few minutes and resume from their resourceVersion, so a silently
    # broken connection is noticed; the client timeout is a backstop above the server's.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = config.api_connect_timeout_seconds
    # Initial listings in pages, as client-go's reflectors list (500 a page): kopf's default lists all at
    # once, and at a restart among 10,000 jobs the whole pod list, decoded, was most of the peak.
    settings.watching.chunk_size = LIST_PAGE
    watch_only_owned(settings)
    priority = config.peering_priority or peering.new_priority()
    set_peering(settings, config, priority)
    # The CRD exists before the operator starts (the chart installs it first): discover resources once
    # instead of watching CRDs and namespaces cluster-wide, which the least-privilege RBAC does not allow
    # (kopf would retry those 403s at every start, and a namespace-scoped operator has no cluster scope).
    settings.scanning.disabled = True
    # kopf keeps a task per watched object until it has been idle this long (default 5 s): in a burst of
    # 1000 jobs that is thousands of tasks at once. Our handlers return at once, so a short wait will do.
    settings.queueing.idle_timeout = 0.1
    # Kubernetes and GKE calls are synchronous and run in these threads: kopf's pool, which is also the
    # loop's default for the passes' run_in_executor (asyncio's own default has cpus + 4 threads: 6 on 2
    # cores, too few for passes that wait on the API server most of their time).
    settings.execution.max_workers = config.workers
    asyncio.get_running_loop().set_default_executor(settings.execution.executor)
    # A slow API server or a dead connection must not hang kopf's own requests (patches, peering, events).
    settings.networking.request_timeout = config.api_read_timeout_seconds
    settings.networking.connect_timeout = config.api_connect_timeout_seconds
    pools = policies = None
    if config.gke_configured:
        credentials = None
        if config.gke_endpoint:
            log.info("GKE at %s (TPUJOB_GKE_ENDPOINT): no Google credentials sent", config.gke_endpoint)
        else:
            # Only as the identity it was given, never its node's: without it the operator does not start.
            try:
                credentials = gke.checked_credentials(config.gke_identity)
            except gke.IdentityProblem as problem:
                log.error("%s", problem)
                raise kopf.PermanentError(str(problem)) from None
            log.info("GKE calls act as %s", config.gke_identity)
            if unsafe := gke_cluster.node_account_warning(config.cluster):
                log.warning("%s", unsafe)
        pools = gke.NodePools(
            config.cluster,
            gke.make_client(config.gke_endpoint, credentials),
            timeout=config.gke_timeout_seconds,
        )
        region = gke_cluster.region_of(config.cluster.location) or config.cluster.location
        policies = gke.WorkloadPolicies(
            config.cluster.project,
            region,
            config.gke_endpoint,
            timeout=config.gke_timeout_seconds,
            credentials=credentials,
        )
    else:
        log.warning("no GKE cluster configured (TPUJOB_GKE_*): only policy 'existing' jobs can run")
    # One budget for every request, served by priority: pods and Services, then status writes, then Events.
    limiter = RequestLimiter(config.api_qps, config.api_burst, on_wait=metrics.record_api_wait)
    # A connection for every thread that may call at once (passes, and each pass' concurrent creates): a
    # full pool discards connections, and every new one costs a TLS handshake.
    api = kube.Kube.login(
        max_connections=config.workers + CREATE_CONCURRENCY,
        limiter=limiter,
        timeout=(config.api_connect_timeout_seconds, config.api_read_timeout_seconds),
    )
    pass_settings = Settings.of(config)
    reconciler = Reconciler(config.cluster, api, pools, pass_settings, policies)
    if config.metrics_port:
        metrics.register(reconciler.recorder)  # its collectors read the jobs' records at scrape time
        if config.metrics_auth:
            metrics_auth.serve(config.metrics_port, api, cert_dir=config.metrics_cert_dir or None)
        else:
            start_http_server(config.metrics_port)
    if config.peering is not None:
        # Where the replicas meet; kopf's peering starts after the startup handlers, and needs it.
        api.create_peering(peering.peering_object(config.peering, config.namespace))
    metrics.OPERATOR_ACTIVE.set(1 if config.peering is None else 0)
    runtime = memo.runtime = Runtime(config, reconciler, peering.own_identity(), priority, api)
    if config.peering is not None:
        # Only the active replica writes or calls GKE, including a pass already running when it stands down.
        runtime.kopf_settings = settings
        api.write_only_while(lambda: runtime.active)
        for edge in (pools, policies):
            if edge is not None:
                edge.may_call = lambda: runtime.active


@kopf.on.startup()
async def start_loops(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    reconciler = runtime.reconciler
    pods = owned.OwnedCache(pod_view, partial(reconciler.unreadable, ("v1", "Pod")))
    services = owned.OwnedCache(lambda _body, _warn: True)
    workloads = None
    if runtime.config.kueue:
        workload_kind = (f"{c.KUEUE_GROUP}/v1beta2", "Workload")  # the Event names the object's own version
        workloads = owned.OwnedCache(workload_view, partial(reconciler.unreadable, workload_kind))
    policies = (
        owned.OwnedCache(lambda _body, _warn: True, key=owned.namespace_policy_key)
        if runtime.config.network_policy
        else None
    )
    # The jobs' map is filled by their watch (events.JobFeed).
    runtime.indexes = Indexes({}, pods, services, workloads, policies)

    def listed(changed: set[tuple[str, str]]) -> None:
        if runtime.owned_listed.is_set():  # listed again (410 Gone): the jobs whose objects changed
            for job in changed:
                request_pass(runtime, *job)
        elif pods.listed and services.listed and (policies is None or policies.listed):
            runtime.owned_listed.set()  # the first listings: the jobs' own listing asks the passes

    namespace = runtime.config.namespace
    runtime.tasks = [
        asyncio.create_task(lead_forever(runtime)),
        asyncio.create_task(sweep_forever(runtime)),
        asyncio.create_task(resync_forever(runtime)),
        asyncio.create_task(trim_heap_forever()),
        asyncio.create_task(owned.watch(settings, owned.JOB_RESOURCE, namespace, JobFeed(runtime))),
        asyncio.create_task(
            owned.watch_owned(
                settings,
                owned.POD_RESOURCE,
                namespace,
                pods,
                lambda *event: pod_changed(runtime, *event),
                listed,
            )
        ),
        asyncio.create_task(
            owned.watch_owned(settings, owned.SERVICE_RESOURCE, namespace, services, lambda *_: None, listed)
        ),
    ]
    if policies is not None:

        def policy_changed(event_type: str, _body: Any, key: tuple[str, str]) -> None:
            if event_type == "DELETED":  # deleted under running jobs: made again by their next passes
                namespace = key[0]
                reconciler.memory.policy_gone(namespace)
                for job in [job for job in runtime.indexes.jobs if job[0] == namespace]:
                    request_pass(runtime, *job)

        runtime.tasks.append(
            asyncio.create_task(
                owned.watch_owned(
                    settings, owned.NETWORK_POLICY_RESOURCE, namespace, policies, policy_changed, listed
                )
            )
        )
    if namespace is None:  # nodes are cluster-scoped: a namespaced operator cannot watch them
        nodes.watch_selector(settings)
        runtime.tasks.append(asyncio.create_task(nodes.watch_node_faults(runtime, settings)))
    if workloads is not None:
        observer = runtime.reconciler.observer

        def workloads_listed(changed: set[tuple[str, str]]) -> None:
            for job in changed:  # the first listing too: a pass holds queued jobs until it (queue.py)
                request_pass(runtime, *job)

        def workload_failed(problem: str) -> None:
            runtime.reconciler.watched.set_kueue_problem(problem)

        def estimate_source() -> list[tuple[str, list[Any]]]:
            """Every job with Workloads: its body as the watch has it, its Workloads (for the start estimates
            of queued jobs, read in the passes' threads: each map is copied at once, as the watches change
            them in the event loop)."""
            jobs = runtime.indexes.jobs
            for _ in range(3):
                try:
                    keys = list(workloads)
                    break
                except RuntimeError:  # changed while copied
                    continue
            else:
                return []
            found = []
            for key in keys:
                indexed, views = jobs.get(key), workloads.get(key)
                if indexed and views:
                    found.append((indexed[0].wire, views))
            return found

        observer.kueue.estimates.source = estimate_source

        async def workload_resource() -> Any:
            """The version Kueue serves, found anew at each start of the watch (Kueue installed, upgraded
            or removed since): the reads and writes of every pass speak it too."""
            served = await asyncio.to_thread(observer.kueue.served.discover)
            if served is None:
                raise LookupError(observer.kueue.served.problem)
            return owned.workload_resource(served.version)

        runtime.tasks.append(
            asyncio.create_task(
                owned.watch_owned(
                    settings,
                    workload_resource,
                    namespace,
                    workloads,
                    lambda _type, _body, job: request_pass(runtime, *job),
                    workloads_listed,
                    on_failure=workload_failed,
                )
            )
        )


@kopf.on.cleanup()
async def stop_loops(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    for task in [*runtime.tasks, *runtime.queue.shut_down(), *runtime.finalizers.cancel_all()]:
        task.cancel()
    # Waiting status writes and Events are sent, a little while (in a thread: they wait for tokens).
    await asyncio.get_running_loop().run_in_executor(None, runtime.reconciler.close, DRAIN_SECONDS)
