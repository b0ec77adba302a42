"""Settings from the command line and the pod's environment. Pure: no TensorFlow, no I/O.

Every setting has a flag (`--batch-size`) and an environment variable (`TPUJOB_BATCH_SIZE`);
the flag wins. The operator passes `spec.trainer.args` and `spec.trainer.env` unchanged, so a
manifest can use either form. The worker identity always comes from the environment the
operator renders (`TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES`, `MEGASCALE_*`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tpujob_trainer import constants as c


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it and says what would be valid."""


# --- value parsers: each raises ValueError with the reason, the caller adds the setting's name ---


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise ValueError(f"{text!r} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise ValueError(f"{text!r} must be at least 0")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{text!r} must be a finite number of at least 0")
    return value


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise ValueError(f"{text!r} is not a port (0 disables, otherwise 1-65535)")
    return value


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _positive_float(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{text!r} must be greater than 0")
    return value


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false)")


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() not in allowed:
            raise ValueError(f"{text!r} is not one of: {', '.join(allowed)}")
        return text.strip()

    return parse


STRATEGIES = ("auto", "tpu", "multi-worker", "mirrored", "default")
CACHE_MODES = ("auto", "memory", "off")
PROGRESS_MODES = ("auto", "bar", "log", "off")


@dataclass(frozen=True)
class TrainerConfig:
    model: str = "digits-cnn"
    data: str = "digits"
    data_dir: str | None = None
    batch_size: int = 64
    steps: int | None = None
    epochs: int | None = None
    learning_rate: float = 1e-3
    checkpoint_dir: str | None = None
    checkpoint_every_steps: int = 200
    checkpoint_interval_seconds: float = 0.0  # 0: by steps only
    export_dir: str | None = None
    metrics_port: int = c.PORT_TRAINER_METRICS
    metrics_address: str = ""  # every interface
    # Fault injection, to prove stall detection: in attempt 0, stop making progress at this step (0: never).
    hang_at_step: int = 0
    summary_file: str | None = None
    strategy: str = "auto"
    seed: int = 0
    shuffle_buffer: int = 10_000
    cache: str = "auto"
    log_every_steps: int = 100
    evaluate: bool = True
    progress: str = "auto"
    # Port of each worker's TensorFlow server when TPU_WORKER_HOSTNAMES gives none.
    worker_port: int = c.PORT_TF_WORKER


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return c.ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "model",
        _text,
        "built-in model (digits-cnn, resnet-small, sequence-cnn) or your own as module:function",
    ),
    Setting("data", _text, "built-in dataset (digits, sequences, synthetic) or your own as module:function"),
    Setting("data_dir", _text, "directory (or gs:// URL) of the dataset's TFRecords"),
    Setting("batch_size", _positive_int, "global batch size, split across all replicas"),
    Setting("steps", _positive_int, "train this many steps in total (or give --epochs)"),
    Setting("epochs", _positive_int, "train this many passes over the training split (or give --steps)"),
    Setting("learning_rate", _positive_float, "optimizer learning rate for the built-in models"),
    Setting("checkpoint_dir", _text, "where checkpoints go (local path or gs://); resumes from the latest"),
    Setting("checkpoint_every_steps", _positive_int, "save a checkpoint every N steps"),
    Setting(
        "checkpoint_interval_seconds",
        _non_negative_float,
        "also save a checkpoint when this many seconds passed since the last one (0: off)",
    ),
    Setting(
        "export_dir",
        _text,
        "after a successful run worker 0 writes a SavedModel for serving and model.json here (path or gs://)",
    ),
    Setting("metrics_port", _port, "Prometheus endpoint port; 0 disables it"),
    Setting("metrics_address", _text, "address the Prometheus endpoint binds (default: every interface)"),
    Setting(
        "hang_at_step",
        _non_negative_int,
        "fault injection: in attempt 0 (TPUJOB_ATTEMPT) hang at this step, as a stuck collective would: "
        "no progress, SIGTERM ignored after the stack dump (0: never)",
    ),
    Setting("summary_file", _text, "also write the final JSON summary to this file"),
    Setting("strategy", _choice(*STRATEGIES), "distribution strategy; auto decides from the hardware"),
    Setting("seed", _int, "random seed for shuffling and initialization"),
    Setting("shuffle_buffer", _positive_int, "shuffle buffer size in examples"),
    Setting("cache", _choice(*CACHE_MODES), "cache decoded examples in memory (auto: when they fit)"),
    Setting("log_every_steps", _positive_int, "log a progress line every N steps"),
    Setting("evaluate", _bool, "evaluate on the test split after training"),
    Setting("progress", _choice(*PROGRESS_MODES), "progress display; auto: a bar on a terminal, else logs"),
    Setting("worker_port", _port, "TensorFlow server port of hostnames given without one"),
)


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for every setting; values stay strings so flags and env share one parser."""
    for setting in SETTINGS:
        parser.add_argument(
            setting.flag,
            dest=setting.name,
            default=None,
            metavar="VALUE",
            help=f"{setting.help} [{setting.env}]",
        )


def config_from(flags: Mapping[str, str | None], env: Mapping[str, str]) -> TrainerConfig:
    """Merge flag values (None when not given) over environment values over defaults."""
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        flag_value = flags.get(setting.name)
        source, raw = (
            (setting.flag, flag_value) if flag_value is not None else (setting.env, env.get(setting.env))
        )
        if raw is None:
            continue
        try:
            values[setting.name] = setting.parse(raw)
        except ValueError as error:
            raise ConfigError(f"{source}: {error}") from None
    config = dataclasses.replace(TrainerConfig(), **values)
    if config.steps is not None and config.epochs is not None:
        raise ConfigError("give either --steps (TPUJOB_STEPS) or --epochs (TPUJOB_EPOCHS), not both")
    if config.steps is None and config.epochs is None:
        config = dataclasses.replace(config, epochs=1)
    return config


# --- the worker's place in the job, from the environment the operator renders ---


@dataclass(frozen=True)
class WorkerEnv:
    worker_id: int = 0
    # Each entry is "host" or "host:port" (a local run puts several workers on one host).
    hostnames: tuple[str, ...] = ("localhost",)
    num_slices: int = 1
    slice_id: int = 0
    megascale_coordinator: str | None = None
    # A TF_CONFIG given explicitly wins over the one derived from the hostnames.
    tf_config: str | None = None

    @property
    def num_workers(self) -> int:
        return len(self.hostnames)

    @property
    def is_chief(self) -> bool:
        return self.worker_id == 0 and self.slice_id == 0


def worker_env_from(env: Mapping[str, str]) -> WorkerEnv:
    raw_hosts = env.get(c.ENV_WORKER_HOSTNAMES, "").strip()
    hostnames = tuple(host.strip() for host in raw_hosts.split(",")) if raw_hosts else ("localhost",)
    if any(not host for host in hostnames):
        raise ConfigError(
            f"{c.ENV_WORKER_HOSTNAMES}: {raw_hosts!r} has an empty entry; expected host[:port],..."
        )
    worker_id = _env_int(env, c.ENV_WORKER_ID, 0)
    if not 0 <= worker_id < len(hostnames):
        raise ConfigError(
            f"{c.ENV_WORKER_ID}: {worker_id} is out of range for {len(hostnames)} worker(s) "
            f"in {c.ENV_WORKER_HOSTNAMES} (valid: 0..{len(hostnames) - 1})"
        )
    num_slices = _env_int(env, c.ENV_MEGASCALE_NUM_SLICES, 1)
    if num_slices < 1:
        raise ConfigError(f"{c.ENV_MEGASCALE_NUM_SLICES}: {num_slices} must be at least 1")
    slice_id = _env_int(env, c.ENV_MEGASCALE_SLICE_ID, 0)
    if not 0 <= slice_id < num_slices:
        raise ConfigError(
            f"{c.ENV_MEGASCALE_SLICE_ID}: {slice_id} is out of range (valid: 0..{num_slices - 1})"
        )
    return WorkerEnv(
        worker_id=worker_id,
        hostnames=hostnames,
        num_slices=num_slices,
        slice_id=slice_id,
        megascale_coordinator=env.get(c.ENV_MEGASCALE_COORDINATOR_ADDRESS) or None,
        tf_config=env.get(c.ENV_TF_CONFIG) or None,
    )


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return _int(raw)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from None


def split_module_function(spec: str, what: str) -> tuple[str, str] | None:
    """'pkg.mod:fn' -> ('pkg.mod', 'fn'); a built-in name (no colon) -> None."""
    if ":" not in spec:
        return None
    module, _, function = spec.partition(":")
    if not module or not function:
        raise ConfigError(
            f"--{what}: {spec!r} must look like module:function (for example mypkg.models:build)"
        )
    return module, function
