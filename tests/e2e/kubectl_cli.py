"""kubectl as the e2e tests run it (the pinned 1.33 from tests/chart/tools.py, never the machine's), and its
table output read back."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path


class Kubectl:
    """kubectl as the test bed's admin, with a discovery cache of its own (a stale ~/.kube/cache from an
    earlier test bed on the same port would hide a changed CRD)."""

    def __init__(self, binary: Path, kubeconfig: Path, cache: Path) -> None:
        self.base = [str(binary), f"--kubeconfig={kubeconfig}", f"--cache-dir={cache}"]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.returncode}\n{result.stderr}"
        return result.stdout

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def table(output: str) -> tuple[list[str], list[list[str]]]:
    """kubectl's table as its header and rows, each cell cut at its column's place in the header (kubectl
    aligns them), so an empty cell (a job no ClusterQueue admitted) stays an empty string."""
    header_line, *lines = [line for line in output.splitlines() if line.strip()]
    starts = [match.start() for match in re.finditer(r"\S+", header_line)]
    ends = [*starts[1:], None]
    rows = [[line[start:end].strip() for start, end in zip(starts, ends, strict=True)] for line in lines]
    return header_line.split(), rows
