"""The operator benchmark's measurement code (bench/operator_bench.py), without a cluster: which pods count
for which job, which API requests count for which controller, the percentiles, the equivalent Job."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

from tpujob.api import constants as c

BENCH = Path(__file__).resolve().parents[2] / "bench" / "operator_bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("operator_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["operator_bench"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("operator_bench", None)


def test_a_job_is_complete_when_all_its_pods_were_seen_at_the_last_ones_time(bench):
    watch = bench.PodWatch.__new__(bench.PodWatch)
    watch.first_seen, watch.job, watch.job_of = {}, {}, bench.owner_of
    watch._lock = __import__("threading").Lock()

    def pod(name, owner):
        return {"metadata": {"name": name, "ownerReferences": [{"name": owner}]}}

    watch.record(pod("a-0", "a"), 1.0)
    watch.record(pod("a-1", "a"), 2.5)
    watch.record(pod("a-1", "a"), 9.0)  # a later event of the same pod: first seen stays
    watch.record(pod("b-0", "b"), 3.0)
    watch.record({"metadata": {"name": "orphan"}}, 4.0)  # no owner: not a job's pod
    assert watch.complete_at(2) == {"a": 2.5}
    assert watch.complete_at(1) == {"a": 2.5, "b": 3.0}


def test_only_the_controllers_resources_count(bench):
    delta = Counter(
        {
            ("POST", "", "pods", ""): 4,
            ("PATCH", c.GROUP, c.PLURAL, "status"): 2,
            ("POST", "", "nodes", ""): 7,  # the simulated GKE
            ("PUT", "batch", "jobs", "status"): 3,
            ("GET", "", "events", ""): 0,
        }
    )
    assert bench.counted(delta, bench.OPERATOR_RESOURCES) == {
        "POST core/pods": 4,
        f"PATCH {c.GROUP}/{c.PLURAL}/status": 2,
    }
    assert bench.counted(delta, bench.JOB_CONTROLLER_RESOURCES) == {
        "POST core/pods": 4,
        "PUT batch/jobs/status": 3,
    }


def test_percentiles_are_nearest_rank(bench):
    values = [float(v) for v in range(1, 101)]
    assert [bench.percentile(values, q) for q in (50, 90, 99)] == [50.0, 90.0, 99.0]
    assert bench.percentile([7.0], 99) == 7.0


def test_the_job_controller_gets_the_operators_own_pod(bench):
    job = bench.job_manifest("j1", "ns", ("v5p", "2x2x2"), bench.pods_per_job(("v5p", "2x2x2")))
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "tpujob-trainer:bench"
    assert container["resources"]["limits"][c.TPU_RESOURCE] == "4"
    assert c.LABEL_MANAGED_BY not in job["spec"]["template"]["metadata"]["labels"]
