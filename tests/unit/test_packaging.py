"""What users install: the operator's wheel holds the operator and nothing of its test bed."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_operator_wheel_has_no_simulated_gke_or_kubelet(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path, REPO],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("tpujob-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    assert "tpujob/reconciler/passes.py" in modules and "tpujob/handlers/__init__.py" in modules
    test_bed = [n for n in modules if "sandbox" in n or "kubelet" in n or "gke_sim" in n]
    assert test_bed == [], f"the wheel carries the test bed: {test_bed}"
