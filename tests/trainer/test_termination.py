"""The trainer's termination message: one line on every non-zero exit, then the progress line, where the
kubelet reads it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tpujob_trainer import cli
from tpujob_trainer import constants as c
from tpujob_trainer.cli import main
from tpujob_trainer.termination import termination_log_path, write_termination_message


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "termination-log"


def test_bad_settings_say_why_in_the_termination_log(log: Path) -> None:
    env = {c.ENV_TERMINATION_LOG: str(log)}
    assert main(["--steps", "abc"], env=env) == c.EXIT_CODE_BAD_CONFIG
    assert log.read_text() == "ConfigError: --steps: 'abc' is not an integer\n"
    assert main([], env={**env, "TPU_WORKER_ID": "3"}) == c.EXIT_CODE_BAD_CONFIG
    assert log.read_text().startswith("ConfigError: TPU_WORKER_ID: 3 is out of range")


def test_an_unknown_flag_exits_2_and_says_so(log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--no-such-flag", "1"], env={c.ENV_TERMINATION_LOG: str(log)})
    assert stop.value.code == c.EXIT_CODE_BAD_CONFIG
    assert log.read_text() == ("python -m tpujob_trainer: error: unrecognized arguments: --no-such-flag 1\n")
    assert "unrecognized arguments" in capsys.readouterr().err


def test_help_writes_nothing(log: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"], env={c.ENV_TERMINATION_LOG: str(log)})
    assert stop.value.code == 0
    assert not log.exists()


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        (
            {"status": "failed", "error": "ValueError: loss is NaN"},
            "training failed: ValueError: loss is NaN",
        ),
        ({"status": "failed", "error": None}, "training failed: see the log"),
        (
            {"status": "preempted", "final_step": 120, "checkpoint": "/ckpt/ckpt-120", "error": None},
            "preempted (SIGTERM) at step 120, checkpoint /ckpt/ckpt-120",
        ),
        (
            {"status": "interrupted", "final_step": 0, "checkpoint": None, "error": "interrupted twice"},
            "interrupted (SIGINT) at step 0: interrupted twice",
        ),
    ],
)
def test_every_other_non_zero_exit_has_its_line(summary: dict[str, object], message: str) -> None:
    assert cli._exit_message(SimpleNamespace(**summary)) == message  # type: ignore[arg-type]


def test_the_message_is_one_line_of_at_most_4096_bytes(log: Path) -> None:
    write_termination_message(
        "Traceback:\n  line 1\nValueError: " + "x" * 5000, {c.ENV_TERMINATION_LOG: str(log)}
    )
    data = log.read_bytes()
    assert len(data) == 4096 and data.endswith(b"...\n") and data.count(b"\n") == 1
    assert data.startswith(b"Traceback: line 1 ValueError: xxx")


def test_without_a_kubelet_file_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = tmp_path / "dev" / "termination-log"
    monkeypatch.setattr(c, "DEFAULT_TERMINATION_LOG", str(absent))
    assert termination_log_path({}) is None
    write_termination_message("ConfigError: x", {})
    assert not absent.exists()  # never created outside a pod
    absent.parent.mkdir()
    absent.write_text("")  # the kubelet's mounted file
    assert termination_log_path({}) == str(absent)
    write_termination_message("ConfigError: x", {})
    assert absent.read_text() == "ConfigError: x\n"


def test_a_file_that_cannot_be_written_never_fails_the_trainer(tmp_path: Path) -> None:
    unwritable = tmp_path / "no-such-dir" / "termination-log"
    write_termination_message("ConfigError: x", {c.ENV_TERMINATION_LOG: str(unwritable)})
    assert not unwritable.exists()
    assert main(["--steps", "abc"], env={c.ENV_TERMINATION_LOG: str(unwritable)}) == c.EXIT_CODE_BAD_CONFIG
    assert os.path.isdir(tmp_path)


def test_the_progress_line_comes_last_after_the_human_line_within_4096_bytes(log: Path) -> None:
    from tpujob_trainer.termination import progress_line

    progress = progress_line({"startStep": 0, "step": 130, "checkpointStep": 130})
    env = {c.ENV_TERMINATION_LOG: str(log)}
    write_termination_message("preempted (SIGTERM) at step 130", env, progress=progress)
    human, last = log.read_text().splitlines()
    assert human == "preempted (SIGTERM) at step 130"
    assert last.startswith(c.PROGRESS_LINE_PREFIX)
    assert json.loads(last[len(c.PROGRESS_LINE_PREFIX) :])["step"] == 130
    write_termination_message("x" * 5000, env, progress=progress)  # the human line gives way, not the JSON
    data = log.read_bytes()
    assert len(data) == 4096 and data.endswith((progress + "\n").encode())
    write_termination_message("", env, progress=progress)  # a success: the progress line alone
    assert log.read_text() == progress + "\n"


def test_a_rewrite_in_place_leaves_only_the_new_content(log: Path) -> None:
    from tpujob_trainer.termination import write_in_place

    write_in_place(str(log), b"a much longer first message\n")
    write_in_place(str(log), b"short\n")
    assert log.read_bytes() == b"short\n"
    write_in_place(str(log), b"now longer than before\n")
    assert log.read_bytes() == b"now longer than before\n"


def test_periodic_progress_writes_the_progress_line_alone_when_due(log: Path) -> None:
    from tpujob_trainer.termination import PeriodicProgress, progress_line

    now = [100.0]
    periodic = PeriodicProgress({c.ENV_TERMINATION_LOG: str(log)}, interval=2.0, clock=lambda: now[0])
    assert periodic.due()  # never written yet
    periodic.write(progress_line({"startStep": 0, "step": 10}))
    assert log.read_text() == progress_line({"startStep": 0, "step": 10}) + "\n"
    now[0] = 101.0
    assert not periodic.due() and periodic.due(force=True)  # a checkpoint save always rewrites it
    now[0] = 102.0
    assert periodic.due()
    # The exit's write replaces it, human line first.
    write_termination_message("training failed: boom", {c.ENV_TERMINATION_LOG: str(log)},
                              progress=progress_line({"startStep": 0, "step": 12}))  # fmt: skip
    assert log.read_text().splitlines() == [
        "training failed: boom",
        progress_line({"startStep": 0, "step": 12}),
    ]
    assert not PeriodicProgress({}).due(force=True)  # outside a pod: nothing to write


@pytest.mark.slow
def test_a_trainer_killed_without_warning_leaves_a_recent_progress_line(
    digits_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL (the OOM killer, the end of a grace period): no last word, but the periodic progress line is
    there, at most PROGRESS_WRITE_SECONDS stale; the next run reports when the checkpoint it resumed from was
    saved."""
    import signal
    import time

    from tests.trainer.conftest import start_trainer
    from tpujob_sandbox import wait_for
    from tpujob_trainer.termination import PROGRESS_WRITE_SECONDS

    checkpoints = tmp_path / "checkpoints"
    env = {
        "TPUJOB_DATA_DIR": str(digits_dir),
        "TPUJOB_METRICS_PORT": "0",
        "TPUJOB_PROGRESS": "log",
        "TPUJOB_CHECKPOINT_DIR": str(checkpoints),
        c.ENV_TERMINATION_LOG: str(tmp_path / "log1"),
    }
    args = ["--steps", "1000000", "--checkpoint-every-steps", "1000000", "--checkpoint-interval-seconds", "1"]
    first = start_trainer(tmp_path, "first", args, env)

    def progress(path: Path) -> dict[str, object] | None:
        lines = path.read_text().splitlines() if path.exists() else []
        found = [
            json.loads(x[len(c.PROGRESS_LINE_PREFIX) :])
            for x in lines
            if x.startswith(c.PROGRESS_LINE_PREFIX)
        ]
        return found[-1] if found else None

    seen = wait_for(
        lambda: (p := progress(tmp_path / "log1")) and p.get("checkpointStep") and p["step"] > 20 and p,
        timeout=120,
        what="a progress line past a checkpoint",
    )
    first.process.send_signal(signal.SIGKILL)
    killed_at = time.time()
    first.wait(timeout=30)
    last = progress(tmp_path / "log1")
    assert last is not None and last["step"] >= seen["step"]  # type: ignore[operator]
    assert killed_at - float(last["endedAt"]) <= PROGRESS_WRITE_SECONDS + 1.0  # type: ignore[arg-type]
    assert (tmp_path / "log1").read_text().splitlines() == [c.PROGRESS_LINE_PREFIX + json.dumps(
        last, separators=(",", ":"), sort_keys=True)]  # the progress line alone  # fmt: skip

    resumed = int(last["checkpointStep"])  # type: ignore[call-overload]
    second = start_trainer(tmp_path, "second", ["--steps", str(resumed + 5)],
                           {**env, c.ENV_TERMINATION_LOG: str(tmp_path / "log2")})  # fmt: skip
    assert second.wait(timeout=300) == 0, second.log()[-3000:]
    final = progress(tmp_path / "log2")
    assert final is not None and final["startStep"] == resumed
    # The checkpoint it resumed from was the first run's last save.
    assert abs(float(final["resumedCheckpointAt"]) - float(last["checkpointAt"])) < 0.5  # type: ignore[arg-type]
