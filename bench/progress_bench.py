"""What one progress read costs the operator: worker 0's /metrics page, fetched and parsed as a pass does it.

    .venv/bin/python bench/progress_bench.py --reads 2000 --repeats 3

A separate process serves the trainer's own metrics registry (tpujob_trainer.metrics.TrainerMetrics, every
series set, a few hundred steps observed into its histograms) on a loopback port, so only the reader's CPU
is counted here. The bench then calls the operator's ProgressReader.read `--reads` times in a row and
prints the CPU and wall time per read (the median of `--repeats` runs, with the spread), and what that is
at the default pace (TPUJOB_PROGRESS_READS_PER_SECOND) and at the old one (every job at every 30 s resync)
for 100 and 10,000 running jobs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import time
from typing import Any

from tpujob import status as s
from tpujob.trainer_metrics import ProgressReader

RESYNC_SECONDS = 30.0


def serve(port: int, ready: Any) -> None:
    from tpujob_trainer.metrics import TrainerMetrics

    trainer = TrainerMetrics()
    trainer.info.labels(strategy="tpu", model="mnist", data="synthetic").set(1)
    trainer.target_steps.set(10_000)
    trainer.global_step.set(4_321)
    trainer.last_checkpoint_step.set(4_000)
    trainer.last_checkpoint_timestamp.set(time.time())
    for step in range(500):
        trainer.step_duration.observe(0.01 + step % 7 / 1000)
        trainer.steps.inc()
    trainer.serve(port, "127.0.0.1")
    ready.set()
    while True:
        time.sleep(3600)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_run(reader: ProgressReader, pod: s.PodView, reads: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per read over `reads` reads."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(reads):
        sample, error = reader.read(pod)
        if sample is None:
            raise SystemExit(f"read failed: {error}")
    return (time.process_time() - cpu) / reads, (time.perf_counter() - wall) / reads


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(port, ready), daemon=True)
    server.start()
    if not ready.wait(30):
        raise SystemExit("the metrics server did not start")
    pod = s.PodView("w-0", 0, 0, 0, "Running", ip="127.0.0.1", metrics_port=port)
    reader = ProgressReader()
    one_run(reader, pod, 50)  # warm: imports, the first connection
    runs = [one_run(reader, pod, args.reads) for _ in range(args.repeats)]
    server.terminate()
    cpu = sorted(r[0] for r in runs)
    wall = sorted(r[1] for r in runs)
    cpu_ms, wall_ms = statistics.median(cpu) * 1000, statistics.median(wall) * 1000
    print(f"one read: CPU {cpu_ms:.3f} ms ({cpu[0] * 1000:.3f}-{cpu[-1] * 1000:.3f}), "
          f"wall {wall_ms:.3f} ms ({wall[0] * 1000:.3f}-{wall[-1] * 1000:.3f}); "
          f"median of {args.repeats} runs of {args.reads} reads")  # fmt: skip
    print("| running jobs | pace | reads/s | CPU % of a core | status writes/s at most |")
    print("|---|---|---|---|---|")
    for jobs in (100, 10_000):
        for pace, rate in (
            ("every job each 30 s resync (before)", jobs / RESYNC_SECONDS),
            (
                f"{s.DEFAULT_PROGRESS_READS_PER_SECOND:g} reads/s in all (now)",
                min(jobs / RESYNC_SECONDS, s.DEFAULT_PROGRESS_READS_PER_SECOND),
            ),
        ):
            print(f"| {jobs:,} | {pace} | {rate:.1f} | {rate * cpu_ms / 10:.1f} | {rate:.1f} |")


if __name__ == "__main__":
    main()
