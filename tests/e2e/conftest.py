"""Fixtures the e2e tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart import tools
from tests.e2e.kubectl_cli import Kubectl


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    try:
        return tools.kubectl()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def kubectl(kubectl_binary, sandbox, operator, tmp_path) -> Kubectl:
    """`operator` installs the CRD (without CEL, as a 1.20 API server needs)."""
    return Kubectl(kubectl_binary, sandbox.kubeconfig, tmp_path / "kube-cache")
