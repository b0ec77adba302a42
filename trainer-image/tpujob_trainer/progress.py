"""Progress for people: a bar on a terminal, a log line every N steps otherwise."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

log = logging.getLogger(__name__)


def progress_mode(requested: str, is_chief: bool, is_terminal: bool) -> str:
    """Only worker 0 reports (the others train in lockstep with it)."""
    if not is_chief or requested == "off":
        return "off"
    if requested == "auto":
        return "bar" if is_terminal else "log"
    return requested


def render_bar(step: int, total: int, *, loss: float, examples_per_second: float, width: int = 30) -> str:
    done = min(step / total, 1.0) if total else 1.0
    filled = int(done * width)
    bar = "=" * filled + (">" if filled < width else "") + "." * max(width - filled - 1, 0)
    return f"[{bar}] {step}/{total} loss {loss:.4f} {examples_per_second:,.0f} examples/s"


class _ClearBarBeforeLogs(logging.Filter):
    """A log line written over the bar would mix with it: wipe the bar first (next update redraws)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def filter(self, record: logging.LogRecord) -> bool:
        self.stream.write("\r\x1b[K")
        return True


class Progress:
    def __init__(self, requested: str, *, is_chief: bool, stream: TextIO = sys.stderr) -> None:
        self.mode = progress_mode(requested, is_chief, stream.isatty())
        self.stream = stream
        self._clear = _ClearBarBeforeLogs(stream)
        if self.mode == "bar":
            for handler in logging.getLogger().handlers:
                handler.addFilter(self._clear)

    def update(self, step: int, total: int, *, loss: float, examples_per_second: float) -> None:
        line = render_bar(step, total, loss=loss, examples_per_second=examples_per_second)
        if self.mode == "bar":
            self.stream.write("\r" + line)
            self.stream.flush()
        elif self.mode == "log":
            log.info("step %d/%d loss %.4f %.0f examples/s", step, total, loss, examples_per_second)

    def close(self) -> None:
        if self.mode == "bar":
            self.stream.write("\n")
            self.stream.flush()
            for handler in logging.getLogger().handlers:
                handler.removeFilter(self._clear)
