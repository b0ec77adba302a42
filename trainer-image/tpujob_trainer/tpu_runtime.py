"""The TPU image without TPUs: found out in bounded time, before TensorFlow loads libtpu.

tensorflow-tpu loads libtpu as TensorFlow starts (unless TPU_LOAD_LIBRARY=0), and libtpu then asks the
cloud metadata server which TPU it is on, retrying for minutes where there is none: without this check a
TPU-image worker scheduled without TPU chips hangs instead of failing. It imports no TensorFlow.
"""

from __future__ import annotations

import glob
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Mapping

from tpujob_trainer.config import ConfigError

ENV_TPU_LOAD_LIBRARY = "TPU_LOAD_LIBRARY"
# Long enough for libtpu to bring up the chips of a healthy host; a hung start-up ends here.
PROBE_TIMEOUT_SECONDS = 180.0
# Run in a child process: a libtpu that hangs hangs there, and the child can be killed.
_PROBE = "import tensorflow as tf; print(len(tf.config.list_physical_devices()))"


class TpuUnavailable(ConfigError):
    """The TPU image cannot reach TPUs here: bad settings (exit 2), not a failure worth retrying."""


def tpu_chip_count() -> int:
    # TPU VMs expose chips as /dev/accel* (v4, v5e) or /dev/vfio/<n> (v5p, v6e and later).
    return len(glob.glob("/dev/accel*")) or len(
        [path for path in glob.glob("/dev/vfio/*") if path != "/dev/vfio/vfio"]
    )


def libtpu_installed() -> bool:
    return importlib.util.find_spec("libtpu") is not None


def probe_tensorflow(timeout: float) -> str | None:
    """Start TensorFlow (and with it libtpu) in a child; None when it did not finish within `timeout`."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return f"failed ({lines[-1] if lines else f'exit code {result.returncode}'})"
    return "ok"


def check_tpu_runtime(
    requested_strategy: str,
    env: Mapping[str, str],
    *,
    installed: Callable[[], bool] = libtpu_installed,
    chips: Callable[[], int] = tpu_chip_count,
    probe: Callable[[float], str | None] = probe_tensorflow,
    timeout: float = PROBE_TIMEOUT_SECONDS,
) -> None:
    """Raise TpuUnavailable when importing TensorFlow would hang on libtpu; call it before that import.

    Nothing to check on the CPU image or with TPU_LOAD_LIBRARY=0 (libtpu is not loaded). Without chips
    the answer needs no probe; with chips, TensorFlow is started once in a child with a time limit.
    """
    if env.get(ENV_TPU_LOAD_LIBRARY, "").strip() == "0" or not installed():
        return
    strategy = f"--strategy {requested_strategy}"
    found = chips()
    if not found:
        raise TpuUnavailable(
            f"{strategy}: this is the TPU image (libtpu installed) but no TPU chips are attached to this "
            f"worker (no /dev/accel* or /dev/vfio/*), and loading libtpu would hang; run it on a TPU node, "
            f"use the cpu image, or set {ENV_TPU_LOAD_LIBRARY}=0 to train without TPUs"
        )
    outcome = probe(timeout)
    if outcome is None:
        raise TpuUnavailable(
            f"{strategy}: TensorFlow did not finish loading libtpu for the {found} TPU chip(s) within "
            f"{timeout:.0f}s (another process holding them, or no metadata server?)"
        )
    if outcome != "ok":
        raise TpuUnavailable(
            f"{strategy}: TensorFlow could not load libtpu for the {found} TPU chip(s): {outcome}"
        )
