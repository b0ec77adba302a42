"""The simulated kubelet: pod phases on command, the trainer image as a local process, node preemption."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.manifests import PLAIN_IMAGE
from tests.sandbox.helpers import tpu_nodes
from tpujob.api import constants as c
from tpujob_sandbox import kubelet as kubelet_sim
from tpujob_sandbox import pid_alive, wait_for

TRAINER_IMAGE = "us-docker.pkg.dev/project/repo/tpujob-trainer:0.1"


def pod_manifest(name: str, node: str, image: str = PLAIN_IMAGE, restart_policy: str = "Never", **container):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kubelet-test"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": image, **container}],
        },
    }


def phase_of(core, namespace: str, name: str) -> str:
    return core.read_namespaced_pod(name, namespace).status.phase


def wait_phase(core, namespace: str, name: str, phase: str, timeout: float = 20):
    return wait_for(
        lambda: (pod := core.read_namespaced_pod(name, namespace)).status.phase == phase and pod,
        timeout=timeout,
        what=f"pod {name} to be {phase}",
        last_state=lambda: phase_of(core, namespace, name),
    )


def terminated(pod):
    return pod.status.container_statuses[0].state.terminated


@pytest.fixture
def node(gke, core) -> str:
    return tpu_nodes(gke, core, "kubelet")[0]


def test_a_bound_pod_runs_then_succeeds_or_fails_on_command(core, kubelet, namespace, node):
    for name in ("ok", "bad"):
        core.create_namespaced_pod(namespace, pod_manifest(name, node))
    running = wait_phase(core, namespace, "ok", "Running")
    # Loopback addresses (tpujob_sandbox.addresses): the operator connects to pod IPs; only loopback is here.
    assert running.status.pod_ip.startswith("127.") and running.status.host_ip.startswith("127.")
    assert {cond.type: cond.status for cond in running.status.conditions}["Ready"] == "True"
    wait_phase(core, namespace, "bad", "Running")

    assert kubelet.succeed(namespace, "ok").status.phase == "Succeeded"
    failed = kubelet.fail(namespace, "bad", exit_code=7, message="boom")
    assert failed.status.phase == "Failed"
    assert (terminated(failed).exit_code, terminated(failed).reason, terminated(failed).message) == (
        7,
        "Error",
        "boom",
    )


def test_a_node_whose_tpu_device_plugin_fails_rejects_pods_that_request_tpus_at_admission(
    core, kubelet, namespace, node
):
    kubelet.fail_tpu_allocation(node, "rpc error: code = Unavailable desc = connection refused")
    tpus = {"limits": {"google.com/tpu": "4"}, "requests": {"google.com/tpu": "4"}}
    core.create_namespaced_pod(namespace, pod_manifest("tpu", node, resources=tpus))
    core.create_namespaced_pod(namespace, pod_manifest("cpu", node))  # no device plugin resource: admitted
    rejected = wait_phase(core, namespace, "tpu", "Failed")
    assert (rejected.status.reason, rejected.status.message) == (
        "UnexpectedAdmissionError",
        "Pod was rejected: Allocate failed due to rpc error: code = Unavailable desc = connection refused, "
        "which is unexpected",
    )
    assert not rejected.status.container_statuses  # no container ever ran
    wait_phase(core, namespace, "cpu", "Running")
    kubelet.repair(node)
    core.create_namespaced_pod(namespace, pod_manifest("tpu-again", node, resources=tpus))
    wait_phase(core, namespace, "tpu-again", "Running")


def test_the_exit_code_annotation_ends_a_pod_as_a_user_would(core, namespace, node):
    core.create_namespaced_pod(namespace, pod_manifest("annotated", node))
    wait_phase(core, namespace, "annotated", "Running")
    body = {"metadata": {"annotations": {kubelet_sim.EXIT_CODE_ANNOTATION: "0"}}}
    core.patch_namespaced_pod("annotated", namespace, body)
    assert terminated(wait_phase(core, namespace, "annotated", "Succeeded")).reason == "Completed"


def test_restart_policy_always_restarts_the_container_in_the_same_pod(core, kubelet, namespace, node):
    core.create_namespaced_pod(namespace, pod_manifest("restarts", node, restart_policy="Always"))
    wait_phase(core, namespace, "restarts", "Running")
    pod = kubelet.fail(namespace, "restarts", exit_code=2)
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running"
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 2


def test_a_deleted_running_pod_is_removed_after_its_containers_stop(core, namespace, node):
    core.create_namespaced_pod(namespace, pod_manifest("deleted", node))
    wait_phase(core, namespace, "deleted", "Running")
    core.delete_namespaced_pod("deleted", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("deleted", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, timeout=20, what="the kubelet to finish the graceful deletion")


def test_the_trainer_image_runs_its_command_as_a_local_process_with_the_pod_env(
    core, kubelet, namespace, node
):
    script = (
        "import os, sys; "
        "print('worker', os.environ['TPU_WORKER_ID'], 'of', os.environ['POD_NAME'], os.environ['GREETING']); "
        "sys.exit(int(os.environ['EXIT_WITH']))"
    )
    env = [
        {"name": "TPU_WORKER_ID", "value": "3"},
        {"name": "EXIT_WITH", "value": "3"},
        {"name": "WHO", "value": "world"},
        {"name": "GREETING", "value": "hello $(WHO)"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    manifest = pod_manifest("trainer", node, TRAINER_IMAGE, command=["python", "-c"], args=[script], env=env)
    core.create_namespaced_pod(namespace, manifest)
    failed = wait_phase(core, namespace, "trainer", "Failed")
    assert terminated(failed).exit_code == 3
    assert kubelet.log_path(namespace, "trainer").read_text().strip() == "worker 3 of trainer hello world"


def test_deleting_a_trainer_pod_sends_sigterm_and_waits_for_the_process(
    core, kubelet, namespace, node, tmp_path
):
    marker = tmp_path / "saved-checkpoint"
    script = (
        "import pathlib, signal, sys, time\n"
        "def save(*_):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('saved')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    manifest = pod_manifest("graceful", node, TRAINER_IMAGE, command=[sys.executable, "-c", script])
    core.create_namespaced_pod(namespace, manifest)
    wait_phase(core, namespace, "graceful", "Running")
    log = kubelet.log_path(namespace, "graceful")
    wait_for(
        lambda: log.exists() and "ready" in log.read_text(),
        timeout=20,
        what="the trainer to install its handler",
    )
    process = kubelet.process(namespace, "graceful")
    core.delete_namespaced_pod("graceful", namespace)

    wait_for(lambda: not pid_alive(process.pid), timeout=20, what="the process to exit on SIGTERM")
    assert marker.read_text() == "saved"


def test_preempting_a_node_fails_its_pods_as_a_node_shutdown_does_and_removes_the_node(
    core, kubelet, namespace, node
):
    script = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); time.sleep(600)"
    )
    core.create_namespaced_pod(namespace, pod_manifest("plain", node))
    core.create_namespaced_pod(
        namespace, pod_manifest("local", node, TRAINER_IMAGE, command=["python", "-c", script])
    )
    for name in ("plain", "local"):
        wait_phase(core, namespace, name, "Running")
    process = kubelet.process(namespace, "local")
    seen = NodeWatch(core, node).start()

    kubelet.preempt_node(node)

    for name in ("plain", "local"):
        pod = core.read_namespaced_pod(name, namespace)
        assert pod.status.phase == "Failed"
        assert (pod.status.reason, pod.status.message) == ("Terminated", kubelet_sim.SHUTDOWN_MESSAGE)
        assert terminated(pod).exit_code == c.EXIT_CODE_PREEMPTED
        disruption = [cond for cond in pod.status.conditions if cond.type == "DisruptionTarget"]
        assert disruption and disruption[0].reason == "TerminationByKubelet"
    assert not pid_alive(process.pid)
    assert node not in [n.metadata.name for n in core.list_node().items]
    # Before its pods failed, the node went NotReady and unschedulable: no replacement lands on it.
    states = seen.wait_deleted()
    assert ("False", True) in states[:-1] and states[-1] == "DELETED"


class NodeWatch:
    """The node's (Ready status, not-ready taint) at each watch event, then DELETED."""

    def __init__(self, core: k8s.CoreV1Api, node: str) -> None:
        self.core, self.node = core, node
        self.states: list[Any] = []
        self.opened = threading.Event()
        self.done = threading.Event()

    def start(self) -> NodeWatch:
        threading.Thread(target=self._run, daemon=True).start()
        assert self.opened.wait(timeout=30), "the node watch did not open"
        return self

    def _run(self) -> None:
        selector = f"metadata.name={self.node}"
        for event in watch.Watch().stream(self.core.list_node, field_selector=selector, timeout_seconds=60):
            if event["type"] == "DELETED":
                self.states.append("DELETED")
                break
            node = event["object"]
            ready = next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)
            tainted = any(t.key == kubelet_sim.NOT_READY_TAINT for t in node.spec.taints or [])
            self.states.append((ready, tainted))
            self.opened.set()  # the first event is the node as it is now
        self.done.set()

    def wait_deleted(self) -> list[Any]:
        assert self.done.wait(timeout=60), f"no DELETED event for {self.node}"
        return self.states


