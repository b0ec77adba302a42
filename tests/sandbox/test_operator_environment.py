"""The operator the tests run is the operator the image ships: its own environment (Makefile OPERATOR_VENV,
installed from operator/constraints.txt as operator/Dockerfile installs it), without the test bed's
`kubernetes` package, which kopf would import (42 MiB of models) and the image does not have."""

from __future__ import annotations

import subprocess

from tpujob_sandbox import operator_python


def importable(module: str) -> bool:
    found = subprocess.run([operator_python(), "-c", f"import {module}"], capture_output=True, check=False)
    return found.returncode == 0


def test_the_operators_environment_has_the_operator_and_not_the_test_beds_client() -> None:
    assert importable("tpujob.handlers")
    assert not importable("kubernetes")
    assert not importable("tpujob_sandbox")
