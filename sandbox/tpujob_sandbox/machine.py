"""What the test bed and its tests share on one machine: the cache folder, locks, and Debian packages.

Several processes may want one machine-wide thing at the same time: `make test`'s prepare step and the
pytest-xdist workers beside it, or a `tpujob sandbox up` in another shell. A file lock per thing makes the
second one wait and then find the work done. apt-get gets one door under one lock, because it refuses to run
beside another apt-get ("Could not get lock /var/lib/dpkg/lock-frontend").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Debian's maintainer scripts start a package's service on install (prometheus, etcd): this policy says no,
# so nothing a test installs outlives the tests (invoke-rc.d's policy layer, man invoke-rc.d).
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
DENY_SERVICE_STARTS = (
    "#!/bin/sh\n# tpujob tests: install packages without starting their services.\nexit 101\n"
)


def cache_root() -> Path:
    """~/.cache/tpujob (or under $XDG_CACHE_HOME): control plane binaries, tools, locks."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpujob"


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide lock `name` (released when the block ends or the process dies)."""
    path = cache_root() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def apt_install(packages: list[str] | tuple[str, ...], *, recommends: bool = False) -> None:
    """`apt-get update` and `apt-get install` of `packages`, one apt-get at a time on this machine, starting
    no service. Raises subprocess.CalledProcessError when apt-get fails (its output is on the terminal)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    extra = [] if recommends else ["--no-install-recommends"]
    with machine_lock("apt"):
        ours = not POLICY_RC_D.exists()
        if ours:
            POLICY_RC_D.write_text(DENY_SERVICE_STARTS)
            POLICY_RC_D.chmod(0o755)
        try:
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
            subprocess.run(["apt-get", "install", "-y", "-qq", *extra, *packages], check=True, env=env)
        finally:
            if ours:
                POLICY_RC_D.unlink()
