"""Top frames of a py-spy profile (`operator_bench.py --profile DIR` writes collapsed stacks, one line each:
`frame;frame;...;frame samples`).

    .venv/bin/python bench/profile_report.py DIR/bench-operator-existing-1000.txt --top 25

Prints three tables over every sampled thread's samples (idle threads are not sampled): samples by area of
the operator (the first rule of AREAS a stack matches), frames by inclusive share (the frame or anything it
called was running) and by self share (the frame itself was on top).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

# py-spy's frame: "function (path/to/module.py:line)"; the line number is dropped so a function is one row.
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<path>[^:()]*)(?::\d+)?\)$")


def frame_name(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["path"]
    for marker in ("site-packages/", "operator/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{match['function']} ({path})"


# (area, frames the stack holds, each as "function (module path start"): a sample goes to the first area all
# of whose frames its stack holds, so where the CPU went reads in the operator's terms.
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("pods' and Services' watches and maps (owned.py)", ("watch_owned (tpujob/handlers/owned",)),
    ("kopf: indexing a watch event", ("index_resource (kopf/",)),
    ("kopf: running an event's handlers", ("process_resource_causes (kopf/",)),
    ("kopf: other per-event work", ("process_resource_event (kopf/",)),
    ("kopf: other per-event work", ("worker (kopf/_core/reactor/queueing",)),
    ("kopf: reading watch streams", ("watcher (kopf/",)),
    ("kopf: reading watch streams", ("(aiohttp/",)),
    (
        "pods' and Services' watch streams and maps (handlers/owned.py)",
        ("watch_owned (tpujob/handlers/owned",),
    ),
    ("HTTP client: the operator's requests", ("Kube._call (tpujob/kube.py",)),
    ("pass logic (parse, observe, decide, render)", ("Reconciler.reconcile (",)),
)


def area_of(stack: tuple[str, ...]) -> str:
    for area, frames in AREAS:
        if all(any(frame in held for held in stack) for frame in frames):
            return area
    return "other (event loop, thread hand-offs, start-up)"


def read_stacks(path: Path) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack and samples.isdigit():
            stacks[tuple(frame_name(f) for f in stack.split(";"))] += int(samples)
    return stacks


def top_frames(
    stacks: Counter[tuple[str, ...]], n: int
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(inclusive, self): the n frames with the largest share of all samples, each."""
    total = sum(stacks.values()) or 1
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for stack, samples in stacks.items():
        for frame in set(stack):
            inclusive[frame] += samples
        own[stack[-1]] += samples
    return (
        [(frame, samples / total) for frame, samples in inclusive.most_common(n)],
        [(frame, samples / total) for frame, samples in own.most_common(n)],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    stacks = read_stacks(args.profile)
    total = sum(stacks.values()) or 1
    inclusive, own = top_frames(stacks, args.top)
    print(f"{total} samples in {args.profile.name}\n")
    areas: Counter[str] = Counter()
    for stack, samples in stacks.items():
        areas[area_of(stack)] += samples
    print("| area | % |\n|---|---|")
    for area, samples in areas.most_common():
        print(f"| {area} | {100 * samples / total:.1f} |")
    print()
    for title, rows in (("inclusive", inclusive), ("self", own)):
        print(f"| {title} % | frame |\n|---|---|")
        for frame, share in rows:
            print(f"| {100 * share:.1f} | `{frame}` |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
