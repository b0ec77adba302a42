"""A JAX program that runs under tpujob on 1 or N TPU hosts (or CPU), with no code change.

It reads the env the operator gives every worker (see "Bring your own image" in the README):
  TPU_WORKER_ID, TPU_WORKER_HOSTNAMES      this host's index in its slice, the slice's hosts
  MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID Multislice only: how many slices, this one's index
  MEGASCALE_COORDINATOR_ADDRESS            Multislice only: slice 0's worker 0
and, with more than one process in all, calls jax.distributed.initialize with what they say:
the coordinator is worker 0 (of slice 0) on JAX's Cloud TPU port, 8482 (JAX_COORDINATOR_PORT
overrides it, JAX_COORDINATOR_ADDRESS the whole address). `tpujob run --local` lists each host as
localhost:PORT: then worker 0's own port is the coordinator's.

Then every process checks that it sees all the others (process_count, an allgather of the
process ids) and trains a linear regression data-parallel: each process makes its own shard of
a synthetic batch, the gradient is a mean over the global batch (an all-reduce across processes).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

JAX_TPU_COORDINATOR_PORT = "8482"  # what jax.distributed picks by itself on Cloud TPU


class Progress:
    """The trainer contract's step counter, served in Prometheus' text format on TPUJOB_METRICS_PORT (all
    interfaces, or TPUJOB_METRICS_ADDRESS), with the standard library alone: the operator shows it in
    status.progress and restarts a trainer that stops progressing (progressDeadlineSeconds)."""

    def __init__(self, target_steps: int) -> None:
        self.step, self.target_steps = 0, target_steps

    def serve(self, env: dict[str, str]) -> None:
        port = int(env.get("TPUJOB_METRICS_PORT", "0"))
        if not port:
            return
        progress = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = (
                    "# TYPE tpujob_trainer_global_step gauge\n"
                    f"tpujob_trainer_global_step {progress.step}\n"
                    "# TYPE tpujob_trainer_target_steps gauge\n"
                    f"tpujob_trainer_target_steps {progress.target_steps}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass  # one line per scrape would drown the training log

        address = (env.get("TPUJOB_METRICS_ADDRESS", ""), port)
        server = http.server.ThreadingHTTPServer(address, Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()


def say(message: str) -> None:
    print(f"[process {jax.process_index()}] {message}", file=sys.stderr, flush=True)


def distributed_args(env: dict[str, str]) -> tuple[str, int, int]:
    """(coordinator address, number of processes, this process's id) from the operator's env."""
    hosts = env.get("TPU_WORKER_HOSTNAMES", "localhost").split(",")
    slices = int(env.get("MEGASCALE_NUM_SLICES", "1"))
    process_id = int(env.get("MEGASCALE_SLICE_ID", "0")) * len(hosts) + int(env.get("TPU_WORKER_ID", "0"))
    first = env.get("MEGASCALE_COORDINATOR_ADDRESS") or hosts[0]
    if env.get("JAX_COORDINATOR_ADDRESS"):
        coordinator = env["JAX_COORDINATOR_ADDRESS"]
    elif ":" in hosts[0]:  # tpujob run --local: localhost:PORT, a port of this worker's own
        coordinator = first
    else:  # GKE: DNS names; Multislice ports (8080, 8471) belong to the TPU runtime
        port = env.get("JAX_COORDINATOR_PORT", JAX_TPU_COORDINATOR_PORT)
        coordinator = f"{first.split(':')[0]}:{port}"
    return coordinator, len(hosts) * slices, process_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-per-process", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    args = parser.parse_args(argv)

    coordinator, processes, process_id = distributed_args(dict(os.environ))
    progress = Progress(args.steps)
    if process_id == 0:
        # Before joining the peers: a port taken fails this process in a second, whereas an error after
        # initialize() waits minutes at JAX's shutdown barrier for peers that wait on it in turn.
        progress.serve(dict(os.environ))
    if processes > 1:
        jax.distributed.initialize(coordinator, num_processes=processes, process_id=process_id)
    say(f"process_count={jax.process_count()} devices={jax.device_count()} coordinator={coordinator}")
    assert jax.process_count() == processes, (jax.process_count(), processes)
    ids = multihost_utils.process_allgather(jnp.array([jax.process_index()]), tiled=True)
    say(f"allgather of process ids: {ids.tolist()}")
    assert ids.tolist() == list(range(processes)), ids

    # Data-parallel linear regression: the batch is sharded over every device of every process.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    batch = NamedSharding(mesh, PartitionSpec("data"))
    true_w, true_b = np.array([2.0, -3.0, 0.5], np.float32), np.float32(1.0)
    rng = np.random.default_rng(seed=jax.process_index())  # each process: its own shard

    def local_shard() -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(size=(args.batch_per_process * jax.local_device_count(), 3)).astype(np.float32)
        return x, x @ true_w + true_b + rng.normal(scale=0.01, size=len(x)).astype(np.float32)

    Params = tuple[jax.Array, jax.Array]

    def loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
        w, b = params
        return jnp.mean((x @ w + b - y) ** 2)

    @jax.jit
    def step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
        value, grads = jax.value_and_grad(loss)(params, x, y)  # mean over the global batch
        return jax.tree.map(lambda p, g: p - args.learning_rate * g, params, grads), value

    params = (jnp.zeros(3), jnp.zeros(()))
    for number in range(1, args.steps + 1):
        x, y = (jax.make_array_from_process_local_data(batch, a) for a in local_shard())
        params, value = step(params, x, y)
        progress.step = number
        if number % 50 == 0 or number == args.steps:
            say(f"step {number} loss {float(value):.5f}")
    w = np.asarray(params[0])
    say(f"learned w={', '.join(f'{v:.3f}' for v in w)} b={float(params[1]):.3f} (true: 2, -3, 0.5; 1)")
    assert np.allclose(w, true_w, atol=0.05), w
    if jax.process_index() == 0 and os.environ.get("TPUJOB_SUMMARY_FILE"):  # tpujob run --local
        summary = {"process_count": jax.process_count(), "allgather": ids.tolist(), "loss": float(value)}
        with open(os.environ["TPUJOB_SUMMARY_FILE"], "w") as file:
            json.dump(summary, file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
