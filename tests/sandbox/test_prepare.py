"""`make test`'s prepare step: every step runs at once, and its outcome says what a test will meet."""

from __future__ import annotations

import threading

from tests.prepare import run_steps
from tests.trainer.podman_image import ImageToolsMissing


def test_steps_run_side_by_side_and_each_outcome_is_reported() -> None:
    both_started = threading.Barrier(2, timeout=10)  # a step run after the other would break the barrier

    def builds() -> None:
        both_started.wait()

    def no_podman() -> None:
        both_started.wait()
        raise ImageToolsMissing("the image test needs podman")

    def broken() -> None:
        raise OSError("disk full")

    outcomes = run_steps({"a": builds, "b": no_podman, "c": broken})

    assert outcomes["a"].startswith("ok in ")
    assert outcomes["b"] == "unavailable here, left to its tests: the image test needs podman"
    assert outcomes["c"] == "FAILED: OSError: disk full"
