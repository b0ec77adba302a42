"""Build and run the trainer image with podman/buildah on a machine without a registry or Docker.

The base is Debian bookworm made by debootstrap and imported once per machine (podman's image
store keeps it); builds use chroot isolation, which needs no container runtime privileges.
Run as a script to build by hand: `python tests/trainer/podman_image.py [cpu|tpu]`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = "localhost/tpujob-debian-base:bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the Dockerfile needs from the base: Python 3.11 with venv, CA certificates, useradd.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
TOOLS = {"podman": "podman", "buildah": "buildah", "debootstrap": "debootstrap"}
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


class ImageToolsMissing(RuntimeError):
    pass


def ensure_tools() -> None:
    """Install podman, buildah and debootstrap with apt-get when they are missing (CI runs as root)."""
    missing = [package for tool, package in TOOLS.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageToolsMissing(
            f"the image test needs {', '.join(missing)}: install them (Debian: apt-get install "
            f"{' '.join(missing)}) or deselect it with -m 'not image'"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)


def image_exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name], check=False).returncode == 0


def ensure_base_image() -> None:
    """debootstrap Debian bookworm and import it, unless an earlier run already did."""
    if image_exists(BASE_IMAGE):
        return
    with tempfile.TemporaryDirectory(prefix="tpujob-debootstrap-") as root:
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={BASE_PACKAGES}",
                "bookworm",
                root,
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        shutil.rmtree(Path(root) / "var/cache/apt/archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["podman", "import", "--change", "CMD=/bin/bash", "-", BASE_IMAGE], stdin=tar.stdout, check=True
        )
        tar.wait()


def build_trainer_image(variant: str, tag: str) -> float:
    """Build trainer-image/Dockerfile; returns the seconds it took."""
    return build_image(REPO / "trainer-image", tag, {"VARIANT": variant})


def build_image(
    context: Path,
    tag: str,
    build_args: dict[str, str] | None = None,
    *,
    dockerfile: Path | None = None,
    ignorefile: Path | None = None,
) -> float:
    """Build a Dockerfile FROM the debootstrapped base (chroot isolation); returns the seconds it took."""
    command = ["podman", "build", "--isolation=chroot", "--layers=false"]
    for name, value in {"BASE_IMAGE": BASE_IMAGE, **(build_args or {})}.items():
        command += ["--build-arg", f"{name}={value}"]
    if Path(HOST_CA_BUNDLE).exists():
        # pip inside the build must trust what the host trusts (a proxy may re-sign PyPI's TLS).
        command += ["-v", "/etc/ssl/certs:/etc/ssl/certs:ro", "--build-arg", f"PIP_CERT={HOST_CA_BUNDLE}"]
    if dockerfile is not None:
        command += ["-f", str(dockerfile)]
    if ignorefile is not None:
        command += ["--ignorefile", str(ignorefile)]
    command += ["-t", tag, str(context)]
    started = time.monotonic()
    subprocess.run(command, check=True)
    return time.monotonic() - started


def run_in_image(
    tag: str, command: list[str], env: dict[str, str], *, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` in a working container of `tag` (buildah, chroot isolation), then remove it."""
    container = subprocess.run(
        ["buildah", "from", "--pull-never", tag], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        env_flags = [flag for name, value in env.items() for flag in ("--env", f"{name}={value}")]
        return subprocess.run(
            ["buildah", "run", "--isolation", "chroot", *env_flags, container, "--", *command],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    finally:
        subprocess.run(["buildah", "rm", container], check=False, capture_output=True)


def image_size(tag: str) -> int:
    """The image's size in bytes, as `podman images` reports it (uncompressed layers)."""
    return int(image_config(tag, ".Size"))


def remove_image(tag: str) -> None:
    subprocess.run(["podman", "rmi", tag], check=False, capture_output=True)


def image_config(tag: str, field: str) -> str:
    return subprocess.run(
        ["podman", "image", "inspect", "--format", f"{{{{{field}}}}}", tag],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    ensure_tools()
    ensure_base_image()
    seconds = build_trainer_image(chosen, f"localhost/tpujob-trainer:0.1.0-{chosen}")
    size = image_size(f"localhost/tpujob-trainer:0.1.0-{chosen}")
    print(f"built localhost/tpujob-trainer:0.1.0-{chosen} in {seconds:.0f}s, {size / 1e6:.0f} MB")
