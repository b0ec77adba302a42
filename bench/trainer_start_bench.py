"""What a real trainer costs the test bed to start (figures, not a pass/fail test):
`.venv/bin/python bench/trainer_start_bench.py [--runs 3] [--steps 200]`.

The same trainer command (`python -m tpujob_trainer`, light training: batch 8, no evaluation), started
fresh and as a fork of the test bed's fork server (tpujob_sandbox.forkserver, its modules imported once
before the first run, as on a bed), the two alternating. Each run's CPU is the process's own (user +
system, read from /proc/PID/stat every 20 ms until it exits, the same way for both) and its wall time from
the request to the exit. Prints the median of the runs and their range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tpujob_sandbox.forkserver import TRAINER_PRELOAD, ForkServer
from tpujob_sandbox.processes import Process, start_process

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # proc(5): utime, stime


def measure(process: Process, started: float) -> tuple[float, float]:
    """(CPU-seconds, wall seconds) of `process` until it exits."""
    cpu = 0.0
    while process.poll() is None:
        cpu = cpu_seconds(process.pid) or cpu
        time.sleep(0.02)
    if process.wait() != 0:
        raise SystemExit(f"the trainer exited {process.wait()}")
    return cpu, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    options = parser.parse_args()
    argv = [sys.executable, "-m", "tpujob_trainer", "--steps", str(options.steps)]
    argv += ["--batch-size", "8", "--evaluate", "false"]
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    work = Path(tempfile.mkdtemp(prefix="trainer-start-"))
    server = ForkServer(work / "server", python=sys.executable, modules=("tpujob_trainer",),
                        preload=TRAINER_PRELOAD, env=env)  # fmt: skip
    warm = server.start([*argv[:3], "--help"], work / "warm.log", env=env, cwd=work)  # the server imports
    warm.wait()
    results: dict[str, list[tuple[float, float]]] = {"fresh": [], "forked": []}
    try:
        for run in range(options.runs):
            for way in results:
                log = work / f"{way}-{run}.log"
                started = time.monotonic()
                if way == "fresh":
                    process: Process = start_process(argv, log, env=env, cwd=work)
                else:
                    process = server.start(argv, log, env=env, cwd=work)
                results[way].append(measure(process, started))
                print(f"run {run + 1} {way}: {results[way][-1][0]:.1f} CPU-s, {results[way][-1][1]:.1f} s")
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)
    print(f"\n{options.steps} light steps, {options.runs} runs each, median (range):")
    for way, figures in results.items():
        cpu, wall = [f[0] for f in figures], [f[1] for f in figures]
        print(
            f"  {way:7s} {statistics.median(cpu):5.1f} CPU-s ({min(cpu):.1f}-{max(cpu):.1f}), "
            f"{statistics.median(wall):5.1f} s ({min(wall):.1f}-{max(wall):.1f})"
        )


if __name__ == "__main__":
    main()
