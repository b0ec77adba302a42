"""GKE's TPU device plugin's metrics as the simulated GKE serves them: the exposition's names, labels and
help texts (ai-on-gke/tpu-device-plugin pkg/metrics/prom_metrics.go), which containers hold chips, and the
runtime's answer from the pod's process on the test bed (busy, stopped, none)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.manifests import PLAIN_IMAGE
from tests.sandbox.helpers import tpu_nodes
from tpujob.api import constants as c
from tpujob_sandbox import wait_for
from tpujob_sandbox.gke import device_plugin as dp
from tpujob_sandbox.kubelet import tpuruntime

TRAINER_IMAGE = "us-docker.pkg.dev/project/repo/tpujob-trainer:0.1"
V5E = dp.TpuNode("gke-sandbox-pool-1", "4371783459163393063", "tpu-v5-lite-podslice", "2x2", 4)


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def tpu_pod(name: str, node: str, chips: int = 4, *, phase: str = "Running", ip: str = "10.4.0.3"):
    return {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {
            "containers": [
                {"name": "sidecar", "resources": {}},
                {"name": "trainer", "resources": {"limits": {c.TPU_RESOURCE: str(chips)}}},
            ]
        },
        "status": {
            "phase": phase,
            "podIP": ip,
            "containerStatuses": [
                {"name": "sidecar", "state": {"running": {}}},
                {"name": "trainer", "state": {"running": {}} if phase == "Running" else {"waiting": {}}},
            ],
        },
    }


# --- the exposition (no cluster) -----------------------------------------------------------------------


def test_idle_chips_show_host_series_at_zero_with_the_plugins_labels_and_help():
    metrics = dp.NodeMetrics(V5E)
    metrics.collect([], {})
    text = metrics.exposition().decode()
    found = samples(text)
    assert set(found) == {"tensorcore_utilization_node"}
    assert [labels for labels, _ in found["tensorcore_utilization_node"]] == [
        {"accelerator_id": f"4371783459163393063-{i}", "make": "cloud-tpu", "model": "tpu-v5-lite-podslice",
         "tpu_topology": "2x2"}
        for i in range(4)
    ]  # fmt: skip
    assert {value for _, value in found["tensorcore_utilization_node"]} == {0.0}
    assert "# HELP duty_cycle Percent of time when the TPU was actively processing" in text
    assert "# TYPE memory_used gauge" in text


def test_a_running_containers_runtime_answer_labels_its_chips_and_the_nodes():
    metrics = dp.NodeMetrics(V5E)
    (holder,) = dp.holders(V5E, [tpu_pod("train-s0-w0-a0", V5E.name)])
    assert holder == dp.Holder("ml", "train-s0-w0-a0", "trainer", (0, 1, 2, 3))
    metrics.collect([holder], {holder.key: dp.ChipActivity(duty_cycle=87.5, memory_bytes=8 * dp.GIB)})
    found = samples(metrics.exposition().decode())
    by_device = {labels["accelerator_id"]: (labels, v) for labels, v in found["duty_cycle"]}
    labels, value = by_device["4371783459163393063-2"]
    assert value == 87.5
    assert labels == {
        "accelerator_id": "4371783459163393063-2", "container": "trainer", "make": "cloud-tpu",
        "model": "tpu-v5-lite-podslice", "namespace": "ml", "pod": "train-s0-w0-a0", "tpu_topology": "2x2",
    }  # fmt: skip
    assert {v for _, v in found["memory_used"]} == {2 * dp.GIB}  # the program's memory over its 4 chips
    assert {v for _, v in found["memory_total"]} == {16 * dp.GIB}  # v5e: 16 GB of HBM per chip
    assert {v for _, v in found["tensorcore_utilization"]} == {87.5}
    assert {v for _, v in found["tensorcore_utilization_node"]} == {87.5}
    assert len(found["duty_cycle_node"]) == 4 and "pod" not in found["duty_cycle_node"][0][0]


def test_a_container_without_a_runtime_has_host_series_only_and_old_answers_go_after_six_collections():
    metrics = dp.NodeMetrics(V5E)
    (holder,) = dp.holders(V5E, [tpu_pod("w", V5E.name)])
    metrics.collect([holder], {holder.key: dp.ChipActivity(50.0, 0)})
    for collection in range(1, dp.STALE_COLLECTIONS + 1):
        metrics.collect([holder], {holder.key: None})  # the runtime stopped answering
        found = samples(metrics.exposition().decode())
        assert {v for _, v in found["tensorcore_utilization"]} == {0.0}  # no activity this period
        assert ("duty_cycle" in found) == (collection < dp.STALE_COLLECTIONS), collection


def test_only_running_containers_with_a_pod_ip_and_chips_hold_devices_in_order():
    pods = [
        tpu_pod("b", V5E.name, chips=1),
        tpu_pod("a", V5E.name, chips=2),
        tpu_pod("pending", V5E.name, phase="Pending"),
        tpu_pod("no-ip", V5E.name, ip=""),
    ]
    found = dp.holders(V5E, pods)
    assert [(h.pod, h.devices) for h in found] == [("a", (0, 1)), ("b", (2,))]


def test_instance_ids_are_19_digits_and_stable():
    assert dp.instance_id("node-a") == dp.instance_id("node-a") != dp.instance_id("node-b")
    assert len(dp.instance_id("node-a")) == 19 and dp.instance_id("node-a").isdigit()


def test_the_runtime_meter_reads_a_process_group_and_nothing_once_it_is_gone():
    meter = tpuruntime.RuntimeMeter()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        # Once the child has its own group (start_new_session) and its interpreter is loaded.
        reading = wait_for(
            lambda: (r := meter.read(("ns", "sleeper"), sleeper.pid)) and r.memory_bytes > 0 and r,
            timeout=10,
            what="the sleeper's process group to hold memory",
        )
        assert 0.0 <= reading.duty_cycle <= 100.0
    finally:
        sleeper.kill()
        sleeper.wait()
    assert meter.read(("ns", "sleeper"), sleeper.pid) is None


# --- on the test bed -----------------------------------------------------------------------------------


def scrape(gke, node: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    address = gke.device_plugin.endpoints()[node]
    with urllib.request.urlopen(f"http://{address}{dp.PATH}", timeout=5) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return samples(answer.read().decode())


def pod_manifest(name: str, node: str, image: str, **container) -> dict:
    chips = {c.TPU_RESOURCE: "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "resources": {"limits": chips, "requests": chips},
                    **container,
                }
            ],
        },
    }


def pod_state(core, namespace: str, name: str) -> tuple[str, list[object]]:
    """The pod's phase and its containers' states: why a pod holds no chips yet (Pending, ErrImagePull)."""
    status = core.read_namespaced_pod(name, namespace).status
    return status.phase, [s.state for s in status.container_statuses or []]


def of_pod(found, name: str, pod: str) -> list[float]:
    return [value for labels, value in found.get(name, []) if labels.get("pod") == pod]


@pytest.fixture
def node(gke, core) -> str:
    (name,) = tpu_nodes(gke, core, "plugin")
    wait_for(
        lambda: name in gke.device_plugin.endpoints(), timeout=30, what="the node's device plugin endpoint"
    )
    return name


def test_every_tpu_node_serves_the_plugins_metrics_until_it_goes(gke, core, node):
    found = scrape(gke, node)
    chips = found["tensorcore_utilization_node"]
    assert len(chips) == 4 and {v for _, v in chips} == {0.0}
    assert {labels["model"] for labels, _ in chips} == {"tpu-v5-lite-podslice"}
    assert {labels["tpu_topology"] for labels, _ in chips} == {"2x2"}
    gke.remove_all_pools()
    wait_for(lambda: node not in gke.device_plugin.endpoints(), timeout=30, what="the endpoint to go")


def test_a_busy_program_keeps_its_chips_busy_and_a_stopped_one_leaves_them_idle(
    gke, kubelet, core, namespace, node
):
    busy = "import time\nwhile True:\n    time.time()\n"
    core.create_namespaced_pod(
        namespace, pod_manifest("busy", node, TRAINER_IMAGE, command=["python", "-c", busy])
    )
    wait_for(
        lambda: (v := of_pod(scrape(gke, node), "duty_cycle", "busy")) and min(v) > 20,
        timeout=60,
        what="the busy program's chips to read a high duty cycle",
        last_state=lambda: (pod_state(core, namespace, "busy"), scrape(gke, node)),
    )
    found = scrape(gke, node)
    assert len(of_pod(found, "duty_cycle", "busy")) == 4
    assert min(of_pod(found, "tensorcore_utilization", "busy")) > 0
    assert of_pod(found, "memory_total", "busy") == [16 * dp.GIB] * 4
    assert min(of_pod(found, "memory_used", "busy")) > 0
    process = kubelet.process(namespace, "busy")
    os.killpg(process.pid, signal.SIGSTOP)  # a hang: the program holds its chips and does nothing
    try:
        wait_for(
            lambda: max(of_pod(scrape(gke, node), "duty_cycle", "busy")) < 1,
            timeout=30,
            what="the stopped program's chips to read a duty cycle near zero",
            last_state=lambda: of_pod(scrape(gke, node), "duty_cycle", "busy"),
        )
    finally:
        os.killpg(process.pid, signal.SIGCONT)


def test_a_pod_that_runs_no_program_has_no_runtime_series(gke, core, namespace, node):
    core.create_namespaced_pod(namespace, pod_manifest("plain", node, PLAIN_IMAGE))
    wait_for(
        lambda: of_pod(scrape(gke, node), "tensorcore_utilization", "plain") == [0.0] * 4,
        timeout=30,
        what="the plain pod's chips in the host series",
    )
    assert not of_pod(scrape(gke, node), "duty_cycle", "plain")


class _NodeStatusWrites:
    """The two node writes the plugin's condition checks make (a status patch; a read and UpdateStatus)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict]] = []
        self.replaced: list[tuple[str, list[str]]] = []

    def patch_node_status(self, name: str, body: dict) -> None:
        self.patches.append((name, body))

    def read_node(self, name: str):
        from kubernetes import client as k8s

        conditions = [k8s.V1NodeCondition(type=t, status="True") for t in ("Ready", dp.HANG_CONDITION)]
        return k8s.V1Node(status=k8s.V1NodeStatus(conditions=conditions))

    def replace_node_status(self, name: str, body) -> None:
        self.replaced.append((name, [cond.type for cond in body.status.conditions]))


