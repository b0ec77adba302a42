"""`tpujob run --local` with a team's pod parts: env from the pod is resolved as the kubelet would, a value
only the cluster has is taken from this shell or refused with what to export, the rest is said, not faked."""

import copy
import socket
from pathlib import Path

import pytest
import yaml

from tests.manifests import base_job
from tests.pod_manifests import TEAM_JOB, secret_env
from tpujob import localrun
from tpujob.api import parse_tpujob
from tpujob.cli import main


def plan(manifest, environ):
    return localrun.plan_workers(
        parse_tpujob(copy.deepcopy(manifest)),
        python="/py",
        base_env=environ,
        worker_ports=[41000],
        metrics_ports=[9100],
        job_dir=Path("/w/job"),
        checkpoint_dir=None,
        progress_bar=False,
    )


def with_env(*env):
    manifest = base_job()
    manifest["spec"]["trainer"]["env"] = list(env)
    return manifest


def test_fields_of_the_pod_come_from_the_pod_the_operator_would_make():
    manifest = with_env(
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "WORKER", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tpujob.dev/worker']"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
    )
    (worker,) = plan(manifest, {})
    env = worker.env
    assert (env["POD"], env["NS"], env["WORKER"], env["IP"], env["SA"]) == (
        "train-s0-w0-a0",
        "default",
        "0",
        "127.0.0.1",
        "default",
    )


def test_a_secret_is_taken_from_this_shell_or_refused_with_what_to_export():
    manifest = with_env(secret_env("HF_TOKEN"))
    (worker,) = plan(manifest, {"HF_TOKEN": "hf_local"})
    assert worker.env["HF_TOKEN"] == "hf_local"
    with pytest.raises(localrun.CannotRunLocally) as refused:
        plan(manifest, {})
    assert refused.value.problems == [
        "HF_TOKEN comes from Secret hf-token key token in the cluster; export HF_TOKEN to run here"
    ]


def test_an_optional_key_that_is_not_here_leaves_the_variable_unset_as_on_gke():
    optional = {
        "name": "EXTRA",
        "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k", "optional": True}},
    }
    (worker,) = plan(with_env(optional), {})
    assert "EXTRA" not in worker.env


def test_what_happens_only_on_gke_is_said():
    notes = localrun.cluster_only_notes(
        parse_tpujob(copy.deepcopy(TEAM_JOB)), mounts=(("/data", "/tmp/data"),)
    )
    assert notes == [
        "envFrom train-env is not read here; its variables come from this shell's environment",
        "volume config is not mounted at /etc/train: use --mount /etc/train=DIR",
        "volume dshm is not mounted at /dev/shm: use --mount /dev/shm=DIR",
        "only the trainer runs here, not metrics-agent",
    ]


def test_the_command_refuses_before_starting_any_process(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(with_env(secret_env("HF_TOKEN"))))
    work = ["--work-dir", str(tmp_path / "work"), "--metrics-port", "0"]  # 0: no test's port is busy
    assert main(["run", str(path), "--local", *work]) == 2
    assert "spec.trainer.env: HF_TOKEN comes from Secret hf-token key token" in capsys.readouterr().err
    assert not list((tmp_path / "work").glob("*/worker-*.log"))


def test_a_metrics_port_in_use_is_refused_with_the_flag_that_fixes_it(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(base_job()))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        work = ["--work-dir", str(tmp_path / "work"), "--metrics-port", str(port)]
        assert main(["run", str(path), "--local", *work]) == 2
    error = capsys.readouterr().err
    assert f"--metrics-port: 127.0.0.1:{port} already in use" in error
    assert "--metrics-port 0 for any free ones" in error
    assert not list((tmp_path / "work").glob("*/worker-*.log"))


def test_metrics_port_0_takes_any_free_ports_on_loopback():
    ports = localrun.metrics_ports(0, 3)
    assert isinstance(ports, list) and len(set(ports)) == 3 and 0 not in ports
    assert localrun.busy_ports(ports) == []
