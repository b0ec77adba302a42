"""Build what the tests need, side by side, before they start: `python -m tests.prepare` (`make test` runs it
beside lint and the type check).

On a machine that never ran the tests, the control plane builds (two Go compiles, minutes each), the three
images (pip installs inside podman builds) and the tools are the cold start. The tests would build each on
first use, one after the other, while the other pytest-xdist worker waits on the same lock; here they run at
once. Each step takes the same machine lock as the fixture that needs it, so a test starting meanwhile
waits and then finds the work done. A step that cannot run on this machine (no root for apt-get, no
podman) is reported and left to its tests, which skip or fail with the same reason.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from tests.chart import tools
from tests.trainer import podman_image
from tpujob_sandbox.binaries import BinariesUnavailable, find_binaries, find_crd_server

UNAVAILABLE = (BinariesUnavailable, podman_image.ImageToolsMissing, tools.ToolMissing)


def _images() -> None:
    # The TPU trainer reuses the CPU trainer's layers, so it follows it; the operator image has its own.
    podman_image.ensure_image(podman_image.trainer("cpu"))
    podman_image.ensure_image(podman_image.trainer("tpu"))


STEPS: dict[str, Callable[[], object]] = {
    # The 1.36 CRD server first in its own step, so it builds beside kube-apiserver 1.20 (find_binaries then
    # finds it in the cache, or waits for this build on the machine lock).
    "CRD server (Kubernetes 1.36)": find_crd_server,
    "control plane (Kubernetes 1.20)": find_binaries,
    "trainer images": _images,
    "operator image": lambda: podman_image.ensure_image(podman_image.OPERATOR),
    "helm, kubectl, prometheus": lambda: (tools.helm(), tools.kubectl(), tools.prometheus()),
    "chromium (the docs' browser test)": tools.chromium,
}


def run_steps(steps: dict[str, Callable[[], object]]) -> dict[str, str]:
    """Run every step in its own thread; the outcome of each ("ok in N s", "unavailable: ...")."""
    outcomes: dict[str, str] = {}

    def run(name: str, step: Callable[[], object]) -> None:
        started = time.monotonic()
        try:
            step()
        except UNAVAILABLE as reason:
            outcomes[name] = f"unavailable here, left to its tests: {reason}"
        except Exception as error:  # reported, and turned into the exit status
            outcomes[name] = f"FAILED: {type(error).__name__}: {error}"
        else:
            outcomes[name] = f"ok in {time.monotonic() - started:.0f} s"

    threads = [threading.Thread(target=run, args=item, name=item[0]) for item in steps.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def main() -> int:
    started = time.monotonic()
    outcomes = run_steps(STEPS)
    for name, outcome in outcomes.items():
        print(f"[prepare] {name}: {outcome}", flush=True)
    print(f"[prepare] done in {time.monotonic() - started:.0f} s", flush=True)
    return 1 if any(outcome.startswith("FAILED") for outcome in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
