"""Bounded work per job: a large slice's host list kept once (a ConfigMap), pods rendered and created in
batches, and the cap on hosts per job (issue #39)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests import base_job
from tests.unit.test_reconciler import RecordingKube, existing_job_body, job_body, reconciler
from tpujob import kube
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api.status import Reason
from tpujob.api.validation import MAX_ARG_STRLEN, MAX_HOSTS_SETTING, host_list_bytes, size_problems
from tpujob.reconciler import Settings
from tpujob.reconciler.act_workers import CREATE_BATCH
from tpujob.render import Cluster, render_plan
from tpujob.render import plan as render
from tpujob.render.cluster import slice_shape

JAX = {"image": "example.com/jax-trainer:1"}


def job(tpu: dict[str, Any], name: str = "train", uid: str = "uid-1") -> Any:
    manifest = base_job(name, tpu=tpu, nodePool={"policy": "existing"}, trainer=JAX)
    manifest["metadata"]["uid"] = uid
    return parse_tpujob(manifest)


def env_entries(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize(
    ("tpu", "config_map"),
    [
        ({"type": "v5p", "topology": "4x4x4"}, False),  # 16 hosts: inline
        ({"type": "v5p", "topology": "4x4x8"}, True),  # 32 hosts
        ({"type": "tpu7x", "topology": "4x8x8"}, True),  # 64 hosts, with TPU_PROCESS_ADDRESSES
    ],
)
def test_a_large_slices_host_list_is_kept_once_and_read_by_reference(tpu, config_map) -> None:
    the_job = job(tpu)
    plan = render_plan(the_job, Cluster())
    maps = [r for r in plan.resources if r["kind"] == "ConfigMap"]
    pods = [r for r in plan.resources if r["kind"] == "Pod"]
    names = render.slice_hostnames(the_job, 0)
    expected = render.slice_host_env(the_job, names)
    if not config_map:
        assert maps == []
        assert {n: env_entries(pods[3])[n]["value"] for n in expected} == expected
        return
    (held,) = maps
    assert held["metadata"]["name"] == "train-s0-hosts"
    assert held["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # collected with the job
    assert held["data"] == expected
    for pod in pods:
        entries = env_entries(pod)
        for name in expected:
            assert entries[name] == {
                "name": name,
                "valueFrom": {"configMapKeyRef": {"name": "train-s0-hosts", "key": name}},
            }
        assert all(len(str(e.get("value", ""))) < 200 for e in entries.values())  # no host list inline
    # What the kubelet resolves is what the inline env carried before (the same worker id order).
    assert held["data"]["TPU_WORKER_HOSTNAMES"].split(",")[5] == "train-s0-w5.train"
    if tpu["type"] == "tpu7x":
        assert held["data"]["TPU_PROCESS_ADDRESSES"].split(",")[5] == "train-s0-w5.train:8471"
        assert env_entries(pods[0])["TPU_PROCESS_PORT"]["value"] == "8471"


def test_multislice_host_lists_are_one_config_map_per_slice() -> None:
    the_job = job({"type": "v5p", "topology": "4x4x8", "slices": 2})
    maps = render.hosts_config_maps(the_job)
    assert [m["metadata"]["name"] for m in maps] == ["train-s0-hosts", "train-s1-hosts"]
    assert maps[1]["data"]["TPU_WORKER_HOSTNAMES"].startswith("train-s1-w0.train,")


def test_the_rendered_tpu7x_16x24x24_job_is_small() -> None:
    """Issue #39's job: 2,304 pods. Each repeated the slice's 2,304 names twice (~90 KB); now a reference."""
    import json

    the_job = job({"type": "tpu7x", "topology": "16x24x24"})
    pod = render.pod(the_job, Cluster(), 0, 2303)
    assert len(json.dumps(pod)) < 4096
    (held,) = render.hosts_config_maps(the_job)
    assert len(held["data"]["TPU_WORKER_HOSTNAMES"].split(",")) == 2304
    assert sum(len(v) for v in held["data"].values()) < 1_000_000  # a ConfigMap holds at most 1 MiB


