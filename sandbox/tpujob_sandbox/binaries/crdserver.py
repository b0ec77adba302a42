"""Kubernetes 1.36's CRD server (k8s.io/apiextensions-apiserver) and etcd 3.5, built from Debian's packages.

GKE runs Kubernetes 1.33 to 1.36; the test bed's kube-apiserver is Debian bookworm's 1.20, which knows no
CEL (`x-kubernetes-validations`), no ratcheting and no native sidecars. No registry here offers a newer
kube-apiserver, but Debian's unstable suite packages Go and the Kubernetes 0.36 libraries
(`golang-k8s-apiextensions-apiserver-dev` and its `golang-*-dev` dependencies), enough to build the CRD
server that kube-apiserver runs in process: CRDs, custom resources, their CEL, printer columns and
ratcheting. The packages are downloaded (`apt-get download`) through a private APT configuration that
lists that suite and unpacked with `dpkg-deb -x`, never installed: installing their build dependencies
would replace this machine's libc. The build is GOPATH mode over the unpacked sources, as Debian builds
its own Go packages. etcd 3.5 comes from the same suite: 1.36's storage layer expects it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from tpujob_sandbox.binaries.steps import (
    BinariesUnavailable,
    Progress,
    build_failed,
    run_step,
    stderr_progress,
)
from tpujob_sandbox.machine import cache_root

SUITE = "unstable"
SERVER_PACKAGE = "golang-k8s-apiextensions-apiserver-dev"
ETCD_PACKAGE = "etcd-server"
SERVER = "apiextensions-apiserver"
ETCD = "etcd"
BINARIES = (SERVER, ETCD)
GO_PACKAGE = "k8s.io/apiextensions-apiserver"
CACHE_PREFIX = "apiextensions-apiserver-"
# The Go sources and the toolchain among the server's recursive dependencies (its C and tooling
# dependencies are left out: GOPATH mode with CGO off needs none).
_WANTED = re.compile(r"^golang-(.+-dev|1\.[0-9]+-(go|src))$")
SOURCES_LIST = f"""\
# Written by the tpujob test bed: Debian's {SUITE} suite, read only to download the Kubernetes 1.36
# CRD server's Go sources and etcd 3.5. Nothing from it is installed.
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian {SUITE} main
"""
HOW_TO_AVOID_THE_BUILD = (
    "Set KUBEBUILDER_ASSETS to a folder with a Kubernetes 1.25+ kube-apiserver (CEL in process), or put "
    f"`{SERVER}` and etcd 3.5 into a folder named {CACHE_PREFIX}<version> under {cache_root()}, or set "
    "KUBECONFIG to test against an existing cluster."
)


def cached_server() -> Path | None:
    """The newest complete cache folder, if any: found offline, without asking Debian what is current."""
    folders = sorted(cache_root().glob(f"{CACHE_PREFIX}*"), key=lambda p: _version_key(p.name))
    complete = [f for f in folders if f.is_dir() and all(os.access(f / b, os.X_OK) for b in BINARIES)]
    return complete[-1] if complete else None


def kubernetes_version(package_version: str) -> str:
    """The Kubernetes release of the k8s.io libraries' Debian version: 0.36.4-1 -> 1.36.4."""
    upstream = package_version.split("-")[0]
    return "1." + upstream.removeprefix("0.") if upstream.startswith("0.") else upstream


def _version_key(name: str) -> list[int]:
    return [int(part) for part in re.findall(r"[0-9]+", name.removeprefix(CACHE_PREFIX))]


