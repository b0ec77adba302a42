"""The worker the recovery bench runs in each pod (a local process on the test bed): it steps every 0.1 s
and prints when, with its attempt, so the bench reads from its log when training resumed. Under
restartStrategy RecreateSlice (TPUJOB_RESTART_ATTEMPT_FILE set) it runs under the trainer's in-place
supervisor (tpujob_trainer.inplace), as the default trainer does. SIGTERM ends it at once (exit 143), as a
trainer that has just saved. No restore and no compilation: the bench measures what the operator and
Kubernetes cost, not what a model's restore costs. Its step is also served as the trainer contract's
tpujob_trainer_global_step on TPUJOB_METRICS_ADDRESS:TPUJOB_METRICS_PORT, so the operator reads it
(status.progress) and records each restart's recovery (status.restartHistory), which the bench compares
with its own marks."""

from __future__ import annotations

import os
import signal
import sys
import time

from prometheus_client import CollectorRegistry, Gauge, start_http_server

from tpujob.api import trainer_contract as contract
from tpujob_trainer import inplace

STEP_SECONDS = 0.1


def main() -> int:
    env = dict(os.environ)
    if inplace.wanted(env):
        return inplace.supervise([], env, program=[sys.executable, os.path.abspath(__file__)])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    attempt = env.get("TPUJOB_ATTEMPT", "0")
    registry = CollectorRegistry()
    global_step = Gauge("tpujob_trainer_global_step", "The step reached.", registry=registry)
    port = int(env.get(contract.ENV_METRICS_PORT) or 0)
    if port:
        start_http_server(port, addr=env.get(contract.ENV_METRICS_ADDRESS) or "0.0.0.0", registry=registry)
    step = 0
    while True:
        step += 1
        global_step.set(step)
        print(f"step {step} attempt {attempt} at {time.time():.3f}", flush=True)
        time.sleep(STEP_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