# --- the cap on hosts per job, and the host list an exec can take -----------------------------------------


@pytest.mark.parametrize(
    ("tpu", "cap", "problem"),
    [
        ({"type": "tpu7x", "topology": "16x24x24"}, 4096, None),
        ({"type": "tpu7x", "topology": "16x24x24"}, 2303, "is 2304 TPU hosts"),
        ({"type": "v5p", "topology": "4x4x8", "slices": 4}, 100, "4 slice(s) of v5p 4x4x8 is 128 TPU hosts"),
        ({"type": "v5e", "topology": "2x2"}, 1, None),
    ],
)
def test_a_job_above_the_cap_on_hosts_is_refused_naming_the_field_and_the_setting(tpu, cap, problem) -> None:
    found = size_problems(job(tpu), cap)
    if problem is None:
        assert found == []
        return
    (refused,) = found
    assert refused.path == "spec.tpu"
    assert problem in refused.message
    assert MAX_HOSTS_SETTING in refused.message
    assert "TPUJOB_MAX_HOSTS_PER_JOB" in refused.message and "operator.maxHostsPerJob" in refused.message


@pytest.mark.parametrize(
    ("tpu", "name"),
    [
        ({"type": "tpu7x", "topology": "16x24x24"}, "big"),
        ({"type": "v5p", "topology": "4x4x8", "slices": 3}, "a-job"),
        ({"type": "tpu7x", "topology": "4x8x8"}, "x" * 40),
        ({"type": "v4", "topology": "2x2x2"}, "small"),
    ],
)
def test_the_host_list_size_is_what_render_writes(tpu, name) -> None:
    the_job = job(tpu, name=name)
    hosts = slice_shape(the_job).hosts
    env = render.slice_host_env(the_job, render.slice_hostnames(the_job, the_job.spec.tpu.slices - 1))
    longest = max(len(f"{k}={v}") + 1 for k, v in env.items())  # with its NUL
    assert host_list_bytes(the_job, hosts) == longest


def test_a_host_list_longer_than_an_exec_takes_is_refused_naming_the_job_name() -> None:
    long_name = "a-rather-long-training-job-name-for-ironwood"
    the_job = job({"type": "tpu7x", "topology": "16x24x24"}, name=long_name)
    (refused,) = size_problems(the_job, 4096)
    assert refused.path == "metadata.name"
    assert str(MAX_ARG_STRLEN) in refused.message and "shorten the job's name" in refused.message
    assert size_problems(job({"type": "tpu7x", "topology": "16x24x24"}, name="big"), 4096) == []


def test_the_operator_refuses_a_job_above_its_cap_as_invalid_without_creating_anything() -> None:
    api = RecordingKube()
    manifest = base_job(
        tpu={"type": "v5p", "topology": "4x4x8"}, nodePool={"policy": "existing"}, trainer=JAX
    )
    passes = reconciler(None, api, Settings(max_hosts_per_job=16))
    passes.run(job_body(manifest), [], False)
    assert api.of("create_pod") == [] and api.of("create_config_map") == []
    ((_, status),) = api.of("patch_tpujob_status")
    assert status["status"]["phase"] == "Failed"
    assert (
        "32 TPU hosts" in status["status"]["message"]
        and "TPUJOB_MAX_HOSTS_PER_JOB" in status["status"]["message"]
    )


def test_tpujob_render_refuses_a_job_above_the_default_cap(tmp_path, capsys) -> None:
    import yaml

    from tpujob.cli import main

    manifest = base_job(
        tpu={"type": "tpu7x", "topology": "16x24x24", "slices": 2},
        nodePool={"policy": "existing"},
        trainer=JAX,
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["render", str(path)]) == 1
    assert "spec.tpu: 2 slice(s) of tpu7x 16x24x24 is 4608 TPU hosts" in capsys.readouterr().err


