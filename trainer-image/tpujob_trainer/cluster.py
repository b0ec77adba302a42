"""Which distribution strategy to use and how the workers find each other. Pure decisions.

The same worker environment (`TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES`) wires both cases:
- TPU: TensorFlow is single-client. Worker 0 drives a TensorFlow server on every host, found
  through the hostnames (GKE has no TPU API to discover them); other workers only serve.
- CPU/GPU: MultiWorkerMirroredStrategy, with TF_CONFIG derived from the same hostnames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from tpujob_trainer.config import ConfigError, WorkerEnv

StrategyKind = Literal["tpu", "multi-worker", "mirrored", "default"]


@dataclass(frozen=True)
class Accelerators:
    tpu_chips: int = 0
    gpus: int = 0


@dataclass(frozen=True)
class StrategyChoice:
    kind: StrategyKind
    reason: str


def choose_strategy(requested: str, found: Accelerators, workers: WorkerEnv) -> StrategyChoice:
    """Decide the strategy from what was asked for, the chips found and the number of workers."""
    if workers.num_slices > 1:
        raise ConfigError(
            f"MEGASCALE_NUM_SLICES={workers.num_slices}: the TensorFlow trainer runs one slice; "
            "use spec.tpu.slices: 1 or a JAX/PyTorch image for Multislice"
        )
    hosts = f"{workers.num_workers} worker(s)"
    if requested == "auto":
        if found.tpu_chips:
            return StrategyChoice("tpu", f"auto: {found.tpu_chips} TPU chip(s) attached, {hosts}")
        if workers.num_workers > 1:
            return StrategyChoice("multi-worker", f"auto: no TPU, {hosts} in TPU_WORKER_HOSTNAMES")
        if found.gpus > 1:
            return StrategyChoice("mirrored", f"auto: no TPU, one worker with {found.gpus} GPUs")
        return StrategyChoice("default", f"auto: no TPU, one worker, {found.gpus} GPU(s)")
    if requested == "tpu" and not found.tpu_chips:
        raise ConfigError(
            "--strategy tpu: no TPU chips are attached to this worker (no /dev/accel* or /dev/vfio/*)"
        )
    if requested in ("mirrored", "default") and workers.num_workers > 1:
        raise ConfigError(
            f"--strategy {requested}: runs on one worker, but TPU_WORKER_HOSTNAMES lists {hosts}"
        )
    if requested not in ("tpu", "multi-worker", "mirrored", "default"):
        raise ConfigError(
            f"--strategy: {requested!r} is not one of auto, tpu, multi-worker, mirrored, default"
        )
    return StrategyChoice(requested, f"requested with --strategy ({hosts})")  # type: ignore[arg-type]


def host_and_port(entry: str, default_port: int) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep:
        return entry, default_port
    if not port.isdigit():
        raise ConfigError(f"TPU_WORKER_HOSTNAMES: {entry!r} has a bad port; expected host or host:port")
    return host, int(port)


def worker_addresses(workers: WorkerEnv, default_port: int) -> list[str]:
    return [":".join(map(str, host_and_port(entry, default_port))) for entry in workers.hostnames]


def tf_config_for(workers: WorkerEnv, default_port: int) -> dict[str, object]:
    """TF_CONFIG for MultiWorkerMirroredStrategy: every worker in one "worker" job, 0 is chief."""
    if workers.tf_config:
        try:
            given = json.loads(workers.tf_config)
        except json.JSONDecodeError as error:
            raise ConfigError(f"TF_CONFIG: not valid JSON ({error})") from None
        if not isinstance(given, dict):
            raise ConfigError("TF_CONFIG: must be a JSON object with 'cluster' and 'task'")
        return given
    return {
        "cluster": {"worker": worker_addresses(workers, default_port)},
        "task": {"type": "worker", "index": workers.worker_id},
    }


def tpu_resolver_target(workers: WorkerEnv, default_port: int) -> str:
    """The `tpu` argument of TPUClusterResolver: 'local' on one host, else every host's server.

    TensorFlow's TPU client reads a comma-separated list of grpc:// addresses as the worker
    list without calling the Cloud TPU API (its GKE path), which is what GKE pods need.
    """
    if workers.num_workers == 1:
        return "local"
    return ",".join(f"grpc://{address}" for address in worker_addresses(workers, default_port))
