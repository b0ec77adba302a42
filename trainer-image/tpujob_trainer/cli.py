"""`python -m tpujob_trainer [train] [--flags]`, `prepare-data`, `serve`.

Exit codes (constants.py): 0 succeeded, 1 training failed, 2 bad settings,
130 interrupted (SIGINT) and 143 preempted (SIGTERM), both after saving a checkpoint.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from tpujob_trainer import constants as c
from tpujob_trainer.config import ConfigError, add_settings_arguments, config_from, worker_env_from

COMMANDS = ("train", "prepare-data", "serve")


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if env is None else env)
    # The operator may pass only flags (or nothing, everything in env): training is the default.
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["train", *argv]
    args = _parser().parse_args(argv)
    try:
        worker = worker_env_from(env)
    except ConfigError as error:
        return _bad_config(error)
    _setup_logging(worker.worker_id)
    if args.command == "prepare-data":
        return _prepare_data(args.dataset, args.directory)
    if args.command == "serve":
        from tpujob_trainer.strategy import serve_forever

        try:
            config = config_from({}, env)
        except ConfigError as error:
            return _bad_config(error)
        serve_forever(worker, config.worker_port)
    return _train(vars(args), env)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tpujob_trainer", description="tpujob's TensorFlow trainer"
    )
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
        return _bad_config(error)

    # Imported here: TensorFlow takes seconds to load, and settings errors should not wait for it.
    from tpujob_trainer.metrics import TrainerMetrics
    from tpujob_trainer.train import StopSignal, Summary, print_summary, run

    stop = StopSignal()
    stop.install()
    summary = Summary(worker_id=worker.worker_id, workers=worker.num_workers)
    try:
        run(config, worker, TrainerMetrics(), stop, summary)
    except ConfigError as error:
        summary.status, summary.exit_code, summary.error = "failed", c.EXIT_CODE_BAD_CONFIG, str(error)
        _bad_config(error)
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
    print_summary(summary, config.summary_file)
    return summary.exit_code


def _prepare_data(dataset: str, directory: str) -> int:
    from tpujob_trainer.data import BUILT_IN_PREPARERS

    info = BUILT_IN_PREPARERS[dataset](directory)
    counts = ", ".join(f"{name}: {split.examples}" for name, split in info.splits.items())
    logging.getLogger("tpujob_trainer").info("wrote %s to %s (%s)", dataset, directory, counts)
    return c.EXIT_CODE_SUCCEEDED


def _bad_config(error: ConfigError) -> int:
    print(f"tpujob-trainer: error: {error}", file=sys.stderr, flush=True)
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
