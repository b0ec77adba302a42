"""The worker the start-estimate bench runs in each pod (a local process on the test bed): a trainer of a
known length. It steps every STEP_SECONDS up to the steps its one argument names and exits 0, and serves its
step and target as the trainer contract's tpujob_trainer_global_step and tpujob_trainer_target_steps on
TPUJOB_METRICS_ADDRESS:TPUJOB_METRICS_PORT, so the operator reads its progress and ETA (status.progress) as it
does a real trainer's. SIGTERM ends it at once (exit 143)."""

from __future__ import annotations

import os
import signal
import sys
import time

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tpujob.api import trainer_contract as contract

STEP_SECONDS = 0.1


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    registry = CollectorRegistry()
    global_step = Gauge("tpujob_trainer_global_step", "The step reached.", registry=registry)
    target = Gauge("tpujob_trainer_target_steps", "The step training ends at.", registry=registry)
    target.set(steps)
    port = int(os.environ.get(contract.ENV_METRICS_PORT) or 0)
    if port:
        address = os.environ.get(contract.ENV_METRICS_ADDRESS) or "0.0.0.0"
        start_http_server(port, addr=address, registry=registry)
    began = time.monotonic()
    for step in range(1, steps + 1):
        time.sleep(max(began + step * STEP_SECONDS - time.monotonic(), 0.0))  # no drift: a known pace
        global_step.set(step)
    print(f"trained {steps} steps in {time.monotonic() - began:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
