"""The operator image: lint operator/Dockerfile; build it with podman the way the trainer image is built
(from the debootstrapped Debian base, tests/trainer/podman_image.py) and run `tpujob` inside it."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.chart.conftest import REPO
from tests.trainer import podman_image

DOCKERFILE = podman_image.OPERATOR.dockerfile
IGNOREFILE = podman_image.OPERATOR.ignorefile
assert IGNOREFILE is not None


def test_dockerfile_is_clean_under_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(REPO / ".venv" / "bin" / "hadolint")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_build_context_is_only_what_the_image_installs() -> None:
    """The context is the repository root (pyproject.toml is there): the ignore file keeps .venv out."""
    lines = [line for line in IGNOREFILE.read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    copied = {line[1:] for line in lines if line.startswith("!")}
    for source in copied:
        assert (REPO / source).exists(), source
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert any(source == c or source.startswith(c + "/") for c in copied), source


@pytest.mark.image
@pytest.mark.timeout(900)
def test_image_builds_and_runs_the_operator_as_a_non_root_user() -> None:
    try:
        tag = podman_image.ensure_image(podman_image.OPERATOR)
    except podman_image.ImageToolsMissing as missing:
        pytest.fail(str(missing))
    assert podman_image.image_config(tag, ".Config.User") == "10001:10001"
    assert podman_image.image_config(tag, ".Config.Entrypoint") == "[tpujob]"
    assert podman_image.image_config(tag, ".Config.Cmd") == "[operator]"
    # Every module the operator imports at start is in the image: the handlers register with kopf.
    check = (
        "id -u && tpujob --version && tpujob operator --help >/dev/null && "
        "python -c 'import tpujob.handlers, tpujob.gke; print(\"handlers ok\")'"
    )
    result = podman_image.run_in_image(tag, ["sh", "-c", check], {})
    assert result.returncode == 0, result.stderr[-3000:]
    uid, version, handlers = result.stdout.strip().splitlines()
    assert (uid, version, handlers) == ("10001", "tpujob 0.1.0", "handlers ok")