def test_libtpu_hang_and_slice_error_become_node_conditions_renewed_then_expired():
    """updateNodeCondition: True with lastTransitionTime the first time, lastHeartbeatTime only after; no
    reason; the slice error's message is libtpu's. removeExpiredNodeCondition: gone 30 min (GKE time) after
    the last heartbeat. A pod whose libtpu reports nothing sets nothing."""
    writes = _NodeStatusWrites()
    plugin = dp.TpuDevicePlugin(writes, owner="true", time_scale=1.0)  # type: ignore[arg-type]
    plugin._update_conditions("node-a", {("ml", "quiet")})
    assert writes.patches == []
    plugin.report_megascale_hang("ml", "w0")
    plugin.report_slice_error("ml", "w1", "ICI link down")
    plugin._update_conditions("node-a", {("ml", "w0")})
    plugin._update_conditions("node-a", {("ml", "w0")})
    plugin._update_conditions("node-b", {("ml", "w1")})
    (first,), (second,), (other,) = (body["status"]["conditions"] for _, body in writes.patches)
    assert first["type"] == dp.HANG_CONDITION and first["status"] == "True" and first["message"] == ""
    assert "lastTransitionTime" in first and "reason" not in first
    assert "lastTransitionTime" not in second and second["lastHeartbeatTime"]
    assert (other["type"], other["message"]) == (dp.SLICE_ERROR_CONDITION, "ICI link down")
    plugin._heartbeats[("node-a", dp.HANG_CONDITION)] -= dp.CONDITION_EXPIRY_SECONDS + 1  # 30 min pass
    plugin._update_conditions("node-a", set())
    assert writes.replaced == [("node-a", ["Ready"])]
