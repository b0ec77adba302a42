"""The operator's verdict on every case of tests/apply_cases.py: the same field path, and the same words, as
the API server gives at `kubectl apply` (test_cel.py runs the CRD's CEL rules on the same cases)."""

from __future__ import annotations

import pytest

from tests.apply_cases import ACCEPTED, CASES, EXAMPLES_DIR, REFUSED, TRANSITIONS
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api import constants as c
from tpujob.api.status import TPUJobStatus
from tpujob.status.shape import as_admitted, shape_of


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_operator_gives_the_cases_verdict(case):
    if case.refused_at is None:
        parse_tpujob(case.manifest)
        return
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(case.manifest)
    problems = caught.value.problems
    assert {p.path for p in problems} == {case.refused_at}, [str(p) for p in problems]
    assert all(case.message_part in p.message for p in problems), [str(p) for p in problems]


def test_the_table_holds_every_example_and_enough_mistakes():
    examples = {case.name for case in ACCEPTED if case.name.startswith("example-")}
    assert examples == {f"example-{path.stem}" for path in EXAMPLES_DIR.glob("*.yaml")}
    assert len(REFUSED) >= 20
    assert len({case.name for case in CASES}) == len(CASES), "two cases with one name"
    assert all(case.message_part for case in REFUSED)


@pytest.mark.parametrize("case", TRANSITIONS, ids=[case.name for case in TRANSITIONS])
def test_the_operator_runs_a_job_as_admitted_and_names_each_refused_edit(case):
    """The operator's own check, for an API server without the transition rules (and for the queue label,
    which no CEL reads): the shape recorded when the job first held TPUs is the one it runs with."""
    old = parse_tpujob(case.old)
    phase = (case.old.get("status") or {}).get("phase")
    status = TPUJobStatus(phase=phase, admitted_shape=shape_of(old) if phase else None)
    new = parse_tpujob(case.new).model_copy(update={"status": status})
    admitted, problems = as_admitted(new)
    assert {p.path for p in problems} == ({case.refused_at} if case.refused_at else set()), problems
    assert all(case.message_part in p.message for p in problems)
    if case.refused_at:  # run as admitted: the old shape and queue, whatever the edit says
        assert (admitted.spec.tpu, admitted.spec.capacity, admitted.spec.node_pool) == (
            old.spec.tpu,
            old.spec.capacity,
            old.spec.node_pool,
        )
        queue = (old.metadata.labels or {}).get(c.LABEL_QUEUE_NAME)
        assert (admitted.metadata.labels or {}).get(c.LABEL_QUEUE_NAME) == queue
    else:
        assert admitted == new
