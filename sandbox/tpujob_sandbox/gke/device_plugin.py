"""GKE's TPU device plugin's Prometheus endpoint: the per-chip utilization series of every TPU node.

What GKE runs (ai-on-gke/tpu-device-plugin, the plugin's source; its reference manifest
tpu-device-plugin-manifest.yaml): a DaemonSet `tpu-device-plugin` in kube-system, pods labelled
`k8s-app: tpu-device-plugin`, `hostNetwork: true`, on every TPU node, whose metrics server listens on port
2112, path /metrics (cmd/tpu/tpu.go: promPort 2112, promPath "/metrics"; the pod annotations
prometheus.io/port "2112", prometheus.io/path /metrics; the container declares no port). Ray reads the same
endpoint at http://<host IP>:2112/metrics (ray-project/ray reporter_agent.py, TPU_DEVICE_PLUGIN_ADDR).
Every 10 s (runtime- and host-metrics-collection-interval) the plugin (pkg/metrics/metrics.go,
collectMetrics):
- reads each chip's host metrics and sets `tensorcore_utilization_node{make, accelerator_id, model,
  tpu_topology}`; for every container that requests google.com/tpu, is running and has a pod IP, the same
  values with `namespace, pod, container` as `tensorcore_utilization` (host series are reset every minute);
- asks each such container's TPU runtime (libtpu's metric service on the pod's port 8431, gRPC) for duty
  cycle, HBM used and HBM total per device: `duty_cycle`, `memory_used`, `memory_total` with the
  container's labels, and the same without them as `*_node`. A container whose runtime does not answer has
  no such series; a container's runtime series go after 6 collections without an answer
  (CleanupStaleMetrics(lastActiveCIs, 6)).
Labels (pkg/metrics/prom_metrics.go): make "cloud-tpu", model = the node's
cloud.google.com/gke-tpu-accelerator, tpu_topology = its cloud.google.com/gke-tpu-topology, accelerator_id =
"<GCE instance id>-<device index>" (buildAccelID). Names, help texts and label sets are prom_metrics.go's;
a published v6e exposition shows them (ray-project/ray#57829).

What the test bed makes of it (README, "The simulated GKE"):
- one HTTP server per TPU node on 127.0.0.1 and a free port, path /metrics: the node's <InternalIP>:2112,
  which does not exist here (`endpoints()` maps node names to them);
- the containers holding chips are read from the API server, as the plugin's pod informer does; a pod's
  containers get the node's devices in order (GKE's allocator is the kubelet's, not modelled);
- the TPU runtime's answer comes from `runtime(namespace, pod)`, set by the test bed to the simulated
  kubelet's reading of the pod's local process (kubelet/tpuruntime.py: the share of the last collection
  period its process group was on a CPU, the stand-in for the TensorCores, and the memory it holds). A pod
  that runs no process has no runtime answering, as a real container without libtpu;
- the host metric `tensorcore_utilization` of a chip is the duty cycle its holder's runtime reported (one
  activity signal here; 0 on an idle chip); `memory_total` is the generation's HBM per chip;
- not served: `memory_bandwidth_utilization(_node)` (no signal for HBM bandwidth here), the runtime's
  megascale, gRPC and TCP series, `accelerator_request`.

Node conditions (pkg/metrics/metrics.go, collectMetrics -> updateNodeCondition, removeExpiredNodeCondition):
after each container's runtime answered, the plugin looks at two of libtpu's runtime metrics and patches its
node's status (a strategic merge patch of status.conditions, merged by type):
- `megascale.error.detected.gauge` with an entry whose attribute error_type is HANG_DETECTED and whose value
  is not 0 -> condition `MegascaleHangDetected`, status True, message "" (hangDetected);
- `slice.error.detected.gauge` with an entry carrying error_message, session_id, type and topology and a
  value not 0 -> `SliceErrorDetected`, True, the entry's error_message as message (sliceErrorDetected);
- the first time, lastHeartbeatTime and lastTransitionTime are now; while the signal stays, every collection
  renews lastHeartbeatTime only; 30 minutes after the last heartbeat (hangExpirePeriod,
  sliceErrorConditionExpirePeriod) the condition is removed. No `reason` is set.
libtpu's signals cannot happen here (no TPU runtime): a test says a pod's runtime reports one
(`report_megascale_hang`, `report_slice_error`), which then answers the plugin as libtpu would while the pod
runs.
"""