@pytest.mark.parametrize(
    ("image", "trainer"),
    [
        ("tpujob-trainer:test", True),
        ("us-docker.pkg.dev/p/r/tpujob-trainer@sha256:abc", True),
        ("localhost:5000/tpujob-trainer-tf:1", True),
        ("us-docker.pkg.dev/tpujob-trainer/other:1", False),
        ("busybox", False),
    ],
)
def test_trainer_images_are_recognised_by_their_repository_name(image, trainer):
    assert kubelet_sim.is_trainer_image(image, kubelet_sim.DEFAULT_TRAINER_IMAGES) is trainer


def test_without_a_command_the_trainer_image_entrypoint_runs_with_the_args():
    container = {"name": "t", "image": "tpujob-trainer:1", "args": ["--steps", "$(STEPS)"]}
    argv = kubelet_sim.container_argv(
        container, {"STEPS": "5"}, "/venv/python", ("python", "-m", "tpujob_trainer")
    )
    assert argv == ["/venv/python", "-m", "tpujob_trainer", "--steps", "5"]


def test_preempting_a_slice_fails_every_host_and_gke_brings_the_nodes_back(sandbox, gke, core, namespace):
    nodes = tpu_nodes(gke, core, "slice", count=2)
    for index, node in enumerate(nodes):
        core.create_namespaced_pod(namespace, pod_manifest(f"w{index}", node))
        wait_phase(core, namespace, f"w{index}", "Running")

    assert sandbox.preempt_slice("slice", recreate_after=0.5) == nodes

    assert {phase_of(core, namespace, f"w{i}") for i in range(2)} == {"Failed"}

    def back_and_schedulable() -> bool:
        back = [n for n in core.list_node().items if n.metadata.name in nodes]
        untainted = all(t.key != kubelet_sim.NOT_READY_TAINT for n in back for t in n.spec.taints or [])
        return sorted(n.metadata.name for n in back) == nodes and untainted

    # Registration creates each node tainted not-ready and lifts the taint once it is Ready.
    wait_for(back_and_schedulable, timeout=20, what="GKE to recreate the slice's nodes, Ready")


