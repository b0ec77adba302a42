"""The TPU variant of the trainer image (tensorflow-tpu + libtpu): build it with podman, smoke-test it here.

This machine has no TPU, so libtpu is kept from loading (TPU_LOAD_LIBRARY=0, and TPU_SKIP_MDS_QUERY=1 in
case it did): loaded, it would query the cloud metadata server, which a test must never reach. The
trainer then runs a few CPU steps with the default strategy; and without TPU_LOAD_LIBRARY=0 the TPU
check refuses at once (exit 2) instead of hanging. Marked `image` like the CPU image test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer import podman_image

NO_TPU = {"TPU_LOAD_LIBRARY": "0", "TPU_SKIP_MDS_QUERY": "1"}
WORKER = {"TPUJOB_CHECKPOINT_DIR": "/tmp/checkpoints", "TPUJOB_METRICS_PORT": "0", "TPU_WORKER_ID": "0"}


@pytest.fixture(scope="module")
def tpu_image() -> str:
    try:
        tag = podman_image.ensure_image(podman_image.trainer("tpu"))
    except podman_image.ImageToolsMissing as missing:
        pytest.fail(str(missing))
    size = podman_image.image_size(tag)
    print(f"{tag}: {size / 1e6:.0f} MB ({size} bytes)")
    return tag


@pytest.mark.image
@pytest.mark.timeout(1800)
def test_tpu_image_has_tensorflow_tpu_and_libtpu_and_trains_on_the_cpu(tpu_image: str) -> None:
    assert podman_image.image_config(tpu_image, ".Config.User") == "1000:1000"
    assert podman_image.image_config(tpu_image, ".Config.Entrypoint") == "[python -m tpujob_trainer]"

    versions = podman_image.run_in_image(
        tpu_image,
        [
            "python",
            "-c",
            "import importlib.metadata as m, tensorflow as tf; "
            "print(tf.__version__, m.version('tensorflow-tpu'), m.version('libtpu'))",
        ],
        NO_TPU,
    )
    assert versions.returncode == 0, versions.stderr[-3000:]
    assert versions.stdout.split() == ["2.20.0", "2.20.0", "0.0.14"]

    usage = podman_image.run_in_image(tpu_image, ["python", "-m", "tpujob_trainer", "--help"], NO_TPU)
    assert usage.returncode == 0, usage.stderr[-3000:]
    assert "train" in usage.stdout

    result = podman_image.run_in_image(
        tpu_image,
        ["sh", "-c", "id -u && exec python -m tpujob_trainer --steps 20 --strategy default"],
        {**NO_TPU, **WORKER},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "1000"
    summary = json.loads(lines[-1])
    assert (summary["status"], summary["final_step"], summary["strategy"]) == ("succeeded", 20, "default")
    assert "/opt/tpujob/data/digits" in result.stderr


@pytest.mark.image
@pytest.mark.timeout(1800)
def test_tpu_image_without_tpus_refuses_at_once_instead_of_hanging(tpu_image: str, tmp_path: Path) -> None:
    # The termination log is read from a bind mount: a `cat` of it in the container once lost its stdout
    # under load (buildah run's output of a process that ends at once).
    tmp_path.chmod(0o777)  # the image's user (1000) writes it
    result = podman_image.run_in_image(
        tpu_image,
        # The image's own entrypoint: the CLI checks for TPU chips before TensorFlow (and libtpu) load.
        ["python", "-m", "tpujob_trainer", "--steps", "20"],
        {
            **WORKER,
            "TPUJOB_TERMINATION_LOG": "/out/termination-log",
        },  # no TPU_LOAD_LIBRARY=0: libtpu would load
        timeout=120,
        volumes={str(tmp_path): "/out"},
    )
    assert result.returncode == 2, result.stdout + result.stderr[-3000:]
    assert "no TPU chips are attached" in result.stderr
    written = (tmp_path / "termination-log").read_text()
    assert written.startswith("ConfigError: --strategy auto: this is the TPU image"), written
