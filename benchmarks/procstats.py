"""
What a process costs, read from ``/proc``: CPU seconds, current and peak memory.

CPU is ``utime + stime`` of ``/proc/<pid>/stat`` (all threads of the process);
memory is ``VmRSS`` (resident now) and ``VmHWM`` (the resident peak since the
process started) of ``/proc/<pid>/status``.
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

CLOCK_TICKS = os.sysconf('SC_CLK_TCK')


class ProcessGone(RuntimeError):
    """The measured process has exited."""


@dataclasses.dataclass(frozen=True)
class Sample:
    when: float  # time.monotonic()
    cpu: float  # seconds of user + system time
    rss: int  # bytes
    hwm: int  # bytes


def cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError as e:
        raise ProcessGone(f"process {pid} is gone") from e
    fields = stat.rsplit(')', 1)[1].split()  # the command name may contain spaces and parentheses
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of the whole line
    return (utime + stime) / CLOCK_TICKS


def memory(pid: int) -> tuple[int, int]:
    """The resident set size now and at its peak, in bytes."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as e:
        raise ProcessGone(f"process {pid} is gone") from e
    values = {}
    for line in lines:
        name, _, rest = line.partition(':')
        if name in ('VmRSS', 'VmHWM'):
            values[name] = int(rest.split()[0]) * 1024
    if len(values) != 2:
        raise ProcessGone(f"process {pid} has no memory figures (a zombie?)")
    return values['VmRSS'], values['VmHWM']


def sample(pid: int) -> Sample:
    rss, hwm = memory(pid)
    return Sample(when=time.monotonic(), cpu=cpu_seconds(pid), rss=rss, hwm=hwm)