# --- creating in batches -----------------------------------------------------------------------------------


def large_body(topology: str = "8x8x8") -> dict[str, Any]:
    manifest = base_job(
        tpu={"type": "v5p", "topology": topology}, nodePool={"policy": "existing"}, trainer=JAX
    )
    return job_body(manifest)


def test_pods_are_created_in_batches_after_the_host_list_and_the_service_after_them() -> None:
    api = RecordingKube()
    batches: list[int] = []
    passes = reconciler(None, api)
    creates = passes.actions.workers.create_pods

    def recording(namespace: str, pods: list[dict[str, Any]]) -> None:
        batches.append(len(pods))
        creates(namespace, pods)

    passes.actions.workers.create_pods = recording  # type: ignore[method-assign]
    passes.run(large_body(), [], False)  # v5p 8x8x8: 128 hosts
    assert batches == [CREATE_BATCH, 128 - CREATE_BATCH]
    methods = [m for m, _, _ in api.calls if m.startswith("create_") and m != "create_event"]
    # The namespace's NetworkPolicy first (before any worker), then the host list before any pod that reads
    # it; the Service after every pod (its workers need it once they run: reconciler/behind.py).
    assert methods == ["create_network_policy", "create_config_map"] + ["create_pod"] * 128 + [
        "create_service"
    ]


def test_a_refused_batch_stops_the_creates_and_the_rest_wait_for_the_backoff() -> None:
    api = RecordingKube()
    refused = kube.ApiError(403, "Forbidden")
    refused.body = '{"message": "exceeded quota: pods"}'
    api.fail["create_pod"] = refused
    passes = reconciler(None, api)
    passes.run(large_body(), [], False)
    assert len(api.of("create_pod")) == CREATE_BATCH  # the first batch only
    assert passes.memory.pod_refusal("uid-1")[0] == "exceeded quota: pods"
    assert passes.memory.pods_in_flight("uid-1", []) == frozenset()  # none taken for created


def test_the_host_list_is_brought_up_to_date_when_the_jobs_own_differs() -> None:
    api = RecordingKube()
    the_job = parse_tpujob({**large_body(), "status": None})
    stale = render.hosts_config_map(the_job, 0)
    stale["data"] = {"TPU_WORKER_HOSTNAMES": "old"}
    api.config_maps["default", "train-s0-hosts"] = {
        **stale,
        "metadata": {**stale["metadata"], "resourceVersion": "7"},
    }
    reconciler(None, api).run(large_body(), [], False)
    ((name, patch),) = api.of("patch_config_map")
    assert name == "train-s0-hosts"
    assert patch["metadata"]["resourceVersion"] == "7"  # not over a write made meanwhile
    assert patch["data"] == render.hosts_config_map(the_job, 0)["data"]


def test_a_config_map_of_that_name_that_is_not_the_jobs_is_left_alone_and_said() -> None:
    api = RecordingKube()
    api.config_maps["default", "train-s0-hosts"] = {
        "metadata": {"name": "train-s0-hosts", "resourceVersion": "3"},
        "data": {"team": "settings"},
    }
    passes = reconciler(None, api)
    passes.run(large_body(), [], False)
    assert api.of("patch_config_map") == [] and api.of("create_pod") == []
    ((_, status),) = api.of("patch_tpujob_status")
    assert status["status"]["reason"] == Reason.POD_REJECTED
    assert "ConfigMap default/train-s0-hosts exists and is not this job's" in status["status"]["message"]


def test_a_small_job_makes_no_config_map() -> None:
    api = RecordingKube()
    reconciler(None, api).run(existing_job_body(), [], False)
    assert api.of("create_config_map") == []


def test_invalid_tpujob_from_size_problems_names_each_problem() -> None:
    problems = size_problems(job({"type": "tpu7x", "topology": "16x24x24"}), 8)
    assert str(InvalidTPUJob(problems)).startswith("spec.tpu: 1 slice(s) of tpu7x 16x24x24 is 2304 TPU hosts")
