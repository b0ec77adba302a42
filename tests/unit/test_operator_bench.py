"""The operator benchmark's measurement and report code (bench/race_*.py), without a cluster: which pods
count for which job, which API requests count for which controller, who made them (the audit log), the
percentiles, the equivalent Job, the direct floor's objects, and the medians and spreads of the ratios."""

import datetime as dt
import json
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from tpujob.api import constants as c

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def race():
    sys.path.insert(0, str(BENCH))
    import race_measure
    import race_objects
    import race_report

    yield race_measure, race_objects, race_report
    sys.path.remove(str(BENCH))


@pytest.fixture
def measure(race):
    return race[0]


@pytest.fixture
def objects(race):
    return race[1]


@pytest.fixture
def report(race):
    return race[2]


def test_a_job_is_complete_when_all_its_pods_were_seen_at_the_last_ones_time(measure):
    watch = measure.PodWatch.__new__(measure.PodWatch)
    watch.first_seen, watch.job, watch.job_of = {}, {}, measure.owner_of
    watch._lock = threading.Lock()

    def pod(name, owner):
        return {"metadata": {"name": name, "ownerReferences": [{"name": owner}]}}

    watch.record(pod("a-0", "a"), 1.0)
    watch.record(pod("a-1", "a"), 2.5)
    watch.record(pod("a-1", "a"), 9.0)  # a later event of the same pod: first seen stays
    watch.record(pod("b-0", "b"), 3.0)
    watch.record({"metadata": {"name": "orphan"}}, 4.0)  # no owner: not a job's pod
    assert watch.complete_at(2) == {"a": 2.5}
    assert watch.complete_at(1) == {"a": 2.5, "b": 3.0}


def test_only_the_controllers_resources_count(measure):
    delta = Counter(
        {
            ("POST", "", "pods", ""): 4,
            ("PATCH", c.GROUP, c.PLURAL, "status"): 2,
            ("POST", "", "nodes", ""): 7,  # the simulated GKE
            ("PUT", "batch", "jobs", "status"): 3,
            ("GET", "", "events", ""): 0,
        }
    )
    assert measure.counted(delta, {(c.GROUP, c.PLURAL), ("", "pods")}) == {
        "POST core/pods": 4,
        f"PATCH {c.GROUP}/{c.PLURAL}/status": 2,
    }
    assert measure.counted(delta, {("batch", "jobs"), ("", "pods")}) == {
        "POST core/pods": 4,
        "PUT batch/jobs/status": 3,
    }


def audit_line(user, verb, received, stage="ResponseComplete"):
    return json.dumps(
        {"stage": stage, "verb": verb, "user": {"username": user}, "requestReceivedTimestamp": received}
    )


def test_the_audit_log_names_who_made_the_requests_in_the_window(measure):
    gc = "system:serviceaccount:kube-system:generic-garbage-collector"
    operator = "system:serviceaccount:tpujob-system:tpujob-operator"
    lines = [
        audit_line(operator, "get", "2026-11-24T17:00:00.500000Z"),  # before the window
        audit_line(operator, "get", "2026-11-24T17:00:01.000000Z"),
        audit_line(operator, "get", "2026-11-24T17:00:01.000000Z", stage="ResponseStarted"),
        audit_line(gc, "get", "2026-11-24T17:00:02.000000Z"),
        audit_line(gc, "get", "2026-11-24T17:00:03.000000Z"),
        audit_line("admin", "create", "2026-11-24T17:00:02.000000Z"),
        audit_line(gc, "get", "2026-11-24T17:00:09.000000Z"),  # after it
    ]
    start = dt.datetime(2026, 11, 24, 17, 0, 1, tzinfo=dt.UTC).timestamp()
    counts = measure.audit_counts(lines, start, start + 2)
    assert counts == {f"{gc} get": 2, "admin create": 1, f"{operator} get": 1}
    assert measure.others_in_audit(counts, {operator}) == 2


def test_percentiles_are_nearest_rank(measure):
    values = [float(v) for v in range(1, 101)]
    assert [measure.percentile(values, q) for q in (50, 90, 99)] == [50.0, 90.0, 99.0]
    assert measure.percentile([7.0], 99) == 7.0


def test_the_job_controller_gets_the_operators_own_pod(objects):
    job = objects.job_manifest("j1", "ns", ("v5p", "2x2x2"), objects.pods_per_job(("v5p", "2x2x2")))
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "tpujob-trainer:bench"
    assert container["resources"]["limits"][c.TPU_RESOURCE] == "4"
    assert c.LABEL_MANAGED_BY not in job["spec"]["template"]["metadata"]["labels"]


def test_the_direct_floor_creates_the_operators_service_and_pods_without_an_owner(objects):
    made = objects.direct_objects("j1", "ns", ("v5p", "2x2x2"))
    assert [body["kind"] for body in made] == ["Service", "Pod", "Pod"]  # the policy: once a namespace
    assert all("ownerReferences" not in body["metadata"] for body in made)
    assert {objects.direct_job_of(body) for body in made[1:]} == {"j1"}
    job = objects.job_manifest("j1", "ns", ("v5p", "2x2x2"), 2)
    assert (
        made[2]["spec"]["containers"][0]["image"] == job["spec"]["template"]["spec"]["containers"][0]["image"]
    )


def result(report, phase, repeat, p50, requests=5.0, n=100):
    return report.PhaseResult(
        n=n,
        phase=phase,
        qps=50,
        pods_per_job=2,
        complete=n,
        p50=p50,
        p90=p50,
        p99=p50 * 2,
        jobs_per_second=10.0,
        requests_per_job=requests,
        requests={},
        bench_creates_subtracted=n,
        objects_created_per_job=3,
        repeat=repeat,
        cpu_ms_per_job={"controller": 10.0, "kube-apiserver": 4.0},
    )


def test_ratios_pair_the_runs_of_one_repeat(report):
    runs = [
        result(report, "operator/existing", 0, 2.0),
        result(report, "job-controller", 0, 1.0),
        result(report, "operator/existing", 1, 3.0),
        result(report, "job-controller", 1, 2.0),
        result(report, "operator/existing", 2, 4.0),  # its Job-controller run is missing: no ratio
    ]
    assert report.ratios(runs, "operator/existing", "job-controller", lambda r: r.p50) == [2.0, 1.5]


def test_a_spread_is_the_median_and_the_range(report):
    assert report.spread([1.0, 3.0, 2.0]) == "2.00 (1.00-3.00)"
    assert report.spread([1.25]) == "1.25"
    assert report.spread([]) == "-"


def test_the_report_has_a_row_per_controller_and_a_ratio_against_each_base(report):
    runs = [
        result(report, phase, repeat, p50)
        for repeat in range(3)
        for phase, p50 in (("operator/existing", 2.0 + repeat), ("job-controller", 1.0), ("direct", 0.5))
    ]
    text = report.report(runs, "bench/operator_bench.py --repeats 3")
    assert "`bench/operator_bench.py --repeats 3`" in text
    assert "| 50 | 100 | operator/existing | 3 | 3.00 (2.00-4.00) |" in text
    assert "| 50 | 100 | operator/existing | job-controller | 3.00 (2.00-4.00) |" in text
    assert "| 50 | 100 | operator/existing | direct | 6.00 (4.00-8.00) |" in text
    assert "| 50 | 100 | job-controller | direct | 2.00 (2.00-2.00) |" in text
    assert "| 50 | 100 | job-controller | job-controller |" not in text
