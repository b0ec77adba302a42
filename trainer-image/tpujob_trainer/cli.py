"""`python -m tpujob_trainer [train] [--flags]`, `prepare-data`, `serve`.

Exit codes (constants.py): 0 succeeded, 1 training failed, 2 bad settings,
130 interrupted (SIGINT) and 143 preempted (SIGTERM), both after saving a checkpoint. Every non-zero exit
also says why in one line in the container's termination log (termination.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from tpujob_trainer import constants as c
from tpujob_trainer import inplace
from tpujob_trainer.config import ConfigError, add_settings_arguments, config_from, worker_env_from
from tpujob_trainer.termination import (
    PeriodicProgress,
    StackDumpOnSigterm,
    progress_line,
    write_termination_message,
)

if TYPE_CHECKING:  # train imports TensorFlow: only when training starts
    from tpujob_trainer.train import Summary

COMMANDS = ("train", "prepare-data", "serve")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    # The operator may pass only flags (or nothing, everything in env): training is the default.
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["train", *argv]
    if argv[0] == "train" and inplace.wanted(env):  # the operator may restart training in place
        return inplace.supervise(argv, env)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as stop:
        if stop.code:  # a usage error (an unknown flag): exit 2, as bad settings
            write_termination_message(_Parser.last_error or "bad command line", env)
        raise
    try:
        worker = worker_env_from(env)
    except ConfigError as error:
        return _bad_config(error, env)
    _setup_logging(worker.worker_id)
    if args.command == "prepare-data":
        return _prepare_data(args.dataset, args.directory)
    if args.command == "serve":
        from tpujob_trainer.strategy import serve_forever

        try:
            config = config_from({}, env)
        except ConfigError as error:
            return _bad_config(error, env)
        serve_forever(worker, config.worker_port)
    return _train(vars(args), env)


class _Parser(argparse.ArgumentParser):
    """argparse, remembering its last usage error for the termination log (its subparsers are of this
    class too)."""

    last_error = ""

    def error(self, message: str) -> NoReturn:
        _Parser.last_error = f"{self.prog}: error: {message}"
        super().error(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tpujob_trainer", description="tpujob's TensorFlow trainer")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser(
        "train", help="train (the default command); every flag also reads TPUJOB_<NAME>"
    )
    add_settings_arguments(train)
    prepare = commands.add_parser("prepare-data", help="write a built-in dataset as TFRecords (no download)")
    prepare.add_argument("dataset", choices=["digits"])
    prepare.add_argument("directory", help="output directory (local path or gs://)")
    commands.add_parser("serve", help="serve this host's TensorFlow server for a multi-host TPU client")
    return parser


def _train(flags: Mapping[str, str | None], env: Mapping[str, str]) -> int:
    try:
        config = config_from(flags, env)
        worker = worker_env_from(env)
    except ConfigError as error:
        return _bad_config(error, env)
    # Before TensorFlow loads: on a TPU image without TPU chips, libtpu would hang the import.
    from tpujob_trainer.tpu_runtime import check_tpu_runtime

    try:
        check_tpu_runtime(config.strategy, env)
    except ConfigError as error:
        return _bad_config(error, env)

    # Imported here: TensorFlow takes seconds to load, and settings errors should not wait for it.
    from tpujob_trainer.metrics import TrainerMetrics
    from tpujob_trainer.train import StopSignal, Summary, print_summary, run

    stop = StopSignal(StackDumpOnSigterm(env))
    stop.install()
    summary = Summary(worker_id=worker.worker_id, workers=worker.num_workers)
    try:
        run(config, worker, TrainerMetrics(), stop, summary, _TerminationLogProgress(env))
    except ConfigError as error:
        summary.status, summary.exit_code, summary.error = "failed", c.EXIT_CODE_BAD_CONFIG, str(error)
        _bad_config(error, env)
    except KeyboardInterrupt:
        summary.status, summary.exit_code, summary.error = (
            "interrupted",
            c.EXIT_CODE_INTERRUPTED,
            "interrupted twice",
        )
    except Exception as error:
        logging.getLogger("tpujob_trainer").exception("training failed")
        summary.status, summary.exit_code = "failed", c.EXIT_CODE_FAILED
        summary.error = f"{type(error).__name__}: {error}"
    if summary.status != "succeeded":  # run() set it on success; else this is when the run ended
        summary.ended_at = time.time()
    print_summary(summary, config.summary_file)
    if summary.exit_code != c.EXIT_CODE_BAD_CONFIG:  # bad config: said so
        human = "" if summary.exit_code == c.EXIT_CODE_SUCCEEDED else _exit_message(summary)
        write_termination_message(human, env, progress=progress_line(_progress_facts(summary)))
    return summary.exit_code


class _TerminationLogProgress:
    """The progress line alone in the termination log while training (termination.PeriodicProgress), so a
    trainer killed without warning (SIGKILL, OOM) still leaves the operator how far it got."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.periodic = PeriodicProgress(env)

    def due(self, force: bool = False) -> bool:
        return self.periodic.due(force)

    def write(self, summary: Summary) -> None:
        self.periodic.write(progress_line(_progress_facts(summary, ended_at=time.time())))


