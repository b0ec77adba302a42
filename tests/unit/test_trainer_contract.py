"""The trainer image ships without `tpujob` (it is its own distribution, tpujob-trainer), so it keeps copies
of the names it shares with the operator: tpujob.api.trainer_contract (the env) and tpujob.api.constants
(exit codes, ports, the progress line) on one side, tpujob_trainer.constants and its settings on the other.
They must not drift: a name spelled two ways is a variable set and never read."""

from tpujob.api import TPUJob, parse_tpujob
from tpujob.api import constants as operator_constants
from tpujob.api import trainer_contract as contract
from tpujob.render import plan
from tpujob_trainer import constants as trainer_constants
from tpujob_trainer.config import SETTINGS, TrainerConfig, config_from, worker_env_from

ENV_OF = {setting.name: setting.env for setting in SETTINGS}

# What the trainer reads of what the operator side sets: the slice's wiring, its TPUJOB_ settings the
# operator fills in, the test bed's termination log and `tpujob run --local`'s two.
SHARED = {
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "MEGASCALE_COORDINATOR_ADDRESS",
    "MEGASCALE_NUM_SLICES",
    "MEGASCALE_SLICE_ID",
    "MEGASCALE_PORT",
    "TPUJOB_CHECKPOINT_DIR",
    "TPUJOB_EXPORT_DIR",
    "TPUJOB_ATTEMPT",
    "TPUJOB_RESTART_ATTEMPT_FILE",
    "TPUJOB_METRICS_PORT",
    "TPUJOB_METRICS_ADDRESS",
    "TPUJOB_TERMINATION_LOG",
    "TPUJOB_SUMMARY_FILE",
    "TPUJOB_PROGRESS",
}


def operator_sets() -> set[str]:
    return {value for name, value in vars(contract).items() if name.startswith("ENV_")}


def trainer_reads() -> set[str]:
    """Every variable name the trainer knows: its constants' ENV_* and its settings' TPUJOB_* names."""
    constants = {
        value
        for name, value in vars(trainer_constants).items()
        if name.startswith("ENV_") and name != "ENV_PREFIX"
    }
    return constants | set(ENV_OF.values())


def test_the_names_the_trainer_reads_from_the_operator_are_spelled_as_the_operator_sets_them() -> None:
    assert operator_sets() & trainer_reads() == SHARED


def test_every_trainer_name_under_the_operators_prefixes_is_one_the_operator_sets() -> None:
    """TPU_* and MEGASCALE_* are the operator's (and libtpu's): a trainer name there the operator does not set
    is a misspelling, or a variable nobody gives it."""
    reserved = {name for name in trainer_reads() if name.startswith(("TPU_", "MEGASCALE_"))}
    assert reserved <= operator_sets()


def test_name_by_name() -> None:
    assert contract.ENV_WORKER_ID == trainer_constants.ENV_WORKER_ID
    assert contract.ENV_WORKER_HOSTNAMES == trainer_constants.ENV_WORKER_HOSTNAMES
    assert contract.ENV_MEGASCALE_COORDINATOR_ADDRESS == trainer_constants.ENV_MEGASCALE_COORDINATOR_ADDRESS
    assert contract.ENV_MEGASCALE_NUM_SLICES == trainer_constants.ENV_MEGASCALE_NUM_SLICES
    assert contract.ENV_MEGASCALE_SLICE_ID == trainer_constants.ENV_MEGASCALE_SLICE_ID
    assert contract.ENV_MEGASCALE_PORT == trainer_constants.ENV_MEGASCALE_PORT
    assert contract.ENV_CHECKPOINT_DIR == trainer_constants.ENV_CHECKPOINT_DIR == ENV_OF["checkpoint_dir"]
    assert contract.ENV_EXPORT_DIR == trainer_constants.ENV_EXPORT_DIR == ENV_OF["export_dir"]
    assert ENV_OF["metrics_port"] == contract.ENV_METRICS_PORT
    assert ENV_OF["metrics_address"] == contract.ENV_METRICS_ADDRESS
    assert contract.ENV_TERMINATION_LOG == trainer_constants.ENV_TERMINATION_LOG
    assert ENV_OF["summary_file"] == contract.ENV_SUMMARY_FILE
    assert ENV_OF["progress"] == contract.ENV_PROGRESS


def test_exit_code_and_ports_match_the_operator() -> None:
    assert trainer_constants.EXIT_CODE_PREEMPTED == operator_constants.EXIT_CODE_PREEMPTED == 143
    assert trainer_constants.EXIT_CODE_BAD_CONFIG == operator_constants.EXIT_CODE_BAD_CONFIG == 2
    assert trainer_constants.PROGRESS_LINE_PREFIX == operator_constants.PROGRESS_LINE_PREFIX
    assert trainer_constants.PORT_TRAINER_METRICS == operator_constants.PORT_TRAINER_METRICS
    assert trainer_constants.PORT_TF_WORKER == operator_constants.PORT_TF_WORKER
    assert TrainerConfig().metrics_port == operator_constants.PORT_TRAINER_METRICS
    assert TrainerConfig().worker_port == operator_constants.PORT_TF_WORKER


def job(**tpu: object) -> TPUJob:
    return parse_tpujob(
        {
            "apiVersion": "tpujob.dev/v1alpha1",
            "kind": "TPUJob",
            "metadata": {"name": "digits"},
            "spec": {
                "tpu": {"type": "v5e", "topology": "4x4", **tpu},
                "trainer": {
                    "image": "tpujob-trainer:0.1.0-tpu",
                    "checkpointDir": "gs://bucket/ckpt",
                    "env": [{"name": "TPUJOB_BATCH_SIZE", "value": "128"}],
                },
            },
        }
    )


def test_the_rendered_worker_env_configures_the_trainer() -> None:
    hostnames = [f"digits-s0-w{i}.digits" for i in range(4)]
    rendered = plan.worker_env(job(), 0, 2, worker_hostnames=hostnames, coordinator_address=hostnames[0])
    env = {item["name"]: item["value"] for item in rendered}

    worker = worker_env_from(env)
    config = config_from({}, env)

    assert set(env) - {"TPUJOB_BATCH_SIZE"} <= operator_sets()
    assert (worker.worker_id, worker.hostnames, worker.num_slices) == (2, tuple(hostnames), 1)
    assert (config.checkpoint_dir, config.batch_size) == ("gs://bucket/ckpt", 128)
    assert config.export_dir == "gs://bucket/ckpt/export"  # the default: under checkpointDir
    assert config.metrics_port == operator_constants.PORT_TRAINER_METRICS


def test_the_rendered_multislice_env_places_the_trainer_in_its_slice() -> None:
    hostnames = [f"digits-s1-w{i}.digits" for i in range(4)]
    rendered = plan.worker_env(
        job(slices=2), 1, 3, worker_hostnames=hostnames, coordinator_address="digits-s0-w0.digits"
    )
    worker = worker_env_from({item["name"]: item["value"] for item in rendered})

    assert (worker.worker_id, worker.num_slices, worker.slice_id) == (3, 2, 1)
    assert worker.megascale_coordinator == "digits-s0-w0.digits"