from __future__ import annotations

import hashlib
import http.server
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from tpujob.api import constants
from tpujob_sandbox.gke.nodes import SIMULATED_NODE_LABEL
from tpujob_sandbox.reads import get_json

log = logging.getLogger(__name__)

PORT = 2112  # what the real plugin listens on (cmd/tpu/tpu.go promPort)
PATH = "/metrics"  # cmd/tpu/tpu.go promPath
NAMESPACE = "kube-system"  # the DaemonSet's (tpu-device-plugin-manifest.yaml)
POD_LABELS = {"k8s-app": "tpu-device-plugin"}  # its pods' labels, which a PodMonitor selects
CONTAINER = "tpu-device-plugin"  # the container serving :2112 (the pod has sidecars too)
MAKE = "cloud-tpu"  # pkg/metrics/metrics.go `brand`
COLLECTION_SECONDS = 10.0  # runtime- and host-metrics-collection-interval (GKE time)
MIN_COLLECTION_REAL_SECONDS = 1.0  # at the tests' time scale, not faster than this
STALE_COLLECTIONS = 6  # CleanupStaleMetrics(lastActiveCIs, 6)
HANG_CONDITION = "MegascaleHangDetected"  # metrics.go hangConditionType
SLICE_ERROR_CONDITION = "SliceErrorDetected"  # metrics.go sliceErrorConditionType
CONDITION_EXPIRY_SECONDS = 30 * 60.0  # hangExpirePeriod, sliceErrorConditionExpirePeriod
# What promhttp (client_golang, the plugin's handler) answers a scraper that takes the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

CONTAINER_LABELS = ("namespace", "pod", "container")
CHIP_LABELS = ("make", "accelerator_id", "model", "tpu_topology")


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    per_container: bool  # labelled with the container holding the chip (else the node's series)


# pkg/metrics/prom_metrics.go: the families served here, with their help texts.
DUTY_CYCLE = Family("duty_cycle", "Percent of time when the TPU was actively processing", True)
MEMORY_USED = Family("memory_used", "Allocated TPU memory in bytes", True)
MEMORY_TOTAL = Family("memory_total", "Total memory available on the TPU in bytes", True)
TENSORCORE = Family("tensorcore_utilization", "Tensorcore percent utilization of the TPU device", True)
DUTY_CYCLE_NODE = Family("duty_cycle_node", DUTY_CYCLE.help, False)
MEMORY_USED_NODE = Family("memory_used_node", MEMORY_USED.help, False)
MEMORY_TOTAL_NODE = Family("memory_total_node", MEMORY_TOTAL.help, False)
TENSORCORE_NODE = Family(
    "tensorcore_utilization_node", "Tensorcore percent utilization of the TPU device per node", False
)
FAMILIES = (
    DUTY_CYCLE,
    DUTY_CYCLE_NODE,
    MEMORY_TOTAL,
    MEMORY_TOTAL_NODE,
    MEMORY_USED,
    MEMORY_USED_NODE,
    TENSORCORE,
    TENSORCORE_NODE,
)
METRIC_NAMES = frozenset(f.name for f in FAMILIES)

GIB = 1024**3
# HBM per chip, by the node's accelerator label: Cloud TPU's v4, v5e, v5p, v6e and TPU7x pages ("HBM
# capacity per chip": 32 GiB, 16 GB, 95 GB, 32 GB, 192 GB). What the runtime reports as total is a little
# less for some: tpu-info shows 31.25 GiB on v6e (Cloud TPU "Monitor with tpu-info CLI"), a TPU7x exposition
# 203465670656 bytes (openlit/openlit's golden sample of the plugin's output); those are used where known.
HBM_BYTES = {
    "tpu-v4-podslice": 32 * GIB,
    "tpu-v5-lite-podslice": 16 * GIB,
    "tpu-v5p-slice": 95 * GIB,
    "tpu-v6e-slice": int(31.25 * GIB),
    "tpu7x": 203465670656,
}


