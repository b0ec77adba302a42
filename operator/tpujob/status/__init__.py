"""The operator's brain, pure: what it observed -> what to do and what the status says.

`decide()` takes a snapshot (the job, its last status, its pods, its node pools, the time) and
returns a Decision: pools to create or delete, pods to create or delete, the new status, events,
and when to look again. The handlers execute it. Being pure, every life-cycle rule is table-tested
without a cluster, and a crash between any two API calls converges: the next snapshot shows what
was done, and the same rules pick up from there.

A pass is: observe every fact -> `decide` once -> act (the executor) -> `settle` folds what acting met
(GKE's operations and refusals, deletes accepted, pods refused) into the status -> one write.

Parts: `model` (phases, reasons, views, Observed, Decision), `kueue_views` (what a pass knows of Kueue and
writes to its Workload), `lifecycle` (decide: the life cycle),
`pools` (node pools per slice), `pool_conditions` (GKE's pool condition codes and node-recreating
operations, read once), `recreation` (GKE upgrading or repairing a slice: NodeUpgrade, NodeRepair),
`placement` (what a pool needs before it is asked for), `capacity` (flex-start, maintenance, zone fallback),
`builder` (the decision under construction and the steps the others share), `invalid` (a spec the
operator cannot run), `settle` (the pass' answers, folded in), `tenancy` (a namespace's chip limit),
`verdict` (a new job's first pass, for `tpujob validate` and `render`), `queue` (Kueue's admission),
`shape` (a running job's fixed shape), `failures` (the failure policy), `recovery` (how narrow a restart),
`startup` (why workers have not started), `progress` (a trainer's step counter), `worker_numbers` (bounds on
what a worker reports), `goodput` and `cost` (time and chips accounted), `waiting` (since when a job waits),
`restart_history` (each restart's cause and time to recover), `provisioned` (a job admitted on capacity a
ProvisioningRequest made: no pool of its own), `tas` (Kueue's topology-aware assignment), `bad_nodes`
(failures that were a node's fault, counted per node; the nodes the job keeps off), `start_estimate` (when a
job waiting in a ClusterQueue should be admitted), `queue_position` (where a queued job stands, from Kueue's
visibility API).
"""

from tpujob.status.bad_nodes import affinity_avoids, newly_avoided
from tpujob.status.invalid import InvalidObserved, decide_invalid
from tpujob.status.lifecycle import decide
from tpujob.status.model import *  # noqa: F403  (the names every caller uses: s.PodView, s.REASON_...)
from tpujob.status.model import __all__ as _model_names
from tpujob.status.pool_conditions import (
    capacity_shortage,
    node_recreation,
    pool_error_reason,
    recreates_nodes,
)
from tpujob.status.progress import read_urgent
from tpujob.status.settle import FIRST_POLL_SECONDS, Applied, settle
from tpujob.status.shape import as_admitted
from tpujob.status.tenancy import ChipCounts, chip_budget, chips_counted, claims_admission, needs_admission

__all__ = [
    "FIRST_POLL_SECONDS",
    "Applied",
    "ChipCounts",
    "InvalidObserved",
    "affinity_avoids",
    "as_admitted",
    "capacity_shortage",
    "chip_budget",
    "chips_counted",
    "decide",
    "decide_invalid",
    "claims_admission",
    "needs_admission",
    "newly_avoided",
    "node_recreation",
    "pool_error_reason",
    "read_urgent",
    "recreates_nodes",
    "settle",
    *_model_names,
]