def test_trainer_pods_on_one_host_each_serve_metrics_on_the_declared_port_of_their_own_ip(
    core, kubelet, namespace, node, tmp_path
):
    """Every worker pod declares the same metrics port; here all pods share the host's network, so each binds
    it on its own loopback IP (its status.podIP), where the operator reads it as in a cluster."""
    script = (
        "import os, pathlib, socket, sys, time\n"
        "address, port = os.environ['TPUJOB_METRICS_ADDRESS'], os.environ['TPUJOB_METRICS_PORT']\n"
        "s = socket.socket(); s.bind((address, int(port))); s.listen()\n"
        f"pathlib.Path({str(tmp_path)!r}, os.environ['HOSTNAME']).write_text(f'{{address}}:{{port}}')\n"
        "time.sleep(600)\n"
    )
    env = [{"name": "TPUJOB_METRICS_PORT", "value": "9090"}]
    for name in ("w0", "w1"):
        core.create_namespaced_pod(
            namespace, pod_manifest(name, node, TRAINER_IMAGE, command=["python", "-c", script], env=env)
        )
    bound = wait_for(
        lambda: len(files := list(tmp_path.iterdir())) == 2 and files, timeout=30, what="both to bind"
    )
    served = {path.name: path.read_text() for path in bound}
    assert len(set(served.values())) == 2 and all(v.endswith(":9090") for v in served.values())
    for name, where in served.items():
        pod_ip = core.read_namespaced_pod(name, namespace).status.pod_ip
        assert where == f"{pod_ip}:9090" and pod_ip.startswith("127.")
    assert all(phase_of(core, namespace, name) == "Running" for name in ("w0", "w1"))


