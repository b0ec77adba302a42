"""Kueue's manager configuration, the part the simulator models (apis/config/v1beta2, defaults.go)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KueueConfig:
    """waitForPodsReady as Kueue v0.19.2 defaults it: on, a 30-minute timeout counted from admission, the
    recovery timeout equal to it, requeuing backoff 60 s doubling up to 3600 s, no limit on requeues
    (requeuingStrategy.backoffLimitCount: past it, Kueue deactivates the Workload)."""

    pods_ready_timeout_seconds: float | None = 30 * 60
    recovery_timeout_seconds: float | None = None  # None: the timeout (defaults.go)
    backoff_base_seconds: float = 60
    backoff_max_seconds: float = 3600
    backoff_limit_count: int | None = None  # None: requeued for ever

    def recovery_seconds(self) -> float | None:
        return (
            self.recovery_timeout_seconds
            if self.recovery_timeout_seconds is not None
            else self.pods_ready_timeout_seconds
        )

    def backoff_seconds(self, count: int) -> float:
        """pkg/util/wait Backoff.WaitTime(count) with factor 2: base*2^(count-1), capped (jitter 0.0001 is
        left out)."""
        return float(min(self.backoff_base_seconds * 2.0 ** (count - 1), self.backoff_max_seconds))
