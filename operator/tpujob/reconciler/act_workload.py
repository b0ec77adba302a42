"""Kueue's part of a pass's acts: the job's Workload written as a Kueue job integration writes it (created,
its conditions, spec.active, its finalizer let go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpujob import kube
from tpujob import status as s
from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.render import Cluster
from tpujob.render import workload as render_workload


class WorkloadActions:
    def __init__(self, api: kube.Kube, ensure_finalizer: Callable[[dict[str, Any]], None]) -> None:
        self.api = api
        # The job's own finalizer, before its Workload (Actions.ensure_finalizer).
        self.ensure_finalizer = ensure_finalizer

    def write(self, meta: dict[str, Any], job: TPUJob, writes: s.WorkloadWrites, cluster: Cluster) -> bool:
        """The Workload's writes, in the order a Kueue integration makes them: created (after the job's own
        finalizer: a deletion must let it go), its conditions (and admission cleared), spec.active, then its
        finalizer released. False when Kueue wrote it in between (409): the next pass reads it again."""
        namespace = meta["namespace"]
        if writes.create:
            self.ensure_finalizer(meta)
            priority = writes.priority or render_workload.PriorityFact()
            body = render_workload.workload(job, cluster, priority, writes.api)
            self.api.create_workload(namespace, writes.api.version, body)
            return True
        version = writes.resource_version
        try:
            if writes.conditions is not None:
                status: dict[str, Any] = {"conditions": writes.conditions}
                if writes.clear_admission:
                    status["admission"] = None
                version = self.api.patch_workload(
                    namespace,
                    writes.api.version,
                    writes.name,
                    {"metadata": {"resourceVersion": version}, "status": status},
                    status=True,
                )
            if writes.active is not None:
                version = self.api.patch_workload(
                    namespace,
                    writes.api.version,
                    writes.name,
                    {"metadata": {"resourceVersion": version}, "spec": {"active": writes.active}},
                )
            if writes.release_finalizer or writes.delete:
                self.let_go(
                    namespace,
                    writes.api.version,
                    writes.name,
                    version,
                    writes.finalizers,
                    delete=writes.delete,
                )
        except kube.ApiError as error:
            if error.status == 409:
                return False
            if error.status == 404:  # gone meanwhile: the next pass creates the job's next one
                return True
            raise
        return True

    def let_go(
        self,
        namespace: str,
        api_version: str,
        name: str,
        version: str,
        finalizers: tuple[str, ...] | list[str],
        delete: bool,
    ) -> None:
        """Kueue's finalizer off the Workload (conditional on `version`), and the Workload deleted if asked:
        what a Kueue integration does once its job no longer needs it (jobframework RemoveFinalizer)."""
        kept = [f for f in finalizers if f != c.KUEUE_FINALIZER]
        if kept != list(finalizers):
            self.api.patch_workload(
                namespace, api_version, name, {"metadata": {"resourceVersion": version, "finalizers": kept}}
            )
        if delete:
            self.api.delete_workload(namespace, api_version, name)