@dataclass(frozen=True)
class ChipActivity:
    """What a pod's TPU runtime reports: the share of the last period its chips were busy, in percent, and
    the device memory its program holds, over all its chips."""

    duty_cycle: float
    memory_bytes: int


# (namespace, pod) -> the pod's runtime's answer, None when nothing answers on its port 8431.
Runtime = Callable[[str, str], "ChipActivity | None"]


@dataclass(frozen=True)
class Holder:
    """A running container with chips of the node: (namespace, pod, container) and its device indices."""

    namespace: str
    pod: str
    container: str
    devices: tuple[int, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)


@dataclass(frozen=True)
class TpuNode:
    name: str
    instance_id: str  # the GCE instance id, a 19-digit number
    model: str
    topology: str
    chips: int

    @property
    def hbm_bytes(self) -> int:
        return HBM_BYTES.get(self.model, 16 * GIB)

    def accelerator_id(self, device: int) -> str:
        return f"{self.instance_id}-{device}"  # buildAccelID


def instance_id(node: str) -> str:
    """A stable stand-in for the node's GCE instance id (a 64-bit number, 19 digits as GKE shows them)."""
    return str(10**18 + int(hashlib.sha256(node.encode()).hexdigest()[:15], 16) % (9 * 10**18))


def tpu_node(node: dict[str, Any]) -> TpuNode | None:
    labels = node["metadata"].get("labels") or {}
    model = labels.get(constants.NODE_LABEL_ACCELERATOR)
    chips = int(((node.get("status") or {}).get("capacity") or {}).get(constants.TPU_RESOURCE, 0))
    if not model or not chips:
        return None
    name = node["metadata"]["name"]
    return TpuNode(name, instance_id(name), model, labels.get(constants.NODE_LABEL_TOPOLOGY, ""), chips)


