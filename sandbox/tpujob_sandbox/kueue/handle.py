"""What a test gets from the `kueue` fixture: Kueue's API objects with unique names, deleted after the test,
and the simulated Kueue's configuration (waitForPodsReady), reset after the test."""

from __future__ import annotations

import secrets
from typing import Any

from kubernetes import client as k8s

from tpujob_sandbox.kueue.config import KueueConfig
from tpujob_sandbox.kueue.discovery import served_version
from tpujob_sandbox.kueue.objects import GROUP, Obj, find_condition
from tpujob_sandbox.kueue.simulator import KueueSimulator
from tpujob_sandbox.waiting import wait_for


class KueueHandle:
    def __init__(self, api_client: k8s.ApiClient, simulator: KueueSimulator, release: str) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        self.simulator = simulator
        self.release = release  # the Kueue release whose CRDs are installed (crds.RELEASES)
        version = served_version(api_client)
        assert version is not None, "the Kueue CRDs are installed before the handle is made"
        self.version = version  # the Workload API version they serve: the one every object here is in
        self._cluster_scoped: list[tuple[str, str]] = []  # (plural, name), deleted after the test

    # --- objects ------------------------------------------------------------------------------------------

    def _create_cluster(
        self, plural: str, kind: str, prefix: str, spec: Obj | None, extra: Obj | None = None
    ) -> str:
        name = f"{prefix}-{secrets.token_hex(3)}"
        body = {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": kind,
            "metadata": {"name": name},
            **(extra or {}),
        }
        if spec is not None:
            body["spec"] = spec
        self.custom.create_cluster_custom_object(GROUP, self.version, plural, body)
        self._cluster_scoped.append((plural, name))
        return name

    def resource_flavor(
        self,
        node_labels: dict[str, str] | None = None,
        node_taints: list[Obj] | None = None,
        tolerations: list[Obj] | None = None,
        prefix: str = "flavor",
        topology: str | None = None,
    ) -> str:
        """`topology`: a Topology's name (spec.topologyName): Kueue places its pod sets by topology domain."""
        spec: Obj = {}
        if topology:
            spec["topologyName"] = topology
        if node_labels:
            spec["nodeLabels"] = node_labels
        if node_taints:
            spec["nodeTaints"] = node_taints
        if tolerations:
            spec["tolerations"] = tolerations
        return self._create_cluster("resourceflavors", "ResourceFlavor", prefix, spec)

    def topology(self, levels: list[str], prefix: str = "topology") -> str:
        """A Topology (kueue.x-k8s.io, cluster-scoped) of these node labels, highest level first."""
        return self._create_cluster(
            "topologies", "Topology", prefix, {"levels": [{"nodeLabel": level} for level in levels]}
        )

    def cluster_queue(
        self,
        quotas: dict[str, dict[str, Any]],
        strategy: str = "BestEffortFIFO",
        preemption: str = "Never",
        stop_policy: str | None = None,
        prefix: str = "cq",
        admission_checks: list[str] | None = None,
    ) -> str:
        """One resource group over every resource named in `quotas` ({flavor: {resource: nominal quota}}),
        its flavors in the dict's order."""
        covered = list(dict.fromkeys(r for quota in quotas.values() for r in quota))
        flavors = [
            {"name": f, "resources": [{"name": r, "nominalQuota": str(quota.get(r, 0))} for r in covered]}
            for f, quota in quotas.items()
        ]
        spec: Obj = {
            "namespaceSelector": {},
            "queueingStrategy": strategy,
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
            "preemption": {"withinClusterQueue": preemption},
        }
        if stop_policy:
            spec["stopPolicy"] = stop_policy
        if admission_checks:
            # v1beta2 has only the strategy form (v1beta1's spec.admissionChecks list is gone).
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in admission_checks]}
        return self._create_cluster("clusterqueues", "ClusterQueue", prefix, spec)

    def provisioning_check(
        self, provisioning_class: str = "queued-provisioning.gke.io", backoff_limit: int | None = None
    ) -> str:
        """A ProvisioningRequestConfig and the AdmissionCheck that uses it (controllerName
        kueue.x-k8s.io/provisioning-request), as xpk's --flex and GKE's DWS guide set them up."""
        config: Obj = {"provisioningClassName": provisioning_class, "managedResources": ["google.com/tpu"]}
        if backoff_limit is not None:
            config["retryStrategy"] = {"backoffLimitCount": backoff_limit}
        name = self._create_cluster("provisioningrequestconfigs", "ProvisioningRequestConfig", "prc", config)
        return self._create_cluster(
            "admissionchecks",
            "AdmissionCheck",
            "dws-prov",
            {
                "controllerName": "kueue.x-k8s.io/provisioning-request",
                "parameters": {
                    "apiGroup": "kueue.x-k8s.io",
                    "kind": "ProvisioningRequestConfig",
                    "name": name,
                },
            },
        )

    def local_queue(
        self, namespace: str, cluster_queue: str, name: str = "queue", stop_policy: str | None = None
    ) -> str:
        """A LocalQueue in the test's namespace (deleted with it)."""
        spec: Obj = {"clusterQueue": cluster_queue}
        if stop_policy:
            spec["stopPolicy"] = stop_policy
        body = {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "LocalQueue",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(GROUP, self.version, namespace, "localqueues", body)
        return name

    def priority_class(self, value: int, description: str = "", prefix: str = "priority") -> str:
        extra = {"value": value, "description": description}
        return self._create_cluster("workloadpriorityclasses", "WorkloadPriorityClass", prefix, None, extra)

    def patch_cluster_queue(self, name: str, spec: Obj) -> None:
        self.custom.patch_cluster_custom_object(GROUP, self.version, "clusterqueues", name, {"spec": spec})

    # --- configuration --------------------------------------------------------------------------------

    def set_wait_for_pods_ready(
        self,
        timeout: float | None,
        backoff_base: float = 60,
        backoff_max: float = 3600,
        recovery_timeout: float | None = None,
        backoff_limit_count: int | None = None,
    ) -> None:
        """Kueue's waitForPodsReady for this test, in seconds (None: off); past `backoff_limit_count`
        requeues Kueue deactivates the Workload (requeuingStrategy.backoffLimitCount)."""
        self.simulator.configure(
            KueueConfig(
                pods_ready_timeout_seconds=timeout,
                recovery_timeout_seconds=recovery_timeout,
                backoff_base_seconds=backoff_base,
                backoff_max_seconds=backoff_max,
                backoff_limit_count=backoff_limit_count,
            )
        )

    # --- reading --------------------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> Obj:
        found: Obj = self.custom.get_namespaced_custom_object(
            GROUP, self.version, namespace, "workloads", name
        )
        return found

    def wait_condition(
        self,
        namespace: str,
        name: str,
        kind: str,
        status: str = "True",
        reason: str | None = None,
        timeout: float = 30,
    ) -> Obj:
        """The Workload's condition once it has that status (and reason)."""

        def found() -> Obj | None:
            condition = find_condition(self.workload(namespace, name), kind)
            if condition and condition.get("status") == status and reason in (None, condition.get("reason")):
                return condition
            return None

        return wait_for(
            found,
            timeout=timeout,
            what=f"{kind}={status} on Workload {namespace}/{name}",
            last_state=lambda: (self.workload(namespace, name).get("status") or {}).get("conditions"),
        )

    def cleanup(self) -> None:
        self.simulator.configure(KueueConfig())
        for plural, name in reversed(self._cluster_scoped):
            try:
                self.custom.delete_cluster_custom_object(GROUP, self.version, plural, name)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise
        self._cluster_scoped.clear()
