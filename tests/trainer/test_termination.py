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
