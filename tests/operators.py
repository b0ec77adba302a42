"""`tpujob operator` as users run it, in a subprocess under a ServiceAccount's token: shared by the e2e
tests (the session operator) and the chart tests (the operator under the chart's ServiceAccount)."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import yaml
from kubernetes import client as k8s

from tpujob.sandbox.bed import Sandbox
from tpujob.sandbox.waiting import wait_for


def token_kubeconfig(sandbox: Sandbox, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding the ServiceAccount's token, so the test bed enforces that account's RBAC."""
    core = k8s.CoreV1Api(sandbox.api_client)

    def token() -> str | None:
        found = core.read_namespaced_service_account(account, namespace)
        if not found.secrets:
            return None
        secret = core.read_namespaced_secret(found.secrets[0].name, namespace)
        return base64.b64decode(secret.data["token"]).decode() if secret.data else None

    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    config["users"] = [
        {"name": account, "user": {"token": wait_for(token, timeout=30, what=f"{account}'s token")}}
    ]
    for context in config["contexts"]:
        context["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


class OperatorProcess:
    """`tpujob operator` in a subprocess: start, SIGKILL, start again. `running` holds the live ones, so
    a test can make sure no other operator reconciles its jobs."""

    running: ClassVar[set[OperatorProcess]] = set()

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tpujob.cli", "operator"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        OperatorProcess.running.add(self)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup, no last status write; what a node failure or OOM does."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        OperatorProcess.running.discard(self)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        OperatorProcess.running.discard(self)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
