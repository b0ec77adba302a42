"""The process-accounting summary (scripts/cpu_by_process.py) on records packed as the kernel writes them."""

from __future__ import annotations

import pytest
from scripts.cpu_by_process import RECORD, comp_t, records, summary


def record(command: str, *, cpu_ticks: int, seconds: float, pid: int = 7, version: int = 3) -> bytes:
    # utime as a comp_t with exponent 0 (< 8192 ticks), stime 0; etime in ticks as a float.
    return RECORD.pack(
        0, version, 0, 0, 0, 0, pid, 1, 1_800_000_000, seconds * 100, cpu_ticks, 0, 0, 0, 0, 0, 0, 0,
        command.encode(),
    )  # fmt: skip


def test_comp_t_is_a_mantissa_times_eight_to_the_exponent():
    assert comp_t(5) == 5
    assert comp_t((2 << 13) | 3) == 3 * 64


def test_records_read_the_command_its_lifetime_and_its_cpu():
    (process,) = records(record("kube-apiserver", cpu_ticks=250, seconds=900.0, pid=42))
    assert (process.command, process.pid, process.seconds, process.cpu) == ("kube-apiserver", 42, 900.0, 2.5)


def test_python_is_split_by_lifetime_and_programs_ranked_by_cpu():
    data = b"".join(
        [
            record("python", cpu_ticks=6000, seconds=950.0),  # a pytest worker
            record("python", cpu_ticks=700, seconds=20.0),  # a trainer
            record("python", cpu_ticks=500, seconds=15.0),
            record("etcd", cpu_ticks=100, seconds=950.0),
        ]
    )
    lines = summary(list(records(data)))
    assert lines[0] == "73 CPU-seconds in 4 processes"
    # seconds, "s", share, processes, program
    rows = [line.split(None, 4) for line in lines[1:]]
    assert [(row[4], row[3], row[0]) for row in rows] == [
        ("python (long-lived)", "1", "60.0"),
        ("python (short-lived)", "2", "12.0"),
        ("etcd", "1", "1.0"),
    ]
    assert rows[1][2] == "16.4%"


def test_a_file_of_another_acct_version_is_refused():
    with pytest.raises(ValueError, match="acct version 2"):
        list(records(record("bash", cpu_ticks=1, seconds=1.0, version=2)))
