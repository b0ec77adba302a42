"""Strategy choice and worker wiring (pure), table-tested."""

import json

import pytest

from tpujob_trainer.cluster import (
    Accelerators,
    choose_strategy,
    host_and_port,
    tf_config_for,
    tpu_resolver_target,
)
from tpujob_trainer.config import ConfigError, WorkerEnv

ONE = WorkerEnv()
TWO = WorkerEnv(worker_id=1, hostnames=("w0.job", "w1.job"))
TPU_4 = Accelerators(tpu_chips=4)
CPU = Accelerators()


@pytest.mark.parametrize(
    ("requested", "found", "workers", "kind", "reason"),
    [
        ("auto", TPU_4, ONE, "tpu", "4 TPU chip(s) attached, 1 worker(s)"),
        ("auto", TPU_4, TWO, "tpu", "4 TPU chip(s) attached, 2 worker(s)"),
        ("auto", CPU, TWO, "multi-worker", "no TPU, 2 worker(s) in TPU_WORKER_HOSTNAMES"),
        ("auto", Accelerators(gpus=2), TWO, "multi-worker", "no TPU, 2 worker(s)"),
        ("auto", Accelerators(gpus=4), ONE, "mirrored", "one worker with 4 GPUs"),
        ("auto", Accelerators(gpus=1), ONE, "default", "no TPU, one worker, 1 GPU(s)"),
        ("auto", CPU, ONE, "default", "no TPU, one worker, 0 GPU(s)"),
        ("multi-worker", CPU, ONE, "multi-worker", "requested with --strategy"),
        ("default", TPU_4, ONE, "default", "requested with --strategy"),
        ("tpu", TPU_4, TWO, "tpu", "requested with --strategy (2 worker(s))"),
    ],
)
def test_choose_strategy(
    requested: str, found: Accelerators, workers: WorkerEnv, kind: str, reason: str
) -> None:
    choice = choose_strategy(requested, found, workers)
    assert choice.kind == kind
    assert reason in choice.reason


@pytest.mark.parametrize(
    ("requested", "found", "workers", "message"),
    [
        ("tpu", CPU, ONE, "no TPU chips are attached"),
        ("default", CPU, TWO, "runs on one worker, but TPU_WORKER_HOSTNAMES lists 2 worker(s)"),
        ("mirrored", CPU, TWO, "runs on one worker"),
        ("auto", TPU_4, WorkerEnv(num_slices=2), "MEGASCALE_NUM_SLICES=2"),
    ],
)
def test_impossible_strategies_say_why(
    requested: str, found: Accelerators, workers: WorkerEnv, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        choose_strategy(requested, found, workers)


def test_tf_config_lists_every_worker_in_order_with_the_default_port() -> None:
    assert tf_config_for(TWO, 8470) == {
        "cluster": {"worker": ["w0.job:8470", "w1.job:8470"]},
        "task": {"type": "worker", "index": 1},
    }


def test_tf_config_keeps_local_ports() -> None:
    workers = WorkerEnv(worker_id=0, hostnames=("localhost:40001", "localhost:40002"))
    assert tf_config_for(workers, 8470)["cluster"] == {"worker": ["localhost:40001", "localhost:40002"]}


def test_an_explicit_tf_config_wins() -> None:
    given = {"cluster": {"chief": ["c:1"], "worker": ["w:2"]}, "task": {"type": "chief", "index": 0}}
    assert tf_config_for(WorkerEnv(tf_config=json.dumps(given)), 8470) == given
    with pytest.raises(ConfigError, match="TF_CONFIG: not valid JSON"):
        tf_config_for(WorkerEnv(tf_config="{"), 8470)


@pytest.mark.parametrize(
    ("workers", "target"),
    [
        (ONE, "local"),
        (TWO, "grpc://w0.job:8470,grpc://w1.job:8470"),
    ],
)
def test_tpu_resolver_target(workers: WorkerEnv, target: str) -> None:
    assert tpu_resolver_target(workers, 8470) == target


def test_host_and_port() -> None:
    assert host_and_port("w0.job", 8470) == ("w0.job", 8470)
    assert host_and_port("localhost:1234", 8470) == ("localhost", 1234)
    with pytest.raises(ConfigError, match="bad port"):
        host_and_port("w0:http", 8470)
