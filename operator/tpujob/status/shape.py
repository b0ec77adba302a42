"""A running job's shape is fixed: what it holds (spec.tpu, spec.capacity, spec.nodePool) and the queue it was
admitted through (the label kueue.x-k8s.io/queue-name) are those it started with. Pure.

The CRD's transition rules refuse an edit of the three fields at `kubectl apply` once the job has left
Pending and Queued (api/crd.py). CEL cannot read labels, and an API server without the rules (or a status
written around them) takes any edit: so the operator records the shape in status.admittedShape when the job
first holds TPUs, and from then on every pass, the namespace's chip ledger and the pools follow the recorded
shape, never an edited one; the edit is named in status.shapeChangeRefused and a Warning Event. While the job
is Pending or Queued (Kueue evicted it: it holds nothing) the shape is the spec's, and recorded anew when it
starts again.
"""

from __future__ import annotations

import json

from tpujob.api import constants as c
from tpujob.api import messages as m
from tpujob.api.base import Problem
from tpujob.api.job import TPUJob
from tpujob.api.spec import CapacitySpec, NodePoolSpec, TPUSpec
from tpujob.api.status import Phase, TPUJobStatus

# The phases in which the shape may change: nothing of the job holds TPUs (None: no pass has written yet).
OPEN_PHASES = (None, Phase.PENDING, Phase.QUEUED)
# status.admittedShape's key for the queue label (the rest are the spec's own field names).
QUEUE = "queue"


def shape_of(job: TPUJob) -> str:
    """The job's shape as status.admittedShape records it: compact JSON, keys sorted (equal shapes, equal
    text)."""
    spec = job.spec
    shape = {
        "tpu": spec.tpu.to_wire(),
        "capacity": spec.capacity.to_wire(),
        "nodePool": spec.node_pool.to_wire(),
        QUEUE: (job.metadata.labels or {}).get(c.LABEL_QUEUE_NAME) or None,
    }
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


def is_open(status: TPUJobStatus | None) -> bool:
    return status is None or status.phase in OPEN_PHASES


def as_admitted(job: TPUJob) -> tuple[TPUJob, list[Problem]]:
    """The job as it was admitted, and each field an edit changed since (empty: none). A job without a
    recorded shape, or in an open phase, is as it is. A record that does not parse (written around the
    operator) is ignored: the spec is taken, as before any record."""
    status = job.status
    if is_open(status) or status is None or not status.admitted_shape:
        return job, []
    try:
        recorded = json.loads(status.admitted_shape)
        tpu = TPUSpec.model_validate(recorded["tpu"])
        capacity = CapacitySpec.model_validate(recorded["capacity"])
        node_pool = NodePoolSpec.model_validate(recorded["nodePool"])
        queue = recorded.get(QUEUE)
    except (ValueError, KeyError, TypeError):
        return job, []
    spec = job.spec
    problems = [
        Problem(f"spec.{path}", f"{m.SHAPE_FIXED} (admitted as {_wire(before)})")
        for path, before, now in (
            ("tpu", tpu, spec.tpu),
            ("capacity", capacity, spec.capacity),
            ("nodePool", node_pool, spec.node_pool),
        )
        if before != now
    ]
    labels = dict(job.metadata.labels or {})
    if (labels.get(c.LABEL_QUEUE_NAME) or None) != queue:
        was = f"LocalQueue {queue}" if queue else "no queue label"
        where = f"metadata.labels['{c.LABEL_QUEUE_NAME}']"
        problems.append(Problem(where, f"{m.SHAPE_FIXED} (admitted with {was})"))
        if queue:
            labels[c.LABEL_QUEUE_NAME] = queue
        else:
            labels.pop(c.LABEL_QUEUE_NAME, None)
    if not problems:
        return job, []
    admitted_spec = spec.model_copy(update={"tpu": tpu, "capacity": capacity, "node_pool": node_pool})
    metadata = job.metadata.model_copy(update={"labels": labels})
    return job.model_copy(update={"spec": admitted_spec, "metadata": metadata}), problems


def _wire(model: TPUSpec | CapacitySpec | NodePoolSpec) -> str:
    return json.dumps(model.to_wire(), sort_keys=True, separators=(", ", ": "))
