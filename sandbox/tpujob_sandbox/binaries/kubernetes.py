"""The Kubernetes 1.20 control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd), built
from Debian bookworm's source package.

No Docker engine runs where the tests run, so kind and k3d are out. Debian ships the Kubernetes 1.20
source (vendored) and etcd; building the three programs from it takes about five minutes once, then the
cache makes every start take seconds. Pods, nodes, Services and RBAC are served by this API server; custom
resources by the 1.36 CRD server beside it (crdserver.py).
"""

from __future__ import annotations

import os
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
from tpujob_sandbox.machine import apt_install, cache_root

KUBERNETES_VERSION = "1.20.2"
DEBIAN_SOURCE_PACKAGE = "kubernetes"
REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-scheduler", "kube-controller-manager")
ALL_BINARIES = REQUIRED + OPTIONAL
BUILD_TARGETS = ("cmd/kube-apiserver", "cmd/kube-scheduler", "cmd/kube-controller-manager")
# No in-tree cloud providers (the test bed has no cloud) and no symbol tables: 510 CPU-seconds instead of 608
# for the three programs (measured once, cold Go cache), and kube-apiserver 61 MB instead of 110 MB.
MAKE_FLAGS = ("GOFLAGS=-tags=providerless", "GOLDFLAGS=-s -w")
APT_PACKAGES = (
    "golang-go",
    "rsync",
    "jq",
    "make",
    "dpkg-dev",
    "etcd-server",
    # The vendored copies of these two crash on Go 1.19 (segfault in map iteration): Debian's work.
    "golang-github-modern-go-reflect2-dev",
    "golang-github-json-iterator-go-dev",
)
VENDOR_REPLACEMENTS = {
    "vendor/github.com/modern-go/reflect2": "/usr/share/gocode/src/github.com/modern-go/reflect2",
    "vendor/github.com/json-iterator/go": "/usr/share/gocode/src/github.com/json-iterator/go",
}
DEB_SRC_LIST = Path("/etc/apt/sources.list.d/tpujob-deb-src.sources")
DEB_SRC_ENTRY = """\
# Added by `tpujob sandbox` to fetch Debian's Kubernetes source package.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
HOW_TO_AVOID_THE_BUILD = (
    "Either set KUBEBUILDER_ASSETS to a folder holding etcd, kube-apiserver, kube-scheduler and "
    "kube-controller-manager (for example from `setup-envtest use -p path 1.20`), or run once as root "
    f"on Debian bookworm so the binaries can be built from Debian's Kubernetes {KUBERNETES_VERSION} source, "
    "or set KUBECONFIG to test against an existing cluster."
)


def default_cache_dir() -> Path:
    return cache_root() / f"kubernetes-{KUBERNETES_VERSION}"


def build_problems() -> list[str]:
    """Why a build cannot run here; empty when it can."""
    problems = []
    if os.geteuid() != 0:
        problems.append("the build installs Debian packages and needs root")
    if shutil.which("apt-get") is None:
        problems.append("apt-get is missing (the build needs Debian)")
    return problems


def build_binaries(cache: Path, progress: Progress = stderr_progress) -> None:
    problems = build_problems()
    if problems:
        raise BinariesUnavailable(
            f"No control plane binaries in {cache} and cannot build them: {'; '.join(problems)}. "
            + HOW_TO_AVOID_THE_BUILD
        )
    started = time.monotonic()
    progress(f"building Kubernetes {KUBERNETES_VERSION} control plane binaries into {cache} (once, ~5 min)")
    workdir = cache.parent / f"build-kubernetes-{KUBERNETES_VERSION}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        install_build_packages(progress)
        source = fetch_source(workdir, progress)
        replace_broken_vendored_packages(source, progress)
        compile_targets(source, progress)
        install_into_cache(source, cache)
    except subprocess.CalledProcessError as error:
        raise build_failed("the control plane", error, HOW_TO_AVOID_THE_BUILD) from error
    shutil.rmtree(workdir, ignore_errors=True)
    progress(f"built the control plane in {time.monotonic() - started:.0f} s")


def install_build_packages(progress: Progress) -> None:
    if not DEB_SRC_LIST.exists():
        DEB_SRC_LIST.write_text(DEB_SRC_ENTRY)
    progress(f"apt-get install {' '.join(APT_PACKAGES)}")
    apt_install(APT_PACKAGES)


def fetch_source(workdir: Path, progress: Progress) -> Path:
    progress("downloading Debian's Kubernetes source package (34 MB)")
    run_step(["apt-get", "source", "--download-only", DEBIAN_SOURCE_PACKAGE], progress, cwd=workdir)
    (dsc,) = workdir.glob(f"{DEBIAN_SOURCE_PACKAGE}_*.dsc")
    source = workdir / "src"
    progress(f"unpacking {dsc.name}")
    run_step(["dpkg-source", "--no-check", "-x", dsc.name, str(source)], progress, cwd=workdir)
    return source


def replace_broken_vendored_packages(source: Path, progress: Progress) -> None:
    for vendored, debian_copy in VENDOR_REPLACEMENTS.items():
        progress(f"replacing {vendored} with {debian_copy}")
        target = source / vendored
        shutil.rmtree(target)
        shutil.copytree(debian_copy, target, ignore=shutil.ignore_patterns("*_test.go"), symlinks=False)


def compile_targets(source: Path, progress: Progress) -> None:
    # Kubernetes 1.20 builds in GOPATH mode: the tree must sit at $GOPATH/src/k8s.io/kubernetes.
    gopath = source / ".go"
    (gopath / "src" / "k8s.io").mkdir(parents=True, exist_ok=True)
    link = gopath / "src" / "k8s.io" / "kubernetes"
    if not link.exists():
        link.symlink_to("../../..")
    # The Go build cache goes with the work folder: ~1 GB nobody needs once the binaries are cached.
    env = {**os.environ, "GOPATH": str(gopath), "GOCACHE": str(source / ".gocache"), "CGO_ENABLED": "0"}
    progress(f"compiling {', '.join(BUILD_TARGETS)} (the long part)")
    run_step(["make", f"WHAT={' '.join(BUILD_TARGETS)}", *MAKE_FLAGS], progress, cwd=source, env=env)


def install_into_cache(source: Path, cache: Path) -> None:
    built = source / "_output" / "local" / "bin" / "linux" / "amd64"
    staging = cache.with_name(cache.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in (*OPTIONAL, "kube-apiserver"):
        shutil.copy2(built / name, staging / name)
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    shutil.copy2(etcd, staging / "etcd")
    # Rename last so an interrupted build never leaves a cache that looks complete.
    shutil.rmtree(cache, ignore_errors=True)
    staging.rename(cache)
