"""`tpujob run examples/jax/tpujob.yaml --local`: the JAX example (not the tpujob trainer) as local
processes, its image's /app mapped to examples/jax with --mount; 1, 2 and 2x2 (Multislice) hosts."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import REPO
from tpujob import localrun
from tpujob.api import parse_tpujob

MANIFEST = REPO / "examples" / "jax" / "tpujob.yaml"
EXAMPLE_DIR = REPO / "examples" / "jax"


def run_local(manifest: Path, work_dir: Path) -> subprocess.CompletedProcess[str]:
    """The README's command, from the repository's root: `--mount /app=examples/jax` is relative; any free
    metrics ports, as another pytest worker may run a local job at the same time."""
    return subprocess.run(
        [sys.executable, "-m", "tpujob.cli", "run", str(manifest), "--local", "--mount", "/app=examples/jax",
         "--work-dir", str(work_dir), "--metrics-port", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_command_runs_as_given_with_app_mounted() -> None:
    job = parse_tpujob(yaml.safe_load(MANIFEST.read_text()))
    mounts = (localrun.parse_mount(f"/app/={EXAMPLE_DIR}"),)
    assert localrun.trainer_command(job, "/venv/bin/python", mounts) == [
        "/venv/bin/python",
        str(EXAMPLE_DIR / "train.py"),
        *job.spec.trainer.args,
    ]
    assert localrun.trainer_command(job, "/venv/bin/python")[1] == "/app/train.py"  # no mount: as is
    assert localrun.map_mounted("/application/x", mounts) == "/application/x"
    with pytest.raises(argparse.ArgumentTypeError, match="IMAGE_DIR=LOCAL_DIR"):
        localrun.parse_mount("app=examples/jax")


@pytest.mark.slow
@pytest.mark.trainer  # JAX processes (no fixture or import here says so)
@pytest.mark.parametrize(
    ("tpu", "processes"),
    [({}, 2), ({"topology": "2x2x1"}, 1), ({"slices": 2}, 4)],
    ids=["two-hosts", "one-host", "multislice-2x2"],
)
def test_the_jax_example_runs_locally_and_every_process_sees_the_others(
    tmp_path: Path, tpu: dict[str, object], processes: int
) -> None:
    manifest = MANIFEST
    if tpu:
        changed = yaml.safe_load(MANIFEST.read_text())
        changed["spec"]["tpu"].update(tpu)
        manifest = tmp_path / "jax.yaml"
        manifest.write_text(yaml.safe_dump(changed))
    result = run_local(manifest, tmp_path / "state")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"{processes} local worker(s)" in result.stderr
    assert f"command: {sys.executable} {EXAMPLE_DIR / 'train.py'}" in result.stderr
    summary = json.loads(result.stdout)  # worker 0's, printed by `tpujob run`
    assert summary["process_count"] == processes
    assert summary["allgather"] == list(range(processes))
    assert "jax-regression: succeeded" in result.stderr
    job_dir = tmp_path / "state" / "jax-regression"
    for worker in range(processes):
        log = (job_dir / f"worker-{worker}.log").read_text()
        assert f"[process {worker}] process_count={processes} devices={processes}" in log, log
        assert f"[process {worker}] allgather of process ids: {list(range(processes))}" in log, log
