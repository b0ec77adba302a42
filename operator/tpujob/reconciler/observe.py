"""What a pass sees: the job, its pods (from the watch), its pools (from GKE, only while they change or a
worker fails or goes), the cluster as GetCluster described it, GKE's maintenance notices, and the
operator's memory of what the watch has not shown yet. Reads only; the result is a `status.Observed` for
the pure decision."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from tpujob import gke_cluster, kube, metrics
from tpujob import status as s
from tpujob.api import InvalidTPUJob, TPUJob
from tpujob.api import constants as c
from tpujob.api.spec import CapacityMode, NodePoolPolicy
from tpujob.api.status import Phase, Reason, TPUJobStatus
from tpujob.api.tenancy import TenancyPolicy
from tpujob.api.validation import DEFAULT_MAX_HOSTS_PER_JOB
from tpujob.config import OperatorConfig
from tpujob.gke import NodePools, WorkloadPolicies
from tpujob.gke_cluster import ClusterCheck
from tpujob.reconciler.kueue import KueueReader
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.snapshot import Snapshot, Watched
from tpujob.reconciler.tenancy import NamespaceChips
from tpujob.render import Cluster, naming
from tpujob.render import plan as render
from tpujob.render import pools as render_pools
from tpujob.status.placement import tpu7x_problem
from tpujob.status.recreation import workers_disrupted
from tpujob.trainer_metrics import ProgressReader

log = logging.getLogger(__name__)


def needs_gke_look(
    job: TPUJob, status: TPUJobStatus, pods: Sequence[s.PodView], in_flight: frozenset[str] = frozenset()
) -> bool:
    """Ask GKE only while pools change; a running job's pools are watched through its pods, and looked at
    when one of its workers fails or goes (GKE may be upgrading or repairing the slice)."""
    if job.spec.node_pool.policy != NodePoolPolicy.create:
        return False
    states = {p.state for p in status.node_pools}
    settled_running = (
        status.phase in (Phase.STARTING, Phase.RUNNING)
        and states <= s.POOL_READY_STATES
        and states
        and not workers_disturbed(status, pods, in_flight)
    )
    settled_gone = status.phase in (*s.TERMINAL_PHASES, Phase.SUSPENDED) and states <= {s.POOL_DELETED}
    return not (settled_running or settled_gone)


def workers_disturbed(status: TPUJobStatus, pods: Sequence[s.PodView], in_flight: frozenset[str]) -> bool:
    """A worker of the current attempt failed (for any reason), or the slice was disrupted: a worker being
    deleted (evicted by a drain), or gone since the status counted it (pods created but not yet seen by the
    watch are not gone)."""
    if any(p.phase == "Failed" for p in pods if s.is_current(status, p)):
        return True
    return workers_disrupted(status, status.workers, pods, in_flight)


def _disrupted_attempt_began(
    status: TPUJobStatus, pods: Sequence[s.PodView], in_flight: frozenset[str]
) -> dt.datetime | None:
    """When the attempt of a starting or running job whose slice was disrupted began: GKE's operations since
    then say whether an upgrade or a repair did it (status.recreation). None otherwise: a worker that failed
    on its own, its node intact, is the application's failure whatever GKE does, so the operations list (no
    filter, as long as GKE's history) is not read for it."""
    if status.phase not in (Phase.STARTING, Phase.RUNNING):
        return None
    if not workers_disrupted(status, status.workers, pods, in_flight):
        return None
    began = status.last_restart_time or status.start_time
    return s.parse_timestamp(began) if began else None


def needs_slice_created(job: TPUJob, pods: Sequence[s.PodView]) -> bool:
    """A flex-start job whose run deadline is not recorded yet, with workers of its attempt on nodes."""
    status = job.status or TPUJobStatus()
    if job.spec.capacity.mode != CapacityMode.flex_start or status.run_deadline is not None:
        return False
    return any(p.node and s.is_current(status, p) and not p.deleting for p in pods)