@pytest.mark.parametrize(
    ("asked", "priority_class", "granted"),
    [
        (120, None, 15.0),
        (30, None, 15.0),
        (5, None, 5.0),
        (None, None, 15.0),
        (120, "system-node-critical", 15.0),
    ],
    ids=["long-grace-capped", "default-grace-capped", "shorter-kept", "unset", "system-pod"],
)
def test_node_shutdown_gives_non_system_pods_15_seconds_whatever_they_ask(
    sandbox, asked, priority_class, granted
):
    """GKE's spot reclaim: 30 s for the node, the last 15 s kept for system pods."""
    pod = pod_manifest("p", "node")
    pod["spec"]["terminationGracePeriodSeconds"] = asked
    if priority_class:
        pod["spec"]["priorityClassName"] = priority_class
    assert sandbox.kubelet.pod_shutdown_grace_seconds(pod) == granted


# --- termination messages, as a kubelet reports them --------------------------------------------------


def test_a_local_process_gets_a_termination_log_whose_content_becomes_the_message(
    core, kubelet, namespace, node
):
    script = (
        "import os, sys; "
        "open(os.environ['TPUJOB_TERMINATION_LOG'], 'w').write('ConfigError: --steps: bad'); "
        "print('noise on stdout'); sys.exit(int(sys.argv[1]))"
    )
    for name, code in (("said-fail", "2"), ("said-ok", "0")):
        manifest = pod_manifest(
            name, node, TRAINER_IMAGE, command=["python", "-c", script, code],
            terminationMessagePolicy="FallbackToLogsOnError",
        )  # fmt: skip
        core.create_namespaced_pod(namespace, manifest)
    failed = wait_phase(core, namespace, "said-fail", "Failed")
    assert (terminated(failed).exit_code, terminated(failed).message) == (2, "ConfigError: --steps: bad")
    succeeded = wait_phase(core, namespace, "said-ok", "Succeeded")
    assert terminated(succeeded).message == "ConfigError: --steps: bad"  # File: read whatever the exit
    log = kubelet.containers.termination_log_path(namespace, "said-fail")
    assert log.read_text() == "ConfigError: --steps: bad"


@pytest.mark.parametrize(
    ("policy", "code", "message"),
    [
        ("FallbackToLogsOnError", 3, "line 98\nline 99\nValueError: boom\n"),
        ("FallbackToLogsOnError", 0, None),  # the fallback is for failures only
        ("File", 3, None),  # Kubernetes' default policy: the file only
    ],
)
def test_with_fallback_to_logs_on_error_a_failure_without_a_message_gives_the_end_of_its_log(
    core, namespace, node, policy, code, message
):
    script = (
        "import sys; [print('line', i) for i in range(100)]; print('ValueError: boom'); "
        "sys.exit(int(sys.argv[1]))"
    )
    name = f"fallback-{policy.lower()}-{code}"
    manifest = pod_manifest(
        name,
        node,
        TRAINER_IMAGE,
        command=["python", "-c", script, str(code)],
        terminationMessagePolicy=policy,
    )
    core.create_namespaced_pod(namespace, manifest)
    ended = wait_phase(core, namespace, name, "Failed" if code else "Succeeded")
    said = terminated(ended).message
    if message is None:
        assert not said
    else:
        assert said.endswith(message) and said.count("\n") == 80 and said.startswith("line 21\n")


def test_the_message_is_the_file_else_the_end_of_the_log_within_kubernetes_limits():
    message = kubelet_sim.podstatus.termination_message
    fallback = {"name": "t", "image": "i", "terminationMessagePolicy": "FallbackToLogsOnError"}
    assert message(fallback, 1, b"x" * 5000 + b"END", b"log") == ("x" * 4093) + "END"  # the last 4096 bytes
    long_lines = b"".join(b"%03d " % i + b"y" * 60 + b"\n" for i in range(100))
    tail = message(fallback, 1, b"", long_lines)
    assert len(tail.encode()) == 2048 and tail.endswith("099 " + "y" * 60 + "\n")  # last 2048 bytes
    short_lines = b"".join(b"%d\n" % i for i in range(200))
    assert message(fallback, 1, b"", short_lines) == "".join(f"{i}\n" for i in range(120, 200))  # 80 lines
    assert message(fallback, 0, b"", short_lines) == ""
    assert message({"name": "t", "image": "i"}, 1, b"", short_lines) == ""
