"""What a pass writes to a job's Kueue Workload, in order, and how it meets Kueue writing in between."""

from __future__ import annotations

from typing import Any

from tests.workloads import EXAMPLES, queued_example
from tpujob import kube
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.reconciler.act import Actions
from tpujob.reconciler.memory import JobMemory
from tpujob.render import Cluster

META = {"name": "train", "namespace": "ml", "uid": "u1", "resourceVersion": "5", "finalizers": []}


class WorkloadApi:
    """The Kube methods a Workload write calls, recorded; `conflict` makes the status patch answer 409."""

    def __init__(self, conflict: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.conflict = conflict
        self.version = 10

    def patch_tpujob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch_tpujob", patch))
        return {}

    def create_workload(self, namespace: str, version: str, body: dict[str, Any]) -> bool:
        assert body["apiVersion"] == f"kueue.x-k8s.io/{version}"
        self.calls.append(("create_workload", body["metadata"]["name"]))
        return True

    def patch_workload(
        self, namespace: str, version: str, name: str, patch: dict[str, Any], status: bool = False
    ) -> str:
        self.calls.append(("patch_workload/status" if status else "patch_workload", patch))
        if status and self.conflict:
            raise kube.ApiError(409, "Conflict")
        self.version += 1
        return str(self.version)

    def delete_workload(self, namespace: str, version: str, name: str) -> bool:
        self.calls.append(("delete_workload", name))
        return True

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:  # Actions' poster takes it
        return True


def write(api: WorkloadApi, writes: s.WorkloadWrites) -> bool:
    actions = Actions(api, None, JobMemory())  # type: ignore[arg-type]
    try:
        return actions.workload.write(META, queued_example(EXAMPLES[0]), writes, Cluster())
    finally:
        actions.close(1)


def test_a_new_workload_comes_after_the_jobs_finalizer():
    api = WorkloadApi()
    assert write(api, s.WorkloadWrites(create=True))
    assert [call for call, _ in api.calls] == ["patch_tpujob", "create_workload"]
    assert api.calls[0][1]["metadata"]["finalizers"] == [c.FINALIZER]


def test_conditions_then_the_finalizer_each_on_the_version_the_last_write_left():
    api = WorkloadApi()
    writes = s.WorkloadWrites(
        name="wl",
        resource_version="7",
        finalizers=(c.KUEUE_FINALIZER, "other"),
        conditions=[{"type": "Finished"}],
        release_finalizer=True,
    )
    assert write(api, writes)
    (status_call, status_patch), (meta_call, meta_patch) = api.calls
    assert status_call == "patch_workload/status" and status_patch["metadata"]["resourceVersion"] == "7"
    assert status_patch["status"] == {"conditions": [{"type": "Finished"}]}
    assert meta_call == "patch_workload" and meta_patch["metadata"] == {
        "resourceVersion": "11",
        "finalizers": ["other"],
    }


def test_clearing_the_admission_removes_it_in_the_same_write():
    api = WorkloadApi()
    assert write(api, s.WorkloadWrites(name="wl", resource_version="7", conditions=[], clear_admission=True))
    assert api.calls[0][1]["status"] == {"conditions": [], "admission": None}


def test_kueue_writing_in_between_is_a_conflict_the_next_pass_reads_again():
    api = WorkloadApi(conflict=True)
    writes = s.WorkloadWrites(name="wl", resource_version="7", conditions=[], release_finalizer=True)
    assert not write(api, writes)
    assert [call for call, _ in api.calls] == ["patch_workload/status"]  # nothing after the refused write


def test_a_replaced_workload_is_let_go_and_deleted():
    api = WorkloadApi()
    assert write(
        api, s.WorkloadWrites(name="wl", resource_version="7", finalizers=(c.KUEUE_FINALIZER,), delete=True)
    )
    assert [call for call, _ in api.calls] == ["patch_workload", "delete_workload"]
