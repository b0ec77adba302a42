"""kopf glue: which events start a reconcile pass, and kopf's settings. No decisions live here.

Level-triggered, like Kubernetes' own controllers: every TPUJob event, every event of a pod the
operator owns, a requeue the last pass asked for, and a periodic resync all run the same pass for
the job (tpujob.reconciler), one at a time per job. The pass reads jobs, pods and Services from the
operator's own in-memory maps (indexes.py, owned.py), all fed by watches, so a pass that finds
nothing to do makes no API call.

kopf runs the operator's life (login, startup and cleanup, peering) and its watch streams; it handles no
object itself. kopf's per-object machinery (a worker task, a cause, a patch and a logger per event, its
handler invocation) was most of the operator's CPU per job, for events that need a map updated and a key
queued: so the TPUJobs, like the pods and Services, are fed from kopf's watch stream into the operator's
own maps (events.JobFeed, owned.py), and our finalizer is the operator's own (deletion.py). kopf writes
nothing to a TPUJob. Measured by bench/operator_bench.py: a job's whole start costs its pods, its Service,
one status write and its Events.

Modules by concern: startup (settings, clients, loops), workqueue (the jobs waiting for a pass, coalesced
per job as in client-go's work queue; one pass at a time per job, requeues), loops (resync, orphan sweep),
indexes (the jobs' map), owned (the watches, and the pods' and Services' maps), events (the jobs' watch
feed, and what asks for a pass), deletion (the finalizer), nodes (TPU nodes' hardware conditions from GKE's
device plugin). Importing this package registers kopf's login, startup and cleanup handlers.
"""

from tpujob.handlers import deletion, events, indexes, loops, startup, workqueue

__all__ = ["deletion", "events", "indexes", "loops", "startup", "workqueue"]
