"""The chart's Managed Service for Prometheus objects at work on the test bed: read back from the API server
(the CRDs' defaults applied), turned into scrape configurations as GMP's operator does (tests/chart/gmp.py),
and their targets discovered from the pods as GMP's collectors' Kubernetes discovery finds them.

Two of the pods do not run as processes here, so they are described as the cluster would have them:
- the operator's: the installed Deployment's pod template, owned by its ReplicaSet, Running, with the pod IP
  127.0.0.1 (the chart's operator runs as a local process listening on every address; tests/chart/
  test_install.py);
- GKE's TPU device plugin's: a pod of the DaemonSet tpu-device-plugin in kube-system on the job's node
  (labels and container as GKE's manifest; tpujob_sandbox/gke/device_plugin.py), on the host network: its
  IP is the node's InternalIP. The test bed serves that node's <InternalIP>:2112 at another address, so its
  scrape configuration gets one more relabeling, last, rewriting that address: the test bed's network,
  nothing of GMP's.
The trainer's pod is the real one, read from the API server.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tests.chart import gmp
from tpujob_sandbox import Sandbox

DEVICE_PLUGIN_PORT = 2112


class GmpCollection:
    def __init__(self, sandbox: Sandbox, namespace: str, collector_token: str, folder: Path) -> None:
        self.sandbox, self.namespace, self.folder = sandbox, namespace, folder
        self.discovered = folder / "kubernetes-pods.json"
        self.discovered.write_text("[]")
        self.collector_token = collector_token
        self.plugin_addresses: dict[str, str] = {}  # <node IP>:2112 -> where the test bed serves it

    def monitorings(self) -> list[dict[str, Any]]:
        """The release's PodMonitorings and ClusterPodMonitorings as the API server holds them."""
        custom = k8s.CustomObjectsApi(self.sandbox.api_client)
        selector = "app.kubernetes.io/managed-by=Helm,app.kubernetes.io/name=tpujob-operator"
        found = custom.list_cluster_custom_object(
            gmp.GROUP, gmp.VERSION, "podmonitorings", label_selector=selector
        )
        cluster = custom.list_cluster_custom_object(
            gmp.GROUP, gmp.VERSION, "clusterpodmonitorings", label_selector=selector
        )
        return [
            {**item, "kind": kind}
            for kind, items in (("PodMonitoring", found["items"]), ("ClusterPodMonitoring", cluster["items"]))
            for item in items
        ]

    def secret_file(self, namespace: str, name: str, key: str) -> Path:
        """A Secret's key in a file, read with the collector's own token (the chart's Role must grant it)."""
        configuration = k8s.Configuration()
        configuration.host = self.sandbox.api_client.configuration.host
        configuration.verify_ssl = False
        configuration.api_key = {"authorization": f"Bearer {self.collector_token}"}
        with k8s.ApiClient(configuration) as collector:
            secret = k8s.CoreV1Api(collector).read_namespaced_secret(name, namespace)
        path = self.folder / f"secret-{namespace}-{name}-{key}"
        path.write_text(base64.b64decode(secret.data[key]).decode())
        return path

    def scrape_configs(self) -> list[dict[str, Any]]:
        gke = self.sandbox.gke
        configs = []
        for monitoring in self.monitorings():
            for config in gmp.scrape_configs(
                monitoring, gke.project, gke.location, gke.cluster, self.secret_file
            ):
                config["file_sd_configs"] = [{"files": [str(self.discovered)], "refresh_interval": "1s"}]
                config["relabel_configs"] += [
                    {
                        "action": "replace",
                        "source_labels": ["__address__"],
                        "regex": address,
                        "target_label": "__address__",
                        "replacement": served,
                    }
                    for address, served in self.plugin_addresses.items()
                ]
                configs.append(config)
        return configs

    def discover(self, pods: list[dict[str, Any]]) -> None:
        """What Kubernetes discovery lists now: these pods' target candidates."""
        self.discovered.write_text(json.dumps([g for pod in pods for g in gmp.discovery_labels(pod)]))

    # --- the pods ------------------------------------------------------------------------------------------

    def operator_pod(self, deployment: k8s.V1Deployment) -> dict[str, Any]:
        template = self.sandbox.api_client.sanitize_for_serialization(deployment.spec.template)
        name = deployment.metadata.name
        return {
            "metadata": {
                "namespace": self.namespace,
                "name": f"{name}-5d9c7b8f6d-x2x7q",
                "labels": {**template["metadata"]["labels"], "pod-template-hash": "5d9c7b8f6d"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-5d9c7b8f6d", "controller": True}],
            },
            "spec": {**template["spec"], "nodeName": "operator-node"},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1"},
        }

    def device_plugin_pod(self, node: str, served_at: str) -> dict[str, Any]:
        """GKE's plugin pod on `node`; `served_at`: where the test bed serves its /metrics."""
        found = k8s.CoreV1Api(self.sandbox.api_client).read_node(node)
        (ip,) = [a.address for a in found.status.addresses if a.type == "InternalIP"]
        self.plugin_addresses[f"{ip}:{DEVICE_PLUGIN_PORT}"] = served_at
        return {
            "metadata": {
                "namespace": "kube-system",
                "name": "tpu-device-plugin-7xk2p",
                "labels": {"k8s-app": "tpu-device-plugin", "controller-revision-hash": "6b8f9d7c5"},
                "ownerReferences": [{"kind": "DaemonSet", "name": "tpu-device-plugin", "controller": True}],
            },
            "spec": {"nodeName": node, "hostNetwork": True, "containers": [{"name": "tpu-device-plugin"}]},
            "status": {"phase": "Running", "podIP": ip, "hostIP": ip},
        }
