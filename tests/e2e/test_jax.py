"""A second framework, proven: the JAX example (examples/jax) as a 2-host TPUJob under the operator on
the test bed. The simulated kubelet runs its image (tpujob-jax) as local processes, /app being
examples/jax; both processes find each other through the env the operator sets and jax.distributed
(CPU backend, gloo collectives)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.trainer.conftest import REPO
from tpujob.api import constants as c
from tpujob_sandbox import free_port, wait_for
from tpujob_sandbox import kubelet as kubelet_sim

MANIFEST = REPO / "examples" / "jax" / "tpujob.yaml"


STEPS = 6000


def jax_job() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    manifest["spec"]["nodePool"] = {"policy": "create"}
    # Long enough for a resync or two to read its step while it trains (seconds on this machine).
    manifest["spec"]["trainer"]["args"] = ["--steps", str(STEPS)]
    # Every local process shares this machine's network: a coordinator port of its own, so another test
    # bed's JAX job at the same time cannot take it (on GKE each pod has its own IP and port 8482).
    manifest["spec"]["trainer"]["env"] = [{"name": "JAX_COORDINATOR_PORT", "value": str(free_port())}]
    return manifest


@pytest.mark.trainer  # the JAX example's image runs as processes (tpujob_sandbox.pytest_plugin.real_trainers)
def test_the_jax_example_on_two_hosts_sees_both_processes_and_succeeds(jobs, gke, kubelet):
    manifest = jax_job()
    name = manifest["metadata"]["name"]
    port = manifest["spec"]["trainer"]["env"][0]["value"]
    assert (manifest["spec"]["tpu"]["type"], manifest["spec"]["tpu"]["topology"]) == ("v5p", "2x2x2")
    jobs.create(manifest)
    pods = jobs.wait_pods_running(name, 2, timeout=60)
    for pod in pods:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        # The pods get cluster DNS names, as on GKE; the kubelet points them at loopback.
        assert env["TPU_WORKER_HOSTNAMES"] == f"{name}-s0-w0.{name},{name}-s0-w1.{name}"
        assert pod.spec.containers[0].command == ["python", "/app/train.py"]
    # The image meets the progress contract with the standard library: worker 0's step reaches the status.
    wait_for(
        lambda: (jobs.status(name).get("progress") or {}).get("step"),
        timeout=120,
        what="worker 0's step read from the JAX program's metrics endpoint",
    )
    status = jobs.wait_phase(name, "Succeeded", timeout=180)
    assert status.get("restarts", 0) == 0, status
    assert status["progress"]["targetSteps"] == STEPS and 0 < status["progress"]["step"] <= STEPS
    log_paths = {
        int(pod.metadata.labels[c.LABEL_WORKER]): kubelet.log_path(jobs.namespace, pod.metadata.name)
        for pod in pods
    }
    logs = {worker: path.read_text() for worker, path in log_paths.items()}
    assert sorted(logs) == [0, 1]
    for worker, log in logs.items():
        assert f"[process {worker}] process_count=2 devices=2 coordinator=127.0.0.1:{port}" in log, log
        assert f"[process {worker}] allgather of process ids: [0, 1]" in log, log
        assert f"[process {worker}] learned w=" in log, log


# ---- the kubelet's local-image mechanism, pure --------------------------------------------------------


def test_the_jax_image_runs_locally_with_app_mapped_to_the_example():
    images = kubelet_sim.DEFAULT_LOCAL_IMAGES
    image = kubelet_sim.local_image_for("us-docker.pkg.dev/p/r/tpujob-jax:0.1.0-tpu", images)
    assert image is not None
    assert kubelet_sim.map_path("/app/train.py", image.paths) == str(REPO / "examples" / "jax" / "train.py")
    assert kubelet_sim.map_path("/application", image.paths) == "/application"
    assert kubelet_sim.local_image_for("busybox:1", images) is None
    assert not kubelet_sim.is_trainer_image("tpujob-jax:0.1.0", kubelet_sim.DEFAULT_TRAINER_IMAGES)


def test_local_images_from_the_env_setting():
    images = kubelet_sim.parse_local_images("my-jax:/app=/src,/data/=/tmp/d; my-torch")
    assert images == (
        kubelet_sim.LocalImage("my-jax", paths=(("/app", "/src"), ("/data", "/tmp/d"))),
        kubelet_sim.LocalImage("my-torch"),
    )
    assert kubelet_sim.parse_local_images("") == ()
    with pytest.raises(ValueError, match="IMAGE_DIR=LOCAL_DIR"):
        kubelet_sim.parse_local_images("x:app=/src")


def test_peer_names_of_the_pods_subdomain_resolve_to_loopback():
    pod = {"metadata": {"namespace": "ns"}, "spec": {"subdomain": "job"}}
    env = {
        "TPU_WORKER_HOSTNAMES": "job-s0-w0.job,job-s0-w1.job.ns.svc.cluster.local",
        "MEGASCALE_COORDINATOR_ADDRESS": "job-s0-w0.job:8080",
        "OTHER": "x.job-two,x.job.other-ns,job",
    }
    assert kubelet_sim.resolve_pod_names(pod, env) == {
        "TPU_WORKER_HOSTNAMES": "127.0.0.1,127.0.0.1",
        "MEGASCALE_COORDINATOR_ADDRESS": "127.0.0.1:8080",
        "OTHER": "x.job-two,x.job.other-ns,job",
    }
    assert kubelet_sim.resolve_pod_names({"metadata": {}, "spec": {}}, env) == env
