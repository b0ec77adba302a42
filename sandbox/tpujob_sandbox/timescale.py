"""The test bed's clock: its simulated GKE runs `time_scale` times GKE's durations, and the operator on it
polls GKE at the same scale (a light module: `tpujob sandbox operator` reads it without the client
libraries)."""

from __future__ import annotations

# A pass costs the operator about 20 ms of CPU: on a fast test bed, a poll no more often than this.
MIN_POLL_PROVISIONING_SECONDS = 0.2


def poll_provisioning_seconds(time_scale: float) -> float:
    """TPUJOB_POLL_PROVISIONING_SECONDS for an operator on a test bed whose GKE runs at `time_scale`: the
    operator's default poll (5 s against pools that take minutes), scaled as GKE is, not below the floor."""
    from tpujob.status import DEFAULT_POLL_PROVISIONING_SECONDS

    return max(DEFAULT_POLL_PROVISIONING_SECONDS * time_scale, MIN_POLL_PROVISIONING_SECONDS)
