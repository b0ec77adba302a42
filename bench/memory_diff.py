"""What the operator's memory grew by between two of its reports (tpujob/memreport.py), per job.

    .venv/bin/python bench/scale_bench.py --n 3000 --memory-report /tmp/mem
    .venv/bin/python bench/memory_diff.py /tmp/mem/n3000.0 /tmp/mem/n3000.2 --jobs 3000

Prints the traced bytes each source line and each file added, in bytes per job, the largest first, and the
container objects added by type, per job."""

from __future__ import annotations

import argparse
import re
import tracemalloc
from collections import Counter
from pathlib import Path

TYPE_LINE = re.compile(r"^\s+(\d+) (\S+)$")


def object_counts(report: Path) -> Counter[str]:
    """The gc-tracked objects by type, from a report's text."""
    counts: Counter[str] = Counter()
    section = False
    for line in report.read_text().splitlines():
        if line.startswith("gc-tracked objects"):
            section = True
        elif section and (match := TYPE_LINE.match(line)):
            counts[match[2]] = int(match[1])
        elif section and line.strip() == "":
            break
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="a report's path without .snap/.txt")
    parser.add_argument("after", type=Path)
    parser.add_argument("--jobs", type=int, required=True, help="live jobs added between the two")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    before = tracemalloc.Snapshot.load(f"{args.before}.snap")
    after = tracemalloc.Snapshot.load(f"{args.after}.snap")
    total = sum(s.size for s in after.traces) - sum(s.size for s in before.traces)
    print(f"traced growth: {total / 2**20:.1f} MiB, {total / args.jobs:.0f} B per job\n")
    for key in ("filename", "lineno"):
        print(f"B/job  objects/job  by {key}")
        for stat in after.compare_to(before, key)[: args.top]:
            frame = stat.traceback[0]
            where = frame.filename if key == "filename" else f"{frame.filename}:{frame.lineno}"
            print(f"{stat.size_diff / args.jobs:>6.0f} {stat.count_diff / args.jobs:>8.2f}  {where}")
        print()
    grown = object_counts(Path(f"{args.after}.txt"))
    grown.subtract(object_counts(Path(f"{args.before}.txt")))
    print("objects/job  gc-tracked type")
    for name, count in grown.most_common(args.top):
        print(f"{count / args.jobs:>8.2f}  {name}")


if __name__ == "__main__":
    main()