def _tpu_request(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    asked = (resources.get("limits") or {}).get(constants.TPU_RESOURCE) or (
        resources.get("requests") or {}
    ).get(constants.TPU_RESOURCE)
    return int(asked or 0)


def holders(node: TpuNode, pods: list[dict[str, Any]]) -> list[Holder]:
    """The node's running containers that request google.com/tpu, in a pod with an IP (the plugin's
    ExtendedResourceTpuContainers with IsContainerRunning, and its PodIP check), each with the next of the
    node's devices."""
    found: list[Holder] = []
    next_device = 0
    for pod in sorted(pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
        status = pod.get("status") or {}
        running = {
            s["name"]
            for s in status.get("containerStatuses") or []
            if (s.get("state") or {}).get("running") is not None
        }
        for container in pod["spec"]["containers"]:
            chips = _tpu_request(container)
            if not chips or container["name"] not in running or not status.get("podIP"):
                continue
            devices = tuple(range(next_device, min(next_device + chips, node.chips)))
            next_device += chips
            if devices:
                meta = pod["metadata"]
                found.append(Holder(meta["namespace"], meta["name"], container["name"], devices))
    return found


@dataclass
class _Reported:
    """A container's last runtime answer and the collections since (for the 6-collection cleanup)."""

    holder: Holder
    activity: ChipActivity
    misses: int = 0


@dataclass
class NodeMetrics:
    """The plugin's state on one node: what it last collected, rendered on each scrape."""

    node: TpuNode
    holders: list[Holder] = field(default_factory=list)
    reported: dict[tuple[str, str, str], _Reported] = field(default_factory=dict)

    def collect(
        self, holders: list[Holder], answers: dict[tuple[str, str, str], ChipActivity | None]
    ) -> None:
        """One collection: the containers holding chips now, and what their runtimes answered (by key)."""
        self.holders = holders
        answered = set()
        for holder in holders:
            activity = answers.get(holder.key)
            if activity is not None:
                self.reported[holder.key] = _Reported(holder, activity)
                answered.add(holder.key)
        for key, reported in list(self.reported.items()):
            if key not in answered:
                reported.misses += 1
                if reported.misses >= STALE_COLLECTIONS:
                    del self.reported[key]

    def families(self) -> list[Metric]:
        node = self.node
        made = {
            f.name: GaugeMetricFamily(
                f.name,
                f.help,
                labels=sorted((*CONTAINER_LABELS, *CHIP_LABELS) if f.per_container else CHIP_LABELS),
            )
            for f in FAMILIES
        }

        def add(family: Family, holder: Holder | None, device: int, value: float) -> None:
            labels = {
                "make": MAKE,
                "accelerator_id": node.accelerator_id(device),
                "model": node.model,
                "tpu_topology": node.topology,
            }
            if holder is not None:
                labels.update(namespace=holder.namespace, pod=holder.pod, container=holder.container)
            made[family.name].add_metric([labels[name] for name in sorted(labels)], value)

        busy: dict[int, float] = {}  # a chip's TensorCore utilization: its holder's runtime's duty cycle
        for reported in self.reported.values():
            holder, activity = reported.holder, reported.activity
            per_chip = min(activity.memory_bytes // max(len(holder.devices), 1), node.hbm_bytes)
            for device in holder.devices:
                for family, value in (
                    (DUTY_CYCLE, activity.duty_cycle),
                    (MEMORY_USED, per_chip),
                    (MEMORY_TOTAL, node.hbm_bytes),
                ):
                    add(family, holder, device, value)
                add(DUTY_CYCLE_NODE, None, device, activity.duty_cycle)
                add(MEMORY_USED_NODE, None, device, per_chip)
                add(MEMORY_TOTAL_NODE, None, device, node.hbm_bytes)
                if reported.misses == 0:
                    busy[device] = activity.duty_cycle
        for device in range(node.chips):
            add(TENSORCORE_NODE, None, device, busy.get(device, 0.0))
        for holder in self.holders:
            for device in holder.devices:
                add(TENSORCORE, holder, device, busy.get(device, 0.0))
        return [made[f.name] for f in FAMILIES]

    def exposition(self) -> bytes:
        """The Prometheus text format, as the plugin's promhttp handler serves it."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(self.families()))
        return generate_latest(registry)


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class _Endpoint:
    """One node's metrics server: GET /metrics."""

    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics
        self.lock = threading.Lock()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != PATH:
                    self.send_error(404)
                    return
                with endpoint.lock:
                    body = endpoint.metrics.exposition()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class TpuDevicePlugin:
    """The device plugin of every TPU node this simulated GKE registers (SIMULATED_NODE_LABEL = `owner`):
    a collection every 10 s of GKE time (at least 1 s), a metrics server per node from when the node is
    seen until it is gone."""

    def __init__(self, core: k8s.CoreV1Api, *, owner: str, time_scale: float) -> None:
        self.core = core
        self.owner = owner
        self.interval = max(COLLECTION_SECONDS * time_scale, MIN_COLLECTION_REAL_SECONDS)
        # The TPU runtime of a pod, as the plugin reaches it on the pod's port 8431; set by the test bed (the
        # simulated kubelet measures the pod's process). Default: no runtime answers.
        self.runtime: Runtime = lambda namespace, pod: None
        # libtpu's error signals a test made a pod's runtime report: (namespace, pod) -> (condition, message).
        self._signals: dict[tuple[str, str], tuple[str, str]] = {}
        # Per node and condition: the last heartbeat written (monotonic seconds), for the 30-minute expiry.
        self._heartbeats: dict[tuple[str, str], float] = {}
        self._expiry = CONDITION_EXPIRY_SECONDS * time_scale
        self._endpoints: dict[str, _Endpoint] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="tpu-device-plugin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for endpoint in self._endpoints.values():
                endpoint.stop()
            self._endpoints.clear()

    def report_megascale_hang(self, namespace: str, pod: str) -> None:
        """The pod's libtpu reports a Megascale hang (megascale.error.detected.gauge, error_type
        HANG_DETECTED, value 1) from now on."""
        self._signals[(namespace, pod)] = (HANG_CONDITION, "")

    def report_slice_error(self, namespace: str, pod: str, message: str) -> None:
        """The pod's libtpu reports a slice error (slice.error.detected.gauge, error_message `message`)."""
        self._signals[(namespace, pod)] = (SLICE_ERROR_CONDITION, message)

    def endpoints(self) -> dict[str, str]:
        """Node name -> the address its plugin's /metrics is served on (in place of <node IP>:2112)."""
        with self._lock:
            return {name: endpoint.address for name, endpoint in self._endpoints.items()}

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.collect()
            except Exception:
                log.exception("tpu-device-plugin: a collection failed")
            self._stop.wait(self.interval)

    def collect(self) -> None:
        """One collection on every node (the plugin's ticker), starting and stopping node servers."""
        api = self.core.api_client
        selector = f"{SIMULATED_NODE_LABEL}={self.owner},{constants.NODE_LABEL_ACCELERATOR}"
        listed = get_json(api, "/api/v1/nodes", query={"labelSelector": selector})["items"]
        nodes = [tpu_node(n) for n in listed]
        present = {node.name: node for node in nodes if node is not None}
        pods_by_node: dict[str, list[dict[str, Any]]] = {}
        if present:
            running = get_json(api, "/api/v1/pods", query={"fieldSelector": "status.phase=Running"})["items"]
            for pod in running:
                node_name = pod["spec"].get("nodeName")
                if node_name in present:
                    pods_by_node.setdefault(node_name, []).append(pod)
        with self._lock:
            for name in set(self._endpoints) - set(present):
                self._endpoints.pop(name).stop()
            for name, node in present.items():
                if name not in self._endpoints:
                    self._endpoints[name] = _Endpoint(NodeMetrics(node))
        for name, node in present.items():
            found = holders(node, pods_by_node.get(name, []))
            endpoint = self._endpoints.get(name)
            if endpoint is None:
                continue
            by_pod: dict[tuple[str, str], ChipActivity | None] = {}
            for h in found:  # one runtime per pod (libtpu in its program), asked once per collection
                if (h.namespace, h.pod) not in by_pod:
                    by_pod[(h.namespace, h.pod)] = self.runtime(h.namespace, h.pod)
            answers = {h.key: by_pod[(h.namespace, h.pod)] for h in found}
            with endpoint.lock:
                endpoint.metrics.collect(found, answers)
            try:
                self._update_conditions(name, {(h.namespace, h.pod) for h in found})
            except ApiException as error:  # the node went, or a write raced: the next collection tries again
                log.warning("tpu-device-plugin: node %s conditions not updated: %s", name, error.reason)
        for key in list(self._signals):  # the pod is gone (or ended): its libtpu with it
            if not self._still_running(*key):
                self._signals.pop(key, None)

    def _still_running(self, namespace: str, pod: str) -> bool:
        """Asked of the pod itself, not of this collection's listing: a signal reported after the listing
        must not be dropped as if its pod had gone."""
        try:
            return bool(self.core.read_namespaced_pod(pod, namespace).status.phase == "Running")
        except ApiException as error:
            if error.status == 404:
                return False
            raise

    def _update_conditions(self, node: str, pods: set[tuple[str, str]]) -> None:
        """The plugin's node condition checks after a collection: set or renew a condition while a running
        TPU container's libtpu reports its signal, remove it 30 minutes after its last heartbeat."""
        now, wall = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        reported = {self._signals[key] for key in pods if key in self._signals}
        for condition, message in reported:
            fresh = (node, condition) not in self._heartbeats
            entry = {"type": condition, "status": "True", "lastHeartbeatTime": wall, "message": message}
            if fresh:
                entry["lastTransitionTime"] = wall
            self.core.patch_node_status(node, {"status": {"conditions": [entry]}})
            self._heartbeats[(node, condition)] = now
        for (where, condition), last in list(self._heartbeats.items()):
            if where == node and now - last > self._expiry:
                self._remove_condition(node, condition)
                del self._heartbeats[(where, condition)]

    def _remove_condition(self, node: str, condition: str) -> None:
        """removeExpiredNodeCondition: read the node, drop the condition, UpdateStatus."""
        body = self.core.read_node(node)
        body.status.conditions = [c for c in body.status.conditions or [] if c.type != condition]
        self.core.replace_node_status(node, body)
