"""The trainer image: lint the Dockerfile; build the CPU variant with podman and train inside it.

The build takes about 2 minutes here (plus about 1 minute, once per machine, to debootstrap the
base image), and only when what goes into the image changed (podman_image.ensure_image); marked `image`,
CI runs it too (`make test` selects every marker).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.trainer import podman_image
from tests.trainer.conftest import REPO

DOCKERFILE = REPO / "trainer-image" / "Dockerfile"


def test_dockerfile_is_clean_under_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.image
@pytest.mark.timeout(1500)
def test_cpu_image_builds_and_trains_as_a_non_root_user() -> None:
    try:
        tag = podman_image.ensure_image(podman_image.trainer("cpu"))
    except podman_image.ImageToolsMissing as missing:
        pytest.fail(str(missing))

    assert podman_image.image_config(tag, ".Config.User") == "1000:1000"
    assert podman_image.image_config(tag, ".Config.Entrypoint") == "[python -m tpujob_trainer]"
    # The entrypoint with the env the operator sets; data baked into the image at build time.
    result = podman_image.run_in_image(
        tag,
        ["sh", "-c", "id -u && exec python -m tpujob_trainer --steps 60"],
        {"TPUJOB_CHECKPOINT_DIR": "/tmp/checkpoints", "TPUJOB_METRICS_PORT": "0", "TPU_WORKER_ID": "0"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    uid, summary_line = result.stdout.strip().splitlines()[0], result.stdout.strip().splitlines()[-1]
    assert uid == "1000"
    summary = json.loads(summary_line)
    assert (summary["status"], summary["final_step"], summary["strategy"]) == ("succeeded", 60, "default")
    assert summary["checkpoint"] == "/tmp/checkpoints/ckpt-60"
    assert "/opt/tpujob/data/digits" in result.stderr  # no download, no data written at run time
