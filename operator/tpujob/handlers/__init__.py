"""kopf glue: which events start a reconcile pass, and kopf's settings. No decisions live here.

Level-triggered, like Kubernetes' own controllers: every TPUJob event, every event of a pod the
operator owns, a requeue the last pass asked for, and a periodic resync all run the same pass for
the job (tpujob.reconciler), one at a time per job. The pass reads jobs, pods and Services from the
operator's own in-memory maps (indexes.py, owned.py), all fed by watches, so a pass that finds
nothing to do makes no API call.

kopf itself writes nothing to a TPUJob: no finalizer of its own (the pass adds ours before the first
node pool is requested; a job without pools has nothing to release), no last-handled-configuration
annotation (no handler reacts to spec diffs), and the resync is one loop over the index rather than a
kopf timer per job (a timer needs a finalizer and holds a task per job). Measured by
bench/operator_bench.py: a job's whole start costs its NetworkPolicy, its pods, its Service, one status write
and one event.

Modules by concern: startup (settings, clients, loops), workqueue (the jobs waiting for a pass, coalesced
per job as in client-go's work queue; one pass at a time per job, requeues), loops (resync, orphan sweep),
indexes (the jobs' map), owned (the pods' and Services' maps and their watches), events (what asks for a
pass), deletion (the finalizer), nodes (TPU nodes' hardware conditions from GKE's device plugin).
Importing this package registers every handler with kopf.
"""

from tpujob.handlers import deletion, events, indexes, loops, startup, workqueue

__all__ = ["deletion", "events", "indexes", "loops", "startup", "workqueue"]