class _PrivateApt:
    """apt-get and apt-cache over their own lists and cache: the machine's APT configuration is untouched."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        for sub in ("lists/partial", "archives/partial", "cache"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / "sources.list").write_text(SOURCES_LIST)
        (folder / "status").touch()

    def options(self) -> list[str]:
        settings = {
            "Dir::Etc::SourceList": self.folder / "sources.list",
            "Dir::Etc::SourceParts": "/dev/null",
            "Dir::State::Lists": self.folder / "lists",
            "Dir::State::status": self.folder / "status",
            "Dir::Cache": self.folder / "cache",
            "Dir::Cache::archives": self.folder / "archives",
            "APT::Architecture": "amd64",
            "APT::Sandbox::User": "root",
            "Debug::NoLocking": "1",
        }
        return [arg for key, value in settings.items() for arg in ("-o", f"{key}={value}")]

    def output(self, *args: str) -> str:
        return subprocess.run(
            ["apt-cache", *self.options(), *args], check=True, capture_output=True, text=True
        ).stdout


def package_version(show_output: str) -> str:
    """The Version: field of `apt-cache show` (the first record: the candidate)."""
    match = re.search(r"^Version: (\S+)$", show_output, re.MULTILINE)
    if match is None:
        raise BinariesUnavailable(f"Debian {SUITE} does not list {SERVER_PACKAGE}")
    return match.group(1)


def wanted_packages(depends_output: str) -> list[str]:
    """From `apt-cache depends --recurse`: the Go sources and the toolchain (package lines are unindented;
    virtual packages come in angle brackets)."""
    names = {line.strip() for line in depends_output.splitlines() if line and not line[0].isspace()}
    return sorted(name for name in names if _WANTED.match(name))


def build_crd_server(progress: Progress = stderr_progress) -> Path:
    """Download, unpack and build into the cache; returns the cache folder."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BinariesUnavailable(
            f"No {SERVER} in {cache_root()} and cannot build one: the build needs Debian's apt-get "
            "(as root, for its caches). " + HOW_TO_AVOID_THE_BUILD
        )
    started = time.monotonic()
    apt = _PrivateApt(cache_root() / "apt-unstable")
    try:
        progress(f"reading Debian {SUITE}'s package lists (its own APT folder, {apt.folder})")
        run_step(["apt-get", *apt.options(), "-qq", "update"], progress)
        version = package_version(apt.output("show", SERVER_PACKAGE))
        depends = apt.output(
            "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
            "--no-breaks", "--no-replaces", "--no-enhances", SERVER_PACKAGE,
        )  # fmt: skip
        packages = [*wanted_packages(depends), ETCD_PACKAGE]
        cache = cache_root() / f"{CACHE_PREFIX}{version}"
        workdir = cache.with_name(f"build-{cache.name}")
        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / "debs").mkdir(parents=True)
        progress(f"building the CRD server {version} into {cache} (once: download, unpack, then Go: minutes)")
        progress(f"downloading {len(packages)} packages from Debian {SUITE}")
        run_step(["apt-get", *apt.options(), "-qq", "download", *packages], progress, cwd=workdir / "debs")
        root = workdir / "root"
        debs = sorted((workdir / "debs").glob("*.deb"))
        progress(f"unpacking {len(debs)} packages into {root} (never installed)")
        for deb in debs:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        compile_server(root, workdir, progress)
        install_into_cache(workdir, root, cache)
    except subprocess.CalledProcessError as error:
        raise build_failed("the CRD server", error, HOW_TO_AVOID_THE_BUILD) from error
    shutil.rmtree(workdir, ignore_errors=True)
    progress(f"built the CRD server in {time.monotonic() - started:.0f} s")
    return cache


def compile_server(root: Path, workdir: Path, progress: Progress) -> None:
    (goroot,) = sorted(root.glob("usr/lib/go-1.*"))[-1:]
    env = {
        **os.environ,
        "GOROOT": str(goroot),
        "PATH": f"{goroot / 'bin'}:{os.environ.get('PATH', '')}",
        # GOPATH mode over Debian's unpacked sources, offline: no module proxy, no toolchain download.
        "GO111MODULE": "off",
        "GOPATH": str(root / "usr" / "share" / "gocode"),
        "GOCACHE": str(workdir / "gocache"),
        "GOFLAGS": "",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
    }
    progress(f"compiling {GO_PACKAGE} with {goroot.name} (the long part)")
    output = workdir / SERVER
    run_step(
        ["go", "build", "-o", str(output), "-ldflags", "-s -w", GO_PACKAGE], progress, cwd=workdir, env=env
    )


def install_into_cache(workdir: Path, root: Path, cache: Path) -> None:
    staging = cache.with_name(cache.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    shutil.copy2(workdir / SERVER, staging / SERVER)
    shutil.copy2(root / "usr" / "bin" / "etcd", staging / ETCD)
    # Rename last so an interrupted build never leaves a cache that looks complete.
    shutil.rmtree(cache, ignore_errors=True)
    staging.rename(cache)
