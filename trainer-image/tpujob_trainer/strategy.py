"""Builds the strategy `cluster.choose_strategy` picked. The I/O edge: devices, servers, TPU init."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import tensorflow as tf

from tpujob_trainer import constants as c
from tpujob_trainer.cluster import (
    Accelerators,
    StrategyChoice,
    tf_config_for,
    tpu_resolver_target,
    worker_addresses,
)
from tpujob_trainer.config import WorkerEnv
from tpujob_trainer.tpu_runtime import tpu_chip_count

log = logging.getLogger(__name__)


def detect_accelerators() -> Accelerators:
    # The TPU image without chips may never get here: libtpu hangs as TensorFlow is imported. Check
    # with tpu_runtime.check_tpu_runtime before that import (it fails fast, as bad settings).
    return Accelerators(tpu_chips=tpu_chip_count(), gpus=len(tf.config.list_physical_devices("GPU")))


def build_strategy(choice: StrategyChoice, workers: WorkerEnv, worker_port: int) -> tf.distribute.Strategy:
    if choice.kind == "multi-worker":
        # MultiWorkerMirroredStrategy reads TF_CONFIG; user code that looks for it sees the same.
        os.environ[c.ENV_TF_CONFIG] = json.dumps(tf_config_for(workers, worker_port))
        return tf.distribute.MultiWorkerMirroredStrategy()
    if choice.kind == "mirrored":
        return tf.distribute.MirroredStrategy()
    if choice.kind == "tpu":
        return _tpu_strategy(workers, worker_port)
    return tf.distribute.get_strategy()


def _tpu_strategy(workers: WorkerEnv, worker_port: int) -> tf.distribute.TPUStrategy:
    if workers.num_workers > 1:
        # Single-client TensorFlow: every host serves; worker 0 is also the client that drives them,
        # so its server runs in a child process next to it.
        if workers.worker_id != 0:
            serve_forever(workers, worker_port)
        subprocess.Popen([sys.executable, "-m", "tpujob_trainer", "serve"], env=os.environ.copy())
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu_resolver_target(workers, worker_port)
    )
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def serve_forever(workers: WorkerEnv, worker_port: int) -> None:
    """Run this host's TensorFlow server for the TPU client on worker 0; returns only on exit."""
    cluster = tf.train.ClusterSpec({"worker": worker_addresses(workers, worker_port)})
    log.info("serving TPU worker %d for the client on worker 0 (%s)", workers.worker_id, cluster.as_dict())
    server = tf.distribute.Server(cluster, job_name="worker", task_index=workers.worker_id, protocol="grpc")
    server.join()
    raise SystemExit(c.EXIT_CODE_SUCCEEDED)
