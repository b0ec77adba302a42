"""`tpujob run FILE --local`: the plan of local workers (pure) and real runs of the digits example."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.trainer.conftest import REPO
from tpujob import localrun
from tpujob.api import parse_tpujob
from tpujob_sandbox import free_port
from tpujob_sandbox.waiting import wait_for

EXAMPLE = REPO / "examples" / "digits-local.yaml"


def example_job(**tpu: str) -> dict[str, object]:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["tpu"].update(tpu)
    return manifest


def test_trainer_command_defaults_to_the_image_entrypoint() -> None:
    job = parse_tpujob(example_job())
    assert localrun.trainer_command(job, "/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "tpujob_trainer",
        *job.spec.trainer.args,
    ]
    manifest = example_job()
    manifest["spec"]["trainer"]["command"] = ["python3", "-m", "my_trainer"]
    manifest["spec"]["trainer"]["args"] = ["--x"]
    assert localrun.trainer_command(parse_tpujob(manifest), "/venv/bin/python") == [
        "/venv/bin/python",
        "-m",
        "my_trainer",
        "--x",
    ]


@pytest.mark.parametrize(
    ("configured", "override", "expected"),
    [
        ("gs://bucket/ckpt", None, "/work/job/checkpoints"),  # cloud storage needs credentials: go local
        ("/data/ckpt", None, "/data/ckpt"),
        (None, None, None),
        ("gs://bucket/ckpt", "/tmp/mine", "/tmp/mine"),
    ],
)
def test_local_checkpoint_dir(configured: str | None, override: str | None, expected: str | None) -> None:
    assert localrun.local_checkpoint_dir(configured, override, Path("/work/job")) == expected


@pytest.mark.parametrize(
    ("configured", "override", "checkpoint_dir", "expected"),
    [
        ("gs://bucket/models", None, "/work/job/checkpoints", "/work/job/export"),  # cloud storage: go local
        ("/data/models", None, None, "/data/models"),
        (None, None, "/work/job/checkpoints", "/work/job/checkpoints/export"),  # default: under checkpoints
        (None, None, None, None),  # neither: no export
        ("gs://bucket/models", "/tmp/mine", None, "/tmp/mine"),
    ],
)
def test_local_export_dir(
    configured: str | None, override: str | None, checkpoint_dir: str | None, expected: str | None
) -> None:
    assert localrun.local_export_dir(configured, override, checkpoint_dir, Path("/work/job")) == expected


@pytest.mark.parametrize(
    ("codes", "overall"),
    [([0], 0), ([0, 0], 0), ([143, 143], 143), ([0, 1], 1), ([2, 143], 2), ([143, 1], 143)],
)
def test_overall_exit_code(codes: list[int], overall: int) -> None:
    assert localrun.overall_exit_code(codes) == overall


def test_two_hosts_get_the_operators_env_with_local_addresses() -> None:
    job = parse_tpujob(example_job(topology="2x4", machineType="ct5lp-hightpu-4t"))
    workers = localrun.plan_workers(
        job,
        python="/py",
        base_env={"PATH": "/bin", "TPUJOB_PROGRESS": "log"},
        worker_ports=[41000, 41001],
        metrics_ports=[9100, 9101],
        job_dir=Path("/w/digits"),
        checkpoint_dir="/w/digits/checkpoints",
        progress_bar=True,
    )
    assert [w.index for w in workers] == [0, 1]
    for worker in workers:
        env = worker.env
        assert env["TPU_WORKER_ID"] == str(worker.index)
        assert env["TPU_WORKER_HOSTNAMES"] == "localhost:41000,localhost:41001"
        assert env["TPUJOB_METRICS_PORT"] == str(9100 + worker.index) == str(worker.metrics_port)
        assert env["TPUJOB_METRICS_ADDRESS"] == "127.0.0.1"  # loopback: not every address's port
        assert env["TPUJOB_CHECKPOINT_DIR"] == "/w/digits/checkpoints"
        assert env["TPUJOB_SUMMARY_FILE"] == f"/w/digits/worker-{worker.index}-summary.json"
        assert env["TPUJOB_NAME"] == "digits"
        assert env["PATH"] == "/bin"
        assert "MEGASCALE_NUM_SLICES" not in env  # one slice
    assert workers[0].env["TPUJOB_PROGRESS"] == "log"  # the user's choice stands


def run_cli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real `tpujob` command line, in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "tpujob.cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_local_it_says_what_to_do(tmp_path: Path) -> None:
    result = run_cli(["run", str(EXAMPLE)], tmp_path)
    assert result.returncode == 2
    assert "only --local is supported" in result.stderr


@pytest.mark.slow
def test_digits_on_two_local_workers_use_multi_worker_mirrored_and_reach_95_percent(
    tmp_path: Path, digits_dir: Path
) -> None:
    manifest = example_job(topology="2x4", machineType="ct5lp-hightpu-4t")
    manifest["metadata"]["name"] = "digits-two"
    manifest["spec"]["trainer"]["env"] = [{"name": "TPUJOB_DATA_DIR", "value": str(digits_dir)}]
    path = tmp_path / "digits-two.yaml"
    path.write_text(yaml.safe_dump(manifest))

    started = time.monotonic()
    result = run_cli(["run", str(path), "--local", "--metrics-port", str(free_port())], tmp_path)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    print(f"digits, 2 local workers: test accuracy {summary['test_accuracy']} in {elapsed:.1f}s")
    assert (summary["strategy"], summary["workers"], summary["replicas"]) == ("multi-worker", 2, 2)
    assert summary["test_accuracy"] >= 0.95
    assert "[worker 1]" in result.stderr  # the second worker's log, prefixed
    assert "digits-two: succeeded in" in result.stderr
    checkpoints = tmp_path / ".state" / "local" / "digits-two" / "checkpoints"
    assert (checkpoints / "checkpoint").exists()  # gs:// in the manifest became a local directory
    # Worker 0 exported the model beside the checkpoints (the default exportDir), and the run says so.
    assert summary["export_dir"] == str(checkpoints / "export")
    assert (checkpoints / "export" / "saved_model.pb").exists()
    assert f"exported for serving to {checkpoints / 'export'}" in result.stderr


def test_workers_stop_when_the_runner_is_killed(tmp_path: Path) -> None:
    """SIGKILL gives `tpujob run` no chance to stop its workers (they sit in sessions of their own): the
    kernel's parent-death signal does, so none lives on holding its ports (pytest kills on a timeout)."""
    manifest = example_job(topology="2x4", machineType="ct5lp-hightpu-4t")  # two workers
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    script = f"import os, time; open('{pid_dir}/' + str(os.getpid()), 'w').close(); time.sleep(600)"
    manifest["spec"]["trainer"].update(command=["python", "-c", script], args=[])
    path = tmp_path / "sleepers.yaml"
    path.write_text(yaml.safe_dump(manifest))
    runner = subprocess.Popen(
        [sys.executable, "-m", "tpujob.cli", "run", str(path), "--local", "--metrics-port", "0"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        pids = wait_for(
            lambda: [int(p.name) for p in pid_dir.iterdir()] if len(list(pid_dir.iterdir())) == 2 else None,
            timeout=60,
            what="both workers to start",
        )
    finally:
        runner.kill()
        runner.wait()

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"  # a zombie has ended
        except FileNotFoundError:
            return False

    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=30, what=f"workers {pids} to end")
