"""Real training runs of `python -m tpujob_trainer`: accuracy, metrics, SIGTERM, resume."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.trainer.conftest import REPO, scrape, start_trainer
from tpujob_sandbox import free_port, wait_for
from tpujob_trainer.constants import EXIT_CODE_PREEMPTED, METRICS_PREFIX

pytestmark = pytest.mark.slow

EXPECTED_METRICS = [
    "global_step",
    "target_steps",
    "steps_total",
    "examples_total",
    "step_duration_seconds_count",
    "examples_per_second",
    "loss",
    "input_wait_seconds_total",
    "checkpoint_save_duration_seconds_count",
    "last_checkpoint_timestamp_seconds",
]


def digits_env(digits_dir: Path, **settings: str) -> dict[str, str]:
    return {
        "TPUJOB_DATA_DIR": str(digits_dir),
        "TPUJOB_METRICS_PORT": "0",
        "TPUJOB_PROGRESS": "log",
        **settings,
    }


def step_reached(port: int, at_least: float) -> dict[str, float] | None:
    samples = scrape(port)
    if samples and samples.get(f"{METRICS_PREFIX}global_step", 0) >= at_least:
        return samples
    return None


def test_digits_on_one_worker_reach_95_percent(digits_dir: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    trainer = start_trainer(tmp_path, "digits", ["--epochs", "20"], digits_env(digits_dir))
    assert trainer.wait(timeout=240) == 0, trainer.log()[-3000:]
    summary = trainer.summary()
    print(f"digits, 1 worker: test accuracy {summary['test_accuracy']} in {time.monotonic() - started:.1f}s")
    assert summary["strategy"] == "default"
    assert summary["status"] == "succeeded"
    assert summary["final_step"] == summary["target_steps"] == 450  # 20 epochs of 1437 examples, batch 64
    assert summary["test_accuracy"] >= 0.95


@pytest.fixture(scope="module")
def preempted(digits_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A run stopped by SIGTERM mid-training, then a second run on the same checkpoint dir."""
    directory = tmp_path_factory.mktemp("preempted")
    checkpoints = directory / "checkpoints"
    port = free_port()
    env = digits_env(digits_dir, TPUJOB_METRICS_PORT=str(port), TPUJOB_CHECKPOINT_DIR=str(checkpoints))
    # No periodic checkpoint: the only one can come from the SIGTERM.
    first = start_trainer(
        directory, "first", ["--steps", "1000000", "--checkpoint-every-steps", "1000000"], env
    )
    early = wait_for(lambda: step_reached(port, 5), timeout=120, what="the first run to reach step 5")
    later = wait_for(
        lambda: step_reached(port, early[f"{METRICS_PREFIX}global_step"] + 1),
        timeout=60,
        what="the step count to increase",
    )
    first.process.send_signal(signal.SIGTERM)
    first_code = first.wait(timeout=60)
    stopped_at = first.summary()["final_step"]
    second = start_trainer(directory, "second", ["--steps", str(stopped_at + 20)], env)
    second_code = second.wait(timeout=300)
    return SimpleNamespace(
        early=early,
        later=later,
        first=first,
        first_code=first_code,
        second=second,
        second_code=second_code,
        checkpoints=checkpoints,
    )


def test_metrics_show_steps_increasing(preempted: SimpleNamespace) -> None:
    early: dict[str, Any] = preempted.early
    later: dict[str, Any] = preempted.later
    for name in EXPECTED_METRICS:
        assert METRICS_PREFIX + name in later, f"{name} missing from /metrics"
    for counter in ("global_step", "steps_total", "examples_total", "step_duration_seconds_count"):
        assert later[METRICS_PREFIX + counter] > early[METRICS_PREFIX + counter], counter
    assert later[f"{METRICS_PREFIX}target_steps"] == 1000000
    assert later[f"{METRICS_PREFIX}input_wait_seconds_total"] > 0


def test_sigterm_saves_a_checkpoint_and_exits_preempted(preempted: SimpleNamespace) -> None:
    assert preempted.first_code == EXIT_CODE_PREEMPTED, preempted.first.log()[-3000:]
    summary = preempted.first.summary()
    assert summary["status"] == "preempted"
    assert summary["final_step"] > preempted.early[f"{METRICS_PREFIX}global_step"]
    assert summary["checkpoint"] == str(preempted.checkpoints / f"ckpt-{summary['final_step']}")
    assert summary["checkpoints_saved"] == 1
    assert "received SIGTERM" in preempted.first.log()


def test_the_next_run_resumes_from_that_step(preempted: SimpleNamespace) -> None:
    stopped_at = preempted.first.summary()["final_step"]
    assert preempted.second_code == 0, preempted.second.log()[-3000:]
    summary = preempted.second.summary()
    assert summary["start_step"] == stopped_at
    assert summary["final_step"] == stopped_at + 20
    assert f"resumed from {preempted.checkpoints / f'ckpt-{stopped_at}'} at step {stopped_at}" in (
        preempted.second.log()
    )


def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(digits_dir: Path, tmp_path: Path) -> None:
    """Spot reclaim signals hosts at slightly different times: they must agree where to stop,
    or the others would wait forever in the next step's all-reduce."""
    hostnames = f"localhost:{free_port()},localhost:{free_port()}"
    ports = [free_port(), free_port()]
    workers = [
        start_trainer(
            tmp_path,
            f"worker{index}",
            ["--steps", "1000000"],
            digits_env(
                digits_dir,
                TPU_WORKER_ID=str(index),
                TPU_WORKER_HOSTNAMES=hostnames,
                TPUJOB_METRICS_PORT=str(ports[index]),
                TPUJOB_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
            ),
        )
        for index in (0, 1)
    ]
    wait_for(lambda: step_reached(ports[0], 5), timeout=180, what="worker 0 to reach step 5")
    workers[1].process.send_signal(signal.SIGTERM)
    codes = [worker.wait(timeout=90) for worker in workers]
    summaries = [worker.summary() for worker in workers]
    assert codes == [EXIT_CODE_PREEMPTED, EXIT_CODE_PREEMPTED], [w.log()[-2000:] for w in workers]
    assert summaries[0]["strategy"] == summaries[1]["strategy"] == "multi-worker"
    assert summaries[0]["final_step"] == summaries[1]["final_step"]
    assert summaries[0]["checkpoint"] == str(tmp_path / "checkpoints" / f"ckpt-{summaries[0]['final_step']}")
    assert not (tmp_path / "checkpoints" / ".worker-1").exists()  # worker 1's copy is scratch


def test_your_own_model_and_dataset(tmp_path: Path) -> None:
    trainer = start_trainer(
        tmp_path,
        "user",
        ["--model", "user_code:build", "--data", "user_code:dataset", "--steps", "40", "--batch-size", "32"],
        {
            "PYTHONPATH": str(REPO / "tests" / "trainer"),
            "TPUJOB_METRICS_PORT": "0",
            "TPUJOB_LEARNING_RATE": "0.05",
        },
    )
    assert trainer.wait(timeout=300) == 0, trainer.log()[-3000:]
    summary = trainer.summary()
    assert summary["final_step"] == 40
    assert summary["test_accuracy"] >= 0.9  # bright vs dark is easy