def _progress_facts(summary: Summary, ended_at: float | None = None) -> dict[str, object]:
    """What the operator's goodput accounting needs of this run (times: Unix seconds); `ended_at`: the time
    of a progress report while training (endedAt then says when it was written)."""
    facts: dict[str, object] = {
        "startStep": summary.start_step,
        "step": summary.final_step,
        "startedAt": round(summary.started_at, 3),
        "endedAt": round(ended_at or summary.ended_at or time.time(), 3),
        "checkpointSaveSeconds": summary.checkpoint_save_seconds,
        "checkpointRestoreSeconds": summary.checkpoint_restore_seconds,
        "inputWaitSeconds": summary.input_wait_seconds,
    }
    if summary.first_step_at is not None:
        facts["firstStepAt"] = round(summary.first_step_at, 3)
    if summary.checkpoint_step is not None:
        facts["checkpointStep"] = summary.checkpoint_step
    if summary.checkpoint_at is not None:
        facts["checkpointAt"] = round(summary.checkpoint_at, 3)
    if summary.resumed_checkpoint_at is not None:
        facts["resumedCheckpointAt"] = round(summary.resumed_checkpoint_at, 3)
    return facts


def _exit_message(summary: Summary) -> str:
    """Why training ended non-zero, in one line for the termination log."""
    if summary.status in ("preempted", "interrupted"):
        signal_name = "SIGTERM" if summary.status == "preempted" else "SIGINT"
        saved = f", checkpoint {summary.checkpoint}" if summary.checkpoint else ""
        said = f": {summary.error}" if summary.error else ""
        return f"{summary.status} ({signal_name}) at step {summary.final_step}{saved}{said}"
    return f"training failed: {summary.error or 'see the log'}"


def _prepare_data(dataset: str, directory: str) -> int:
    from tpujob_trainer.data import BUILT_IN_PREPARERS

    info = BUILT_IN_PREPARERS[dataset](directory)
    counts = ", ".join(f"{name}: {split.examples}" for name, split in info.splits.items())
    logging.getLogger("tpujob_trainer").info("wrote %s to %s (%s)", dataset, directory, counts)
    return c.EXIT_CODE_SUCCEEDED


def _bad_config(error: ConfigError, env: Mapping[str, str]) -> int:
    print(f"tpujob-trainer: error: {error}", file=sys.stderr, flush=True)
    write_termination_message(f"ConfigError: {error}", env)
    return c.EXIT_CODE_BAD_CONFIG


def _setup_logging(worker_id: int) -> None:
    logging.basicConfig(
        level=logging.WARNING,  # TensorFlow's Python INFO lines are noise here
        format=f"%(asctime)s %(levelname)s worker {worker_id}: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("tpujob_trainer").setLevel(logging.INFO)
    # TensorFlow's C++ start-up chatter hides the trainer's own lines.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
