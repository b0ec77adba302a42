"""What a pod's TPU runtime would tell GKE's device plugin, measured on the pod's local process.

On GKE, libtpu in the workload serves runtime metrics on the pod's port 8431 (gRPC), and the device plugin
asks it every 10 s for each chip's duty cycle (the percent of the sample period the TensorCores were busy)
and HBM in use (ai-on-gke/tpu-device-plugin README "Metrics collection", pkg/metrics/metrics.go
runtimeMetrics: tpu.runtime.tensorcore.dutycycle.percent, tpu.runtime.hbm.memory.usage.bytes). Here there is
no TPU: a pod's program computes on the CPU, so the stand-in for its chips' duty cycle is the share of the
time since the last reading its process group spent on a CPU (user + system time from /proc, over wall
time, at most 100 %), and for the memory its programs hold, their resident memory. A training loop reads
high; a program that waits (input, a hung collective, a stopped process) reads near zero. A pod without a
local process has no runtime to answer (None), as a container without libtpu.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tpujob_sandbox.gke.device_plugin import ChipActivity

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Usage:
    cpu_seconds: float  # user + system time of the group's live processes
    resident_bytes: int
    started: float  # the group leader's start, seconds since boot


def _stat_fields(pid: str) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): field 3 on."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def group_usage(leader: int) -> Usage | None:
    """CPU time and resident memory of the processes of `leader`'s process group (a local container runs in
    a group of its own: processes.start_process), or None when the leader is gone."""
    own = _stat_fields(str(leader))
    if own is None:
        return None
    cpu, resident = 0.0, 0
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = own if entry.name == str(leader) else _stat_fields(entry.name)
        # proc(5): field 5 pgrp, 14 utime, 15 stime (clock ticks), 24 rss (pages); index = field - 3.
        if fields is None or len(fields) < 22 or int(fields[2]) != leader:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        resident += int(fields[21]) * PAGE_BYTES
    return Usage(cpu, resident, started=int(own[19]) / CLOCK_TICKS)


def _uptime() -> float:
    return float((PROC / "uptime").read_text().split()[0])


class RuntimeMeter:
    """Readings per pod: the duty cycle over the time since the pod's previous reading (the first one:
    since its process started)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, float, float]] = {}  # key -> (leader, when, cpu)

    def read(self, key: tuple[str, str], leader: int) -> ChipActivity | None:
        usage = group_usage(leader)
        if usage is None:
            self._last.pop(key, None)
            return None
        now = time.monotonic()
        last = self._last.get(key)
        self._last[key] = (leader, now, usage.cpu_seconds)
        if last is None or last[0] != leader:
            busy, elapsed = usage.cpu_seconds, _uptime() - usage.started
        else:
            busy, elapsed = usage.cpu_seconds - last[2], now - last[1]
        share = busy / elapsed if elapsed > 0 else 0.0
        return ChipActivity(
            duty_cycle=round(max(0.0, min(share, 1.0)) * 100, 2), memory_bytes=usage.resident_bytes
        )

    def forget(self, key: tuple[str, str]) -> None:
        self._last.pop(key, None)
