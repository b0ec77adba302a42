"""Build and run the images (operator, CPU and TPU trainer) with podman/buildah on a machine without a
registry or Docker.

The base is Debian bookworm made by debootstrap and imported once per machine (podman's image
store keeps it); builds use chroot isolation, which needs no container runtime privileges.

An image is built once per content: its tag is a digest of what goes into it (the Dockerfile, the build
arguments, the base image and every file its COPY lines take), and a build whose tag exists is skipped.
Nothing is removed after a test. Builds keep their layers, so the CPU and TPU trainer images share the ones
before their TensorFlow, and a code change rebuilds only the last layer.
Run as a script to build by hand: `python tests/trainer/podman_image.py [cpu|tpu]`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tpujob_sandbox.machine import apt_install, machine_lock

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
    apt_install(missing, recommends=True)


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


@dataclass(frozen=True)
class Image:
    """A Dockerfile to build, and how."""

    repository: str  # e.g. localhost/tpujob-trainer
    context: Path
    dockerfile: Path
    build_args: tuple[tuple[str, str], ...] = ()
    ignorefile: Path | None = None
    tag_prefix: str = ""  # e.g. "cpu-": the variants of one repository side by side


OPERATOR = Image(
    "localhost/tpujob-operator",
    REPO,
    REPO / "operator" / "Dockerfile",
    ignorefile=REPO / "operator" / "Dockerfile.dockerignore",
)


def trainer(variant: str) -> Image:
    return Image(
        "localhost/tpujob-trainer",
        REPO / "trainer-image",
        REPO / "trainer-image" / "Dockerfile",
        (("VARIANT", variant),),
        tag_prefix=f"{variant}-",
    )


def copied_files(image: Image) -> list[Path]:
    """Every file the Dockerfile's COPY lines take from the context (build arguments expanded; caches
    such as __pycache__ left out, as the ignore files do)."""
    args = {"BASE_IMAGE": BASE_IMAGE, **dict(image.build_args)}
    text = image.dockerfile.read_text().replace("\\\n", " ")
    found: list[Path] = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY":
            continue
        sources = [w for w in words[1:-1] if not w.startswith("--")]
        for source in sources:
            expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], ""), source)
            path = image.context / expanded
            if path.is_dir():
                found.extend(
                    p
                    for p in path.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
                )
            else:
                found.append(path)
    return sorted(set(found))


def content_tag(image: Image) -> str:
    """repository:[prefix]<digest> of what goes into the image: the Dockerfile, its ignore file, the build
    arguments, the base image's ID and the copied files (by path and content)."""
    digest = hashlib.sha256()
    digest.update(image.dockerfile.read_bytes())
    if image.ignorefile is not None:
        digest.update(image.ignorefile.read_bytes())
    digest.update(repr(sorted(image.build_args)).encode())
    digest.update(image_config(BASE_IMAGE, ".Id").encode())
    for path in copied_files(image):
        digest.update(str(path.relative_to(image.context)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{image.repository}:{image.tag_prefix}{digest.hexdigest()[:16]}"


def ensure_image(image: Image) -> str:
    """The image's content tag, built first unless an earlier run built the same content. One build at a
    time per repository on this machine: a second process (an xdist worker, `make test`'s prepare step)
    waits, then finds the tag built."""
    ensure_tools()
    with machine_lock("podman-base"):
        ensure_base_image()
    with machine_lock(f"podman-{image.repository.rsplit('/', 1)[-1]}"):
        tag = content_tag(image)
        if image_exists(tag):
            print(f"{tag}: built before, same content")
            return tag
        seconds = build_image(
            image.context,
            tag,
            dict(image.build_args),
            dockerfile=image.dockerfile,
            ignorefile=image.ignorefile,
        )
        print(f"built {tag} in {seconds:.0f}s")
        remove_older_builds(image, keep=tag)
    return tag


def remove_older_builds(image: Image, keep: str) -> None:
    """The image's tags from earlier content: one build per variant stays, so the store does not grow with
    every change (their layers shared with `keep` stay too)."""
    listed = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", image.repository],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    prefix = f"{image.repository}:{image.tag_prefix}"
    older = [name for name in listed if name.startswith(prefix) and name != keep]
    if older:
        subprocess.run(["podman", "rmi", *older], check=False, capture_output=True)


def build_image(
    context: Path,
    tag: str,
    build_args: dict[str, str] | None = None,
    *,
    dockerfile: Path | None = None,
    ignorefile: Path | None = None,
) -> float:
    """Build a Dockerfile FROM the debootstrapped base (chroot isolation, layers kept for the next build);
    returns the seconds it took."""
    command = ["podman", "build", "--isolation=chroot", "--layers"]
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
    tag: str,
    command: list[str],
    env: dict[str, str],
    *,
    timeout: float | None = None,
    volumes: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `command` in a working container of `tag` (buildah, chroot isolation), then remove it. `volumes`:
    host directory -> path in the container, bind-mounted."""
    container = subprocess.run(
        ["buildah", "from", "--pull-never", tag], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        env_flags = [flag for name, value in env.items() for flag in ("--env", f"{name}={value}")]
        volume_flags = [
            flag for host, path in (volumes or {}).items() for flag in ("--volume", f"{host}:{path}")
        ]
        return subprocess.run(
            ["buildah", "run", "--isolation", "chroot", *env_flags, *volume_flags, container, "--", *command],
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


def image_config(tag: str, field: str) -> str:
    return subprocess.run(
        ["podman", "image", "inspect", "--format", f"{{{{{field}}}}}", tag],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    built = ensure_image(OPERATOR if chosen == "operator" else trainer(chosen))
    print(f"{built}: {image_size(built) / 1e6:.0f} MB")
