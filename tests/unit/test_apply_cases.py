"""The operator's verdict on every case of tests/apply_cases.py: the same field path, and the same words, as
the API server gives at `kubectl apply` (test_cel.py runs the CRD's CEL rules on the same cases)."""

from __future__ import annotations

import pytest

from tests.apply_cases import ACCEPTED, CASES, EXAMPLES_DIR, REFUSED
from tpujob.api import InvalidTPUJob, parse_tpujob


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
