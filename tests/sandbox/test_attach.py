"""One e2e test against an already running `tpujob sandbox up` (TPUJOB_TEST_SANDBOX names its folder): the
session uses that control plane instead of starting one, brings its own simulated GKE and kubelet, and
leaves the sandbox running with none of its Nodes behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.sandbox.test_sandbox_cli import sandbox_command
from tpujob_sandbox import pid_alive
from tpujob_sandbox.bed import SandboxNotRunning, attach_sandbox
from tpujob_sandbox.binaries import find_binaries
from tpujob_sandbox.gke import SIMULATED_NODE_LABEL
from tpujob_sandbox.layout import INFO_FILE
from tpujob_sandbox.pytest_plugin import ENV_TEST_SANDBOX

ONE_TEST = "tests/e2e/test_lifecycle.py::test_job_runs_to_success_and_releases_its_pools"


@pytest.mark.e2e
@pytest.mark.slow
def test_a_single_e2e_test_runs_on_a_running_sandbox_and_leaves_it_as_it_was(tmp_path, record_property):
    find_binaries()
    state = tmp_path / "sandbox"
    up = sandbox_command("up", "--dir", str(state), "--time-scale", "0.002")
    assert up.returncode == 0, up.stderr
    try:
        info = json.loads((state / INFO_FILE).read_text())
        env = {**os.environ, ENV_TEST_SANDBOX: str(state)}
        started = time.monotonic()
        session = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", ONE_TEST],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        record_property("single_test_seconds", round(time.monotonic() - started, 1))
        assert session.returncode == 0, session.stdout[-4000:] + session.stderr[-2000:]
        summary = session.stdout.strip().splitlines()[-1]
        assert re.match(r"\d+ passed", summary), summary
        assert "failed" not in summary and "error" not in summary, summary

        # The sandbox goes on, and the session's simulated Nodes went with its pools.
        assert pid_alive(int(info["pid"]))
        api = k8s_config.new_client_from_config(config_file=info["kubeconfig"])
        try:
            owners = {
                node.metadata.labels[SIMULATED_NODE_LABEL]
                for node in k8s.CoreV1Api(api).list_node(label_selector=SIMULATED_NODE_LABEL).items
            }
        finally:
            api.close()
        assert not {owner for owner in owners if owner.startswith("session-")}
    finally:
        down = sandbox_command("down", "--dir", str(state))
        assert down.returncode == 0, down.stderr


def test_a_session_on_a_folder_where_no_sandbox_runs_fails_naming_the_command(tmp_path):
    with pytest.raises(SandboxNotRunning, match=f"tpujob sandbox up --dir {tmp_path}"):
        attach_sandbox(tmp_path, tmp_path / "state")
