"""What the builds share: progress lines, the error that says a binary cannot be had, and a build step that
echoes its output with a heartbeat."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

Progress = Callable[[str], None]


class BinariesUnavailable(RuntimeError):
    """The control plane binaries are neither provided nor buildable here."""


def stderr_progress(message: str) -> None:
    print(f"[tpujob sandbox] {message}", file=sys.stderr, flush=True)


def build_failed(what: str, error: subprocess.CalledProcessError, how_to_avoid: str) -> BinariesUnavailable:
    """The error for a build step that failed: the command (cut to a readable length), its exit code, and
    how to do without the build."""
    command = " ".join(map(str, error.cmd))[:300]
    return BinariesUnavailable(
        f"Building {what} failed at `{command}` (exit {error.returncode}); the log is above. " + how_to_avoid
    )


def missing_binaries(folder: Path, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if not os.access(folder / name, os.X_OK)]


def run_step(
    command: list[str], progress: Progress, cwd: Path | None = None, env: dict[str, str] | None = None
) -> None:
    """Run a build step, echoing its output and a heartbeat so a long silent compile shows it is alive."""
    started = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(30):
            progress(f"... {command[0]} still running ({time.monotonic() - started:.0f} s)")

    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env={**(env or os.environ), "DEBIAN_FRONTEND": "noninteractive"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        try:
            for line in process.stdout:
                progress(f"    {line.rstrip()}")
        except BaseException:  # interrupted (Ctrl+C, a test timeout): leave no compiler behind
            process.kill()
            raise
        if process.wait() != 0:
            raise subprocess.CalledProcessError(process.returncode, command)
    finally:
        done.set()
