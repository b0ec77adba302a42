"""Control plane binaries: found in KUBEBUILDER_ASSETS, in the local cache, or built from Debian's packages.

Two servers make the test bed's API: Kubernetes 1.20's kube-apiserver (pods, nodes, Services, RBAC, the
aggregator in front; kubernetes.py) and Kubernetes 1.36's CRD server for every custom resource, with CEL
(crdserver.py). Each is built once a machine and cached under ~/.cache/tpujob/. steps: what the builds share;
__main__: `python -m tpujob_sandbox.binaries`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tpujob_sandbox.binaries import crdserver
from tpujob_sandbox.binaries.kubernetes import (
    ALL_BINARIES,
    KUBERNETES_VERSION,
    REQUIRED,
    build_binaries,
    default_cache_dir,
)
from tpujob_sandbox.binaries.steps import BinariesUnavailable, Progress, missing_binaries, stderr_progress
from tpujob_sandbox.machine import machine_lock

__all__ = [
    "ALL_BINARIES",
    "KUBERNETES_VERSION",
    "Binaries",
    "BinariesUnavailable",
    "Progress",
    "find_binaries",
    "find_crd_server",
    "stderr_progress",
]


@dataclass(frozen=True)
class Binaries:
    """Paths of the control plane programs; scheduler and controller-manager may be missing (envtest).
    `crd_server` holds the 1.36 CRD server and its etcd; None: the kube-apiserver serves custom resources
    itself (an envtest kube-apiserver recent enough for CEL, or a bench's in-process mode)."""

    folder: Path
    origin: str  # "KUBEBUILDER_ASSETS", "cache" or "built"
    crd_server: Path | None = None

    def path(self, name: str) -> Path:
        return self.folder / name

    def has(self, name: str) -> bool:
        return os.access(self.path(name), os.X_OK)


def find_binaries(cache_dir: Path | None = None, progress: Progress = stderr_progress) -> Binaries:
    """KUBEBUILDER_ASSETS first, then the cache, else build into the cache (once per machine). The CRD
    server comes with the cache or the build; KUBEBUILDER_ASSETS brings its own API server (which serves
    custom resources in process), or a CRD server of its own beside it."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        folder = Path(assets)
        missing = missing_binaries(folder, REQUIRED)
        if missing:
            raise BinariesUnavailable(f"KUBEBUILDER_ASSETS={assets} lacks {', '.join(missing)}")
        own = folder / "crd-server"
        return Binaries(folder, "KUBEBUILDER_ASSETS", own if _complete_crd_server(own) else None)
    cache = cache_dir or default_cache_dir()
    origin = "cache"
    if missing_binaries(cache, ALL_BINARIES):
        with machine_lock(cache.name):
            # Another process may have finished the build while this one waited for the lock.
            if missing_binaries(cache, ALL_BINARIES):
                build_binaries(cache, progress)
                origin = "built"
    return Binaries(cache, origin, find_crd_server(progress))


def _complete_crd_server(folder: Path) -> bool:
    return not missing_binaries(folder, crdserver.BINARIES)


def find_crd_server(progress: Progress = stderr_progress) -> Path:
    """The cached 1.36 CRD server's folder, built once a machine."""
    found = crdserver.cached_server()
    if found is not None:
        return found
    with machine_lock("crd-server"):
        return crdserver.cached_server() or crdserver.build_crd_server(progress)
