"""One reconcile pass for one TPUJob: observe, decide (tpujob.status, pure), act, settle (pure), write.

Synchronous I/O (Kubernetes and GKE clients), run by the kopf handlers in worker threads, one
pass per job at a time. Idempotent: creating what exists and deleting what is gone are no-ops, so
a pass interrupted anywhere (even by SIGKILL) is completed by the next one.

- snapshot: what the watches and loops show a pass (its job, pods, Workloads, its nodes' notices and faults,
  the cluster), taken once at its start and passed as one argument: the only way facts reach a pass;
- kueue: what a pass reads of Kueue (the job's Workload, its flavors, its LocalQueue, its priority);
- start_estimates: a waiting job's ClusterQueue and the operator's jobs in it, for its start estimate;
- observe: what a pass sees: its snapshot, and what it reads itself (pools while they change);
- memory: what the watch has not shown yet (own status writes, creates) and GKE's recent refusals;
- act: the writes, to Kubernetes and GKE, in a decision's order; returns what happened; split by what they act
  on: act_pools (GKE's pools, each call counted in the metrics), act_workers (NetworkPolicy, host lists,
  pods, Service), act_workload (Kueue's Workload); the job's own writes and its chips stay in act;
- passes: the Reconciler, which runs a pass: observe, decide, act, settle, one write; parts: its parts, wired
  once, and what the kopf layer asks of them between passes (forget, stand by, refresh the cluster's facts);
- release: a deleted job's pools given back, and the sweep of pools whose job is gone;
- pod_views: a watched pod as the pure core reads it; tenancy: a namespace's chip counts across passes
  (read when observing, reserved when acting, released when settling: the gate is status/tenancy.py's);
- status_writer and poster: status writes and Events, sent off the pass's thread; behind: a job's Service,
  created after its pods, off the pass's thread too.
"""

from tpujob.reconciler.act import EVENT_COMPONENT, event_manifest
from tpujob.reconciler.act_workers import CREATE_CONCURRENCY
from tpujob.reconciler.kueue import workload_view
from tpujob.reconciler.observe import Settings
from tpujob.reconciler.passes import Outcome, Reconciler
from tpujob.reconciler.pod_views import pod_view

__all__ = [
    "CREATE_CONCURRENCY",
    "EVENT_COMPONENT",
    "Outcome",
    "Reconciler",
    "Settings",
    "event_manifest",
    "pod_view",
    "workload_view",
]
