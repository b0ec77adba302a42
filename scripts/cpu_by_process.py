"""Where a run's CPU went, by program: a summary of Linux process accounting (acct(5), version 3 records),
which the kernel writes as each process ends, children and short-lived ones included. It answers what the
per-test-file figures of `.ci/run` cannot: how much of the suite is kube-apiserver, the CRD server, etcd,
the pytest workers, the trainers.

    touch /tmp/pacct && accton /tmp/pacct      # as root (CAP_SYS_PACCT); Debian's `acct` package
    make test; accton off
    .venv/bin/python scripts/cpu_by_process.py /tmp/pacct

Python processes are told apart by lifetime: the pytest workers and the test beds' operators live for the
run, a trainer or a test's helper for seconds or minutes. A process still running when accounting stops is
not in the file.
"""

from __future__ import annotations

import argparse
import collections
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (a float,
# in ticks), then eight comp_t (utime, stime, mem, io, rw, minflt, majflt, swaps) and comm[16].
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
VERSION = 3
TICKS_PER_SECOND = 100  # AHZ
LONG_LIVED_SECONDS = 300.0
TOP = 15


@dataclass(frozen=True)
class Process:
    command: str
    pid: int
    ppid: int
    started: int  # seconds since the epoch
    seconds: float  # how long it lived
    cpu: float  # user + system CPU-seconds


def comp_t(value: int) -> int:
    """A comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def records(data: bytes) -> Iterator[Process]:
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != VERSION:
            raise ValueError(f"record at byte {offset}: acct version {fields[1]}, not {VERSION}")
        pid, ppid, started, elapsed, utime, stime = fields[6], fields[7], fields[8], fields[9], *fields[10:12]
        yield Process(
            command=fields[18].rstrip(b"\0").decode(errors="replace"),
            pid=pid,
            ppid=ppid,
            started=started,
            seconds=elapsed / TICKS_PER_SECOND,
            cpu=(comp_t(utime) + comp_t(stime)) / TICKS_PER_SECOND,
        )


def group(process: Process) -> str:
    """The program, with Python split into the run's long-lived processes and the rest."""
    if not process.command.startswith("python"):
        return process.command
    return "python (long-lived)" if process.seconds >= LONG_LIVED_SECONDS else "python (short-lived)"


def summary(processes: list[Process], top: int = TOP) -> list[str]:
    cpu: dict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for process in processes:
        cpu[group(process)] += process.cpu
        count[group(process)] += 1
    total = sum(cpu.values())
    lines = [f"{total:.0f} CPU-seconds in {len(processes)} processes"]
    for name, seconds in sorted(cpu.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"{seconds:8.1f} s {100 * seconds / (total or 1):5.1f}% {count[name]:6d}  {name}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("file", type=Path, help="the accounting file accton wrote")
    parser.add_argument("--top", type=int, default=TOP)
    args = parser.parse_args(argv)
    print("\n".join(summary(list(records(args.file.read_bytes())), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
