"""Settings from flags and env (pure): precedence, defaults, and errors that name the fix."""

import pytest

from tpujob_trainer.cli import main
from tpujob_trainer.config import (
    ConfigError,
    TrainerConfig,
    WorkerEnv,
    config_from,
    split_module_function,
    worker_env_from,
)
from tpujob_trainer.constants import EXIT_CODE_BAD_CONFIG


def test_defaults_train_one_epoch_of_digits() -> None:
    config = config_from({}, {})
    assert (config.model, config.data, config.epochs, config.steps) == ("digits-cnn", "digits", 1, None)
    assert config.metrics_port == 9090


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ({"batch_size": "32"}, {}, {"batch_size": 32}),
        ({}, {"TPUJOB_BATCH_SIZE": "16"}, {"batch_size": 16}),
        ({"batch_size": "32"}, {"TPUJOB_BATCH_SIZE": "16"}, {"batch_size": 32}),  # the flag wins
        ({}, {"TPUJOB_STEPS": "100"}, {"steps": 100, "epochs": None}),
        ({}, {"TPUJOB_CHECKPOINT_DIR": "gs://b/c"}, {"checkpoint_dir": "gs://b/c"}),
        ({}, {"TPUJOB_EVALUATE": "false"}, {"evaluate": False}),
        ({}, {"TPUJOB_METRICS_PORT": "0"}, {"metrics_port": 0}),
        ({"learning_rate": "0.01"}, {}, {"learning_rate": 0.01}),
        ({"strategy": "multi-worker"}, {}, {"strategy": "multi-worker"}),
    ],
)
def test_flags_over_env_over_defaults(
    flags: dict[str, str], env: dict[str, str], expected: dict[str, object]
) -> None:
    config = config_from(flags, env)
    assert {name: getattr(config, name) for name in expected} == expected


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"batch_size": "abc"}, {}, "--batch-size: 'abc' is not an integer"),
        ({}, {"TPUJOB_BATCH_SIZE": "0"}, "TPUJOB_BATCH_SIZE: '0' must be at least 1"),
        ({}, {"TPUJOB_LEARNING_RATE": "-1"}, "TPUJOB_LEARNING_RATE: '-1' must be greater than 0"),
        ({}, {"TPUJOB_METRICS_PORT": "70000"}, "is not a port"),
        ({}, {"TPUJOB_EVALUATE": "maybe"}, "is not a boolean"),
        ({"strategy": "gpu"}, {}, "--strategy: 'gpu' is not one of: auto, tpu, multi-worker"),
        ({"steps": "10", "epochs": "2"}, {}, "either --steps (TPUJOB_STEPS) or --epochs"),
        ({}, {"TPUJOB_MODEL": " "}, "TPUJOB_MODEL: must not be empty"),
    ],
)
def test_bad_settings_name_the_setting(flags: dict[str, str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_from(flags, env)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, WorkerEnv()),
        (
            {"TPU_WORKER_ID": "1", "TPU_WORKER_HOSTNAMES": "a.svc, b.svc"},
            WorkerEnv(worker_id=1, hostnames=("a.svc", "b.svc")),
        ),
        (
            {"TPU_WORKER_HOSTNAMES": "h0", "MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "1"},
            WorkerEnv(hostnames=("h0",), num_slices=2, slice_id=1),
        ),
    ],
)
def test_worker_env(env: dict[str, str], expected: WorkerEnv) -> None:
    assert worker_env_from(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "a,b"},
            "TPU_WORKER_ID: 2 is out of range for 2 worker(s)",
        ),
        ({"TPU_WORKER_ID": "x"}, "TPU_WORKER_ID: 'x' is not an integer"),
        ({"TPU_WORKER_HOSTNAMES": "a,,b"}, "has an empty entry"),
        ({"MEGASCALE_NUM_SLICES": "2", "MEGASCALE_SLICE_ID": "2"}, "MEGASCALE_SLICE_ID: 2 is out of range"),
    ],
)
def test_bad_worker_env(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        worker_env_from(env)
    assert message in str(error.value)


def test_module_function_specs() -> None:
    assert split_module_function("digits-cnn", "model") is None
    assert split_module_function("my.models:build", "model") == ("my.models", "build")
    with pytest.raises(ConfigError, match="must look like module:function"):
        split_module_function("my.models:", "model")


def test_bad_settings_exit_with_the_bad_config_code_before_loading_tensorflow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--batch-size", "many"], env={}) == EXIT_CODE_BAD_CONFIG
    assert "tpujob-trainer: error: --batch-size: 'many' is not an integer" in capsys.readouterr().err
    assert main([], env={"TPU_WORKER_ID": "3"}) == EXIT_CODE_BAD_CONFIG


def test_config_is_immutable() -> None:
    with pytest.raises(AttributeError):
        TrainerConfig().batch_size = 1  # type: ignore[misc]
