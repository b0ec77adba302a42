"""The Workload of every example, as Kueue's job integrations construct theirs (jobframework)."""

from __future__ import annotations

import hashlib

import pytest

from tests.workloads import EXAMPLES, example_workload, queued_example
from tpujob import tpu
from tpujob.api import constants as c
from tpujob.render.workload import PriorityFact, workload_name, workload_name_of


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_has_one_pod_set_per_slice_of_its_hosts(path):
    job = queued_example(path)
    rendered = example_workload(path)
    shape = tpu.resolve_slice(job.spec.tpu.type, job.spec.tpu.topology, job.spec.tpu.machine_type)
    pod_sets = rendered["spec"]["podSets"]
    assert [p["name"] for p in pod_sets] == [f"slice-{i}" for i in range(job.spec.tpu.slices)]
    for index, pod_set in enumerate(pod_sets):
        assert pod_set["count"] == shape.hosts
        spec = pod_set["template"]["spec"]
        (trainer,) = [x for x in spec["containers"] if x["name"] == c.TRAINER_CONTAINER]
        assert trainer["resources"]["requests"][c.TPU_RESOURCE] == str(shape.chips_per_host)
        assert spec["nodeSelector"][c.NODE_LABEL_ACCELERATOR] == shape.generation.accelerator
        assert spec["nodeSelector"][c.NODE_LABEL_TOPOLOGY] == shape.topology
        assert {"key": c.TPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert pod_set["template"]["metadata"]["labels"][c.LABEL_SLICE] == str(index)
    meta = rendered["metadata"]
    assert meta["labels"][c.LABEL_KUEUE_JOB_UID] == job.metadata.uid
    assert meta["finalizers"] == [c.KUEUE_FINALIZER]
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TPUJob", job.metadata.uid, True)
    assert rendered["spec"]["queueName"] == "team-a" and rendered["spec"]["priority"] == 0
    assert "priorityClassRef" not in rendered["spec"]


def test_the_name_is_kueues_for_the_jobs_kind_name_and_uid():
    """jobframework GetWorkloadNameForOwnerWithGVK: <kind>-<name>-<sha1(kind, group, name, uid)[:5]>."""
    expected = hashlib.sha1(b"TPUJob\ntpujob.dev\ntrain\nuid-1").hexdigest()[:5]
    assert workload_name_of("train", "uid-1") == f"tpujob-train-{expected}"
    assert len(workload_name_of("x" * 300, "uid-1")) == 253
    job = queued_example(EXAMPLES[0])
    assert workload_name(job) == workload_name_of(job.metadata.name, job.metadata.uid)


def test_a_priority_class_becomes_the_priority_and_its_ref():
    ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    rendered = example_workload(EXAMPLES[0], PriorityFact(1000, ref))
    assert rendered["spec"]["priority"] == 1000 and rendered["spec"]["priorityClassRef"] == ref
