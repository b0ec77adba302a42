"""The trainer's Prometheus metrics: one prefix, base units, every series present from the start."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tpujob_trainer.constants import METRICS_PREFIX as P

STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SAVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class TrainerMetrics:
    """Own registry, so several trainers can live in one process (tests, benchmarks)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.info = Gauge(
            f"{P}info", "Always 1; labels describe the run", ["strategy", "model", "data"], registry=r
        )
        self.global_step = Gauge(
            f"{P}global_step", "Training step reached, including resumed steps", registry=r
        )
        self.target_steps = Gauge(f"{P}target_steps", "Step at which training ends", registry=r)
        self.steps = Counter(f"{P}steps", "Steps run by this process", registry=r)
        self.examples = Counter(f"{P}examples", "Training examples this process fed", registry=r)
        self.step_duration = Histogram(
            f"{P}step_duration_seconds",
            "Wall time per step, input included",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.examples_per_second = Gauge(
            f"{P}examples_per_second",
            "Examples this process fed per second, since the last report",
            registry=r,
        )
        self.loss = Gauge(f"{P}loss", "Training loss, mean since the last report", registry=r)
        self.input_wait = Counter(
            f"{P}input_wait_seconds", "Time the step loop waited for the input pipeline", registry=r
        )
        self.checkpoint_save_duration = Histogram(
            f"{P}checkpoint_save_duration_seconds",
            "Time to save a checkpoint",
            buckets=SAVE_BUCKETS,
            registry=r,
        )
        self.last_checkpoint_step = Gauge(
            f"{P}last_checkpoint_step", "Step of the last checkpoint saved (0: none yet)", registry=r
        )
        self.last_checkpoint_timestamp = Gauge(
            f"{P}last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint saved", registry=r
        )
        self.test_accuracy = Gauge(
            f"{P}test_accuracy", "Accuracy on the test split after training", registry=r
        )

    def serve(self, port: int, address: str = "") -> None:
        """Serve /metrics on `port` (0: not at all) of `address` (default: every interface), in a daemon
        thread. The operator reads the step counter there (the trainer contract)."""
        if port:
            start_http_server(port, addr=address or "0.0.0.0", registry=self.registry)
