"""The trainer ships without `tpujob`, so it keeps copies of shared names: they must not drift."""

from tpujob.api import constants as operator_constants
from tpujob.localrun import ENV_PROGRESS, ENV_SUMMARY_FILE
from tpujob.render import plan
from tpujob_trainer import constants as trainer_constants
from tpujob_trainer.config import SETTINGS, TrainerConfig, config_from, worker_env_from

ENV_OF = {setting.name: setting.env for setting in SETTINGS}


def test_exit_code_and_ports_match_the_operator() -> None:
    assert trainer_constants.EXIT_CODE_PREEMPTED == operator_constants.EXIT_CODE_PREEMPTED == 143
    assert trainer_constants.EXIT_CODE_BAD_CONFIG == operator_constants.EXIT_CODE_BAD_CONFIG == 2
    assert trainer_constants.PROGRESS_LINE_PREFIX == operator_constants.PROGRESS_LINE_PREFIX
    assert trainer_constants.PORT_TRAINER_METRICS == operator_constants.PORT_TRAINER_METRICS
    assert trainer_constants.PORT_TF_WORKER == operator_constants.PORT_TF_WORKER
    assert TrainerConfig().metrics_port == operator_constants.PORT_TRAINER_METRICS
    assert TrainerConfig().worker_port == operator_constants.PORT_TF_WORKER


def test_env_names_the_operator_renders_are_the_ones_the_trainer_reads() -> None:
    assert plan.ENV_CHECKPOINT_DIR == trainer_constants.ENV_CHECKPOINT_DIR == ENV_OF["checkpoint_dir"]
    assert plan.ENV_EXPORT_DIR == trainer_constants.ENV_EXPORT_DIR == ENV_OF["export_dir"]
    assert ENV_OF["metrics_port"] == plan.ENV_METRICS_PORT
    assert ENV_OF["summary_file"] == ENV_SUMMARY_FILE
    assert ENV_OF["progress"] == ENV_PROGRESS


def test_the_rendered_worker_env_configures_the_trainer() -> None:
    from tpujob.api import parse_tpujob

    job = parse_tpujob(
        {
            "apiVersion": "tpujob.dev/v1alpha1",
            "kind": "TPUJob",
            "metadata": {"name": "digits"},
            "spec": {
                "tpu": {"type": "v5e", "topology": "4x4"},
                "trainer": {
                    "image": "tpujob-trainer:0.1.0-tpu",
                    "checkpointDir": "gs://bucket/ckpt",
                    "env": [{"name": "TPUJOB_BATCH_SIZE", "value": "128"}],
                },
            },
        }
    )
    hostnames = [f"digits-s0-w{i}.digits" for i in range(4)]
    rendered = plan.worker_env(job, 0, 2, worker_hostnames=hostnames, coordinator_address=hostnames[0])
    env = {item["name"]: item["value"] for item in rendered}

    worker = worker_env_from(env)
    config = config_from({}, env)

    assert (worker.worker_id, worker.hostnames, worker.num_slices) == (2, tuple(hostnames), 1)
    assert (config.checkpoint_dir, config.batch_size) == ("gs://bucket/ckpt", 128)
    assert config.export_dir == "gs://bucket/ckpt/export"  # the default: under checkpointDir
    assert config.metrics_port == operator_constants.PORT_TRAINER_METRICS
