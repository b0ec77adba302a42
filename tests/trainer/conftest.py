"""Helpers for the trainer tests: start real trainer processes, wait on conditions, scrape metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tpujob_sandbox.forkserver import TRAINER_PRELOAD, ForkedProcess, ForkServer

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

    process: subprocess.Popen[bytes] | ForkedProcess
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


# The trainers' environment beyond the test's own: unbuffered, so a test reads its log as it goes.
TRAINER_ENV = {"PYTHONUNBUFFERED": "1"}
_forks: list[ForkServer] = []  # this session's fork server, once the first trainer starts


@pytest.fixture(scope="session", autouse=True)
def trainer_forks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The trainers start as forks of one interpreter that imported TensorFlow once (the test bed's fork
    server, as its kubelet starts them): the same program from its main on, about 5 CPU-seconds less each."""
    _forks.append(
        ForkServer(
            tmp_path_factory.mktemp("trainer-forks"),
            python=sys.executable,
            modules=("tpujob_trainer",),
            preload=TRAINER_PRELOAD,
            env={**os.environ, **TRAINER_ENV},
        )
    )
    yield
    _forks.pop().stop()


def start_trainer(directory: Path, name: str, args: list[str], env: dict[str, str]) -> Trainer:
    directory.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **TRAINER_ENV, **env}
    argv = [sys.executable, "-m", "tpujob_trainer", *args]
    out, err = directory / f"{name}.out", directory / f"{name}.err"
    for path in (out, err):
        path.write_bytes(b"")
    if _forks and _forks[0].can_run(argv, full_env):
        return Trainer(
            _forks[0].start(argv, out, stderr_path=err, env=full_env, cwd=directory), directory, name
        )
    with out.open("ab") as stdout, err.open("ab") as stderr:
        process = subprocess.Popen(argv, env=full_env, stdout=stdout, stderr=stderr, cwd=directory)
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
