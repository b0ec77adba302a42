"""Worker 0's step counter, read from its metrics endpoint while the job runs: the trainer contract's series
in Prometheus' text format (README, "Bring your own image"). The operator reaches pods as Prometheus does,
by pod IP and the trainer container's port named `metrics`; the trainer needs no Kubernetes permission."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tpujob import status as s

# The contract's series (tpujob_trainer_*: trainer-image/tpujob_trainer/metrics.py serves them).
STEP = "tpujob_trainer_global_step"
TARGET_STEPS = "tpujob_trainer_target_steps"
CHECKPOINT_STEP = "tpujob_trainer_last_checkpoint_step"
CHECKPOINT_TIME = "tpujob_trainer_last_checkpoint_timestamp_seconds"
# A read must not hold a pass: the endpoint answers in milliseconds or is not there.
READ_TIMEOUT_SECONDS = 2.0


def parse(text: str, attempt: int) -> s.ProgressSample | None:
    """The sample in a /metrics page; None without a step counter. Zero gauges are unset values (the
    trainer sets every series at start: a target or checkpoint of 0 is none yet)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (STEP, TARGET_STEPS, CHECKPOINT_STEP, CHECKPOINT_TIME) and not sample.labels:
                values[sample.name] = sample.value
    if STEP not in values:
        return None

    def whole(name: str) -> int | None:
        return int(values[name]) if values.get(name) else None

    return s.ProgressSample(
        attempt=attempt,
        step=int(values[STEP]),
        target_steps=whole(TARGET_STEPS),
        checkpoint_step=whole(CHECKPOINT_STEP),
        checkpoint_time=values.get(CHECKPOINT_TIME) or None,
    )


class ProgressReader:
    def __init__(self, timeout: float = READ_TIMEOUT_SECONDS) -> None:
        self.timeout = timeout

    def read(self, pod: s.PodView) -> tuple[s.ProgressSample | None, str]:
        """(the sample, "") or (None, why not) for a running worker pod."""
        if not pod.ip or not pod.metrics_port:
            return None, "the pod declares no metrics port, or has no IP yet"
        url = f"http://{pod.ip}:{pod.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as answer:
                text = answer.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError) as error:
            return None, f"GET {url}: {error}"
        try:
            sample = parse(text, pod.attempt)
        except ValueError as error:
            return None, f"GET {url}: not Prometheus text ({error})"
        return (sample, "") if sample is not None else (None, f"GET {url}: no {STEP}")
