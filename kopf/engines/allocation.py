"""
The C allocator's upkeep in a long-running operator process: freed memory goes back to the system.

glibc's ``malloc`` serves big requests (from 128 KiB) from memory mapped for
each of them, which goes back to the system as soon as it is freed. But the
first time such a buffer is freed, glibc raises that threshold to its size,
and from then on serves buffers like it from its heap, which gives memory
back only from its top. An operator allocates and frees such buffers all the
time: every pooled HTTPS connection has a TLS read buffer of 256 KiB, freed
when the connection is closed after being idle. With the threshold raised,
the memory of a burst of work stays with the process for good; with the
threshold fixed, it is given back when the connections are closed.

Freed small blocks are a different matter: glibc keeps them in its heap,
which it gives back only from its top, unless asked (``malloc_trim``) to give
back every free page. :func:`trim_when_quiet` asks it whenever its free
memory has grown in a burst of work and the process has then gone quiet. With CPython's own
allocator for small objects (the default) that is little, since CPython
keeps its small objects apart in arenas of its own; with
``PYTHONMALLOC=malloc`` it is most of a burst's memory (see the docs on memory).

Only ``kopf run`` and :func:`kopf.run` do all this, since they own the
process; an operator embedded in another application leaves the allocator
alone. Elsewhere than with glibc, nothing is done.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import platform
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger('kopf.engines.allocation')

M_MMAP_THRESHOLD = -3  # mallopt()'s parameter in glibc's <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's own initial value; setting it explicitly keeps it from rising


# When the process counts as quiet, and how much free memory must have come since the last trim to trim again.
QUIET_INTERVAL = 10.0  # seconds
QUIET_CPU_SHARE = 0.05  # of one core, over the interval
TRIM_GROWTH = 8 * 2**20  # bytes


def _glibc(name: str) -> Any:
    """A function of glibc (a ctypes function, to be given its argument and result types); None elsewhere."""
    if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
        return None
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def return_big_buffers(threshold: int = MMAP_THRESHOLD) -> bool:
    """Let buffers of ``threshold`` bytes and more go back to the system when freed; whether it was done."""
    mallopt = _glibc('mallopt')
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not done:
        logger.debug("The C allocator did not accept a fixed threshold for big buffers.")
    return done


def release_free_memory() -> bool:
    """Give every free page of the C allocator's heap back to the system; whether any was."""
    malloc_trim = _glibc('malloc_trim')
    if malloc_trim is None:
        return False
    malloc_trim.argtypes = [ctypes.c_size_t]
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]


def free_memory() -> int:
    """
    How much the C allocator holds free, in bytes: what a trim could give back (and more).

    It is glibc's count of free bytes (``mallinfo2``, glibc 2.33+), which
    does not fall when a trim gives the pages back; hence it is compared with
    its value after the last trim. Without it, the resident memory stands in.
    """
    mallinfo2 = _glibc('mallinfo2')
    if mallinfo2 is not None:
        mallinfo2.argtypes = []
        mallinfo2.restype = _MallInfo2
        return int(mallinfo2().fordblks)
    return resident_memory()


def resident_memory() -> int:
    """The process's resident memory in bytes (0 where ``/proc`` does not tell)."""
    try:
        with open('/proc/self/statm') as statm:
            return int(statm.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
    except (OSError, ValueError, IndexError):
        return 0


async def trim_when_quiet(
        *,
        interval: float = QUIET_INTERVAL,
        cpu_share: float = QUIET_CPU_SHARE,
        growth: int = TRIM_GROWTH,
        cpu_time: Callable[[], float] = time.process_time,
        measure: Callable[[], int] = free_memory,
        release: Callable[[], bool] = release_free_memory,
) -> None:
    """
    Forever: once the allocator's free memory has grown by ``growth`` since the last trim, trim when quiet.

    Quiet means that the process used less than ``cpu_share`` of a core over
    the last ``interval``: trimming a busy heap would give back pages that
    are taken again a moment later. A trim costs milliseconds and happens
    once per burst at most, since the growth is counted from the last trim.
    """
    baseline = measure()
    while True:
        started = cpu_time()
        await asyncio.sleep(interval)
        size = measure()
        if size < baseline:
            baseline = size  # memory taken again: the new base, so that the next freeing is noticed
        elif size - baseline >= growth and cpu_time() - started < cpu_share * interval:
            release()
            baseline = measure()
            logger.debug("Gave the free memory back to the system when quiet (%d KiB).", size // 1024)