def running_worker_0(job: TPUJob, pods: Sequence[s.PodView]) -> s.PodView | None:
    """The pod whose trainer reports the job's step (slice 0, worker 0 of the current attempt), while every
    worker of the attempt may be running (the job is Starting or Running)."""
    status = job.status or TPUJobStatus()
    if status.phase not in (Phase.STARTING, Phase.RUNNING):
        return None
    for pod in pods:
        if (pod.slice, pod.worker) == (0, 0) and s.is_current(status, pod) and pod.phase == "Running":
            return None if pod.deleting else pod
    return None


@dataclasses.dataclass(frozen=True)
class Settings:
    """The operator's settings a pass takes (TPUJOB_RESTART_BACKOFF_SECONDS, ..._GRACE_SECONDS,
    ..._POLL_PROVISIONING_SECONDS, ...): each named as its OperatorConfig field, so `of` maps them without a
    line per setting; the defaults are status/model.py's, as config.py's are."""

    restart_backoff_seconds: float = s.DEFAULT_RESTART_BACKOFF_SECONDS
    unschedulable_grace_seconds: float = s.DEFAULT_UNSCHEDULABLE_GRACE_SECONDS
    startup_grace_seconds: float = s.DEFAULT_STARTUP_GRACE_SECONDS
    poll_provisioning_seconds: float = s.DEFAULT_POLL_PROVISIONING_SECONDS
    refused_backoff_seconds: float = s.REJECTED_BACKOFF_BASE_SECONDS
    progress_reads_per_second: float = s.DEFAULT_PROGRESS_READS_PER_SECOND
    # TPUJOB_MAX_HOSTS_PER_JOB: a larger job is refused at validation.
    max_hosts_per_job: int = DEFAULT_MAX_HOSTS_PER_JOB
    # Read each job from the API server before creating for it. A replica that stood by (peering) needs it:
    # its watch's cache may hold a job deleted meanwhile. A standalone operator's watch began with its
    # process, and the read would cost a token per job on the way to its pods.
    confirm_before_create: bool = True
    # TPUJOB_GKE_FLEX_START_ZONE_FALLBACK: a queued flex-start request may be moved to the next zone.
    flex_start_zone_fallback: bool = False
    # TPUJOB_KUEUE: jobs labelled kueue.x-k8s.io/queue-name are admitted through Kueue's Workloads.
    kueue: bool = False
    # TPUJOB_TENANCY_POLICY: what each namespace's jobs may do (api/tenancy.py).
    tenancy: TenancyPolicy = dataclasses.field(default_factory=TenancyPolicy)

    @classmethod
    def of(cls, config: OperatorConfig) -> Settings:
        """The operator's settings: each field from the OperatorConfig field of its name, and the three
        whose names differ."""
        same = {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(cls)
            if f.name in type(config).model_fields
        }
        same.update(
            confirm_before_create=config.peering is not None,
            flex_start_zone_fallback=config.gke_flex_start_zone_fallback,
            tenancy=config.tenancy,
        )
        return cls(**same)


def foreign_pool_errors(job: TPUJob, pools: tuple[s.PoolView, ...]) -> dict[int, s.GKEError]:
    """Slices whose pool name is held by a pool that is not the job's (Observer._as_owned): what the job
    waits for, permanently (the pool's owner must delete or rename it)."""
    return {
        view.slice: s.GKEError(
            Reason.POOL_REJECTED,
            f"node pool {view.name} exists and is not this job's (its {c.POOL_LABEL_JOB_UID} label is "
            f"{view.job_uid!r}, not {job.metadata.uid}); the operator neither uses nor deletes it: delete or "
            "rename that pool, or apply the job under another name",
            permanent=True,
        )
        for view in pools
        if view.state == s.POOL_MISSING and view.job_uid is not None and view.job_uid != job.metadata.uid
    }


