"""Helpers for the trainer tests: start real trainer processes, wait on conditions, scrape metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]


def scrape(port: int) -> dict[str, float] | None:
    """Samples of a /metrics endpoint by name (labels dropped), or None while it is not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@dataclass
class Trainer:
    """A `python -m tpujob_trainer` process; stdout holds its JSON summary, stderr its log."""

    process: subprocess.Popen[bytes]
    directory: Path
    name: str

    def wait(self, timeout: float) -> int:
        """Its exit code. A whole run's `timeout` covers TensorFlow's import, which took 46 s on a loaded
        2-core machine (a run of 40 steps then needed more than 120 s in all)."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"{self.name} still running after {timeout}s; log:\n{self.log()[-3000:]}")

    def summary(self) -> dict[str, Any]:
        lines = (self.directory / f"{self.name}.out").read_text().strip().splitlines()
        assert lines, f"{self.name} printed no summary; log:\n{self.log()[-3000:]}"
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def log(self) -> str:
        return (self.directory / f"{self.name}.err").read_text()


def start_trainer(directory: Path, name: str, args: list[str], env: dict[str, str]) -> Trainer:
    directory.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    with (directory / f"{name}.out").open("wb") as out, (directory / f"{name}.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "tpujob_trainer", *args],
            env=full_env,
            stdout=out,
            stderr=err,
            cwd=directory,
        )
    return Trainer(process, directory, name)


@pytest.fixture(scope="session")
def digits_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits TFRecords, written once per test session by the trainer's own command."""
    directory = tmp_path_factory.mktemp("digits")
    subprocess.run(
        [sys.executable, "-m", "tpujob_trainer", "prepare-data", "digits", str(directory)],
        check=True,
        capture_output=True,
    )
    return directory