class Observer:
    def __init__(
        self,
        cluster: Cluster,
        api: kube.Kube,
        pools: NodePools | None,
        memory: JobMemory,
        settings: Settings,
        policies: WorkloadPolicies | None = None,
        watched: Watched | None = None,
        chips: NamespaceChips | None = None,
    ) -> None:
        self.cluster = cluster
        self.api = api
        self.pools = pools
        self.policies = policies
        self.progress = ProgressReader(
            reads_per_second=settings.progress_reads_per_second, records=memory.records
        )
        self.memory = memory
        self.settings = settings
        # The cluster's facts, written here (check_cluster, refresh_maintenance) and by the watches; a pass
        # reads them only from its snapshot (reconciler/snapshot.py).
        self.watched = watched if watched is not None else Watched()
        self.maintenance_forbidden = False  # the nodes may not be listed (RBAC): not asked again
        self.kueue = KueueReader(api, settings.kueue, self.watched.set_kueue)
        # The namespaces' chip counts (reconciler/tenancy.py), read for the chip limit's gate.
        self.chips = chips if chips is not None else NamespaceChips(memory.records)

    def observe(self, job: TPUJob, snapshot: Snapshot, now: dt.datetime) -> s.Observed:
        """The facts of the pass: the snapshot's, and what the pass reads itself (GKE's pools while they
        change, a starting pod's Events, worker 0's progress, the nodes' creation)."""
        uid = job.metadata.uid or ""
        policy = self.settings.tenancy.for_namespace(job.metadata.namespace or "default")
        pods = self.volume_problems(job, snapshot.pods, now)
        creates_pools = job.spec.node_pool.policy == NodePoolPolicy.create
        in_flight = self.memory.pods_in_flight(uid, pods)
        looks = bool(self.pools) and needs_gke_look(job, job.status or TPUJobStatus(), pods, in_flight)
        refused = self.memory.refusals(uid)
        pods_refused, pods_refused_wait = self.memory.pod_refusal(uid)
        check = snapshot.cluster_check
        maintenance, faults = snapshot.maintenance, snapshot.node_faults
        observed = s.Observed(
            job=job,
            now=now,
            pods=tuple(pods),
            pools=self.pool_views(job, pods, in_flight) if looks else None,
            service_exists=self.memory.exists(uid, JobMemory.SERVICE, snapshot.service_exists),
            network_policy_exists=(
                not self.cluster.network_policy
                or self.memory.policy_exists(
                    job.metadata.namespace or "default", snapshot.network_policy_seen
                )
            ),
            pods_in_flight=in_flight,
            pods_refused=pods_refused,
            pods_refused_wait=pods_refused_wait,
            departed=snapshot.departed,
            restart_backoff_seconds=self.settings.restart_backoff_seconds,
            poll_provisioning_seconds=self.settings.poll_provisioning_seconds,
            unschedulable_grace_seconds=self.settings.unschedulable_grace_seconds,
            startup_grace_seconds=self.settings.startup_grace_seconds,
            flex_start_zone_fallback=self.settings.flex_start_zone_fallback,
            zones=tuple(render_pools.job_zones(job, self.cluster)) if creates_pools else (),
            maintenance={p.node: maintenance[p.node] for p in pods if p.node in maintenance},
            node_faults={p.node: faults[p.node] for p in pods if p.node in faults},
            nodes_deleted={
                r.node: snapshot.nodes_deleted[r.node]
                for r in (job.status.node_failures if job.status else ())
                if r.node in snapshot.nodes_deleted
            },
            cluster_version=check.version if check is not None else "",
            # Only while pools may be asked for, and not while a refusal backs off (a missing policy is
            # looked up again when its backoff ends; a found one is cached).
            workload_policy=self.workload_policy(job) if creates_pools and looks and not refused else None,
            queue=self.kueue.view(job, snapshot.workloads, snapshot.kueue, snapshot.kueue_problem, now),
            queue_required=policy.require_queue,
        )
        # A job Kueue admits is the queue's to count; one its namespace holds for a queue label is nobody's.
        unqueued = observed.queue is None and not observed.queue_required
        if unqueued and policy.max_chips is not None:  # the gate is the pure core's (status/tenancy.py)
            budget = s.chip_budget(job, pods, self.chips.counts(job, policy.max_chips))
            observed = dataclasses.replace(observed, chips=budget)
        if needs_slice_created(job, pods):
            observed = dataclasses.replace(observed, slice_created=self.slice_created(job))
        worker_0 = running_worker_0(job, pods)
        if worker_0 is not None and self.progress.due(uid, urgent=s.read_urgent(job, now)):
            sample, error = self.progress.read(worker_0)
            observed = dataclasses.replace(observed, progress=sample, progress_error=error)
        if creates_pools and (config := self.configuration_errors(job, check)):
            observed = dataclasses.replace(observed, gke_errors=config, pools=observed.pools or ())
        if refused:
            observed = dataclasses.replace(observed, gke_errors={**refused, **observed.gke_errors})
        if foreign := foreign_pool_errors(job, observed.pools or ()):
            observed = dataclasses.replace(observed, gke_errors={**observed.gke_errors, **foreign})
        return observed

    def volume_problems(
        self, job: TPUJob, pods: Sequence[s.PodView], now: dt.datetime
    ) -> Sequence[s.PodView]:
        """The first worker of a starting job still creating its container past the startup grace, with the
        kubelet's FailedMount or FailedAttachVolume Event (its latest) as its waiting reason and message:
        the container status says only ContainerCreating. One list of one pod's Events per pass at most."""
        status = job.status or TPUJobStatus()
        if status.phase not in (Phase.STARTING, Phase.RESTARTING):
            return pods
        grace = dt.timedelta(seconds=self.settings.startup_grace_seconds)
        creating = sorted(
            (
                p
                for p in pods
                if s.is_current(status, p)
                and p.phase == "Pending"
                and p.waiting_reason in ("ContainerCreating", "PodInitializing")
                and p.started_at
                and now - s.parse_timestamp(p.started_at) >= grace
            ),
            key=lambda p: (p.slice, p.worker),
        )
        if not creating:
            return pods
        first = creating[0]
        events = [
            e
            for e in self.api.list_pod_events(job.metadata.namespace, first.name)
            if e.get("reason") in s.VOLUME_START_PROBLEMS
        ]
        if not events:
            return pods
        # The volume's own words ("MountVolume.SetUp failed for volume ...") over the pod worker's summary
        # that follows them after its 2-minute wait ("Unable to attach or mount volumes: ...").
        events.sort(
            key=lambda e: (not (e.get("message") or "").startswith("Unable to"), e.get("lastTimestamp") or "")
        )
        latest = events[-1]
        told = dataclasses.replace(
            first,
            waiting_container="",
            waiting_reason=latest["reason"],
            waiting_message=latest.get("message") or "",
        )
        return [told if p is first else p for p in pods]

    def observe_invalid(
        self,
        body: dict[str, Any],
        status: TPUJobStatus,
        invalid: InvalidTPUJob,
        pods: Sequence[s.PodView],
        now: dt.datetime,
    ) -> s.InvalidObserved:
        return s.InvalidObserved(
            status=status,
            problems="; ".join(str(p) for p in invalid.problems),
            generation=body["metadata"].get("generation"),
            now=now,
            pods=tuple(pods),
        )

    def workload_policy(self, job: TPUJob) -> s.PolicyFact | None:
        """The workload policy that places the job's pools (tpu7x multi-host), as the Compute API has it."""
        name = job.spec.node_pool.workload_policy
        if name is None or self.policies is None:
            return None
        return self.policies.fact(name)

    def pool_views(
        self, job: TPUJob, pods: Sequence[s.PodView], in_flight: frozenset[str] = frozenset()
    ) -> tuple[s.PoolView, ...]:
        """Each slice's pool as GKE has it (one GetNodePool per slice; `pods`: the job's, to tell whether
        its slice was disrupted)."""
        assert self.pools is not None
        status = job.status or TPUJobStatus()
        recorded = {p.slice: p.operation or "" for p in status.node_pools}
        since = _disrupted_attempt_began(status, pods, in_flight)
        views = [
            self.pools.state(i, naming.node_pool_name(job, i), recorded.get(i, ""), since=since)
            for i in range(job.spec.tpu.slices)
        ]
        return tuple(self._as_owned(job, view) for view in views)

    @staticmethod
    def _as_owned(job: TPUJob, view: s.PoolView) -> s.PoolView:
        """A pool by the job's pool name whose job-uid label names another job (or none) is not the job's:
        neither used nor deleted, as if missing (its slice says why: foreign_pool_errors)."""
        if view.job_uid is None or view.state == s.POOL_MISSING or view.job_uid == job.metadata.uid:
            return view
        return s.PoolView(view.slice, view.name, s.POOL_MISSING, job_uid=view.job_uid)

    def render_cluster(self, check: ClusterCheck | None) -> Cluster:
        """The configured cluster as GetCluster (`check`, the pass' snapshot's) described it (Workload
        Identity on or off)."""
        if check is None or check.workload_identity == self.cluster.workload_identity:
            return self.cluster
        return dataclasses.replace(self.cluster, workload_identity=check.workload_identity)

    def configuration_errors(self, job: TPUJob, check: ClusterCheck | None) -> dict[int, s.GKEError]:
        """Every slice's error when the operator cannot make pools at all (no cluster, wrong settings)."""
        if self.pools is None:
            problem = "the operator has no GKE cluster configured (TPUJOB_GKE_PROJECT, _LOCATION, _CLUSTER)"
        elif check is not None and not check.ready:
            problem = check.problem
        else:
            return {}
        error = s.GKEError(Reason.GKE_CONFIG, problem, permanent=True)
        return dict.fromkeys(range(job.spec.tpu.slices), error)

    def check_cluster(self) -> ClusterCheck | None:
        """Read the configured cluster (GetCluster): a wrong project, location, cluster or zone shows in
        the status of every waiting job, and in the tpujob_gke_cluster_ready gauge."""
        if self.pools is None:
            return None
        check = gke_cluster.check_cluster(self.cluster, self.pools.client, self.pools.timeout)
        previous = self.watched.set_cluster_check(check)
        if not check.ready:
            log.error("GKE cluster not usable: %s", check.problem)
        elif previous is None or not previous.ready:
            log.info(
                "GKE cluster %s: version %s, release channel %s, Workload Identity %s",
                self.cluster.parent,
                check.version,
                check.release_channel,
                "on" if check.workload_identity else "off",
            )
            if granted := gke_cluster.host_network_warning(
                self.settings.tenancy, self.cluster, check.workload_identity
            ):
                log.warning("%s", granted)
            if too_old := tpu7x_problem(check.version):
                # Not the whole cluster's problem (other generations run): each tpu7x job says it too.
                log.warning("GKE cluster %s: %s", self.cluster.parent, too_old.message)
        if check.ready and (previous is None or previous.maintenance != check.maintenance):
            # Said again when it changes (an exclusion added or ended), at each sweep's GetCluster.
            log.info(
                "GKE cluster %s: %s; the operator's pools carry their own exclusion from node upgrades "
                "(exclusionUntilEndOfSupport); node auto-repair and host maintenance still restart a slice",
                self.cluster.parent,
                check.maintenance,
            )
        metrics.GKE_CLUSTER_READY.set(1 if check.ready else 0)
        return check

    def slice_created(self, job: TPUJob) -> dt.datetime | None:
        """When the job's pools' nodes were created, the earliest (one list of nodes by pool label); None
        when none is up yet, or without the permission (a namespace-scoped operator lists no nodes)."""
        names = [p.name for p in (job.status.node_pools if job.status else [])]
        if not names or self.maintenance_forbidden:
            return None
        try:
            nodes = self.api.list_nodes(f"{c.NODE_LABEL_NODEPOOL} in ({','.join(names)})")
        except kube.ApiError as error:
            if error.status != 403:
                raise
            return None
        created = [n["metadata"].get("creationTimestamp") or "" for n in nodes]
        return min((s.parse_timestamp(t) for t in created if t), default=None)

    def refresh_maintenance(self) -> None:
        """Read GKE's maintenance notices off the nodes (cluster-wide operators: nodes are cluster-scoped). A
        list every resync suffices: GKE announces TPU host maintenance about 7 days ahead. Without the
        permission (RBAC from an older chart) it says so once and stops asking."""
        if self.maintenance_forbidden:
            return
        try:
            nodes = self.api.list_nodes(render.MAINTENANCE_LABEL)
        except kube.ApiError as error:
            if error.status != 403:
                raise
            log.warning("no permission to list nodes: GKE maintenance notices are not acted on (%s)", error)
            self.maintenance_forbidden = True
            return
        notices = {}
        for node in nodes:
            value = (node["metadata"].get("labels") or {}).get(render.MAINTENANCE_LABEL, "")
            if value.isdigit():
                notices[node["metadata"]["name"]] = int(value)
        self.watched.set_maintenance(notices)
