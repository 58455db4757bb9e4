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
back every free page. :func:`trim_when_quiet` asks it, after a full garbage
collection, whenever its free memory has grown in a burst of work and the
process has then gone quiet.

Most of an operator's blocks are CPython's small objects, though, and by
default CPython keeps those in arenas of its own (1 MiB each), which go
back to the system only when entirely free: a few long-lived objects made
during a burst (the HTTP libraries' caches, free lists) keep some of the
burst's arenas resident. Operators that want those back too can run CPython
with its C allocator: ``PYTHONMALLOC=malloc`` in their environment (the
deployment recipe), or ``kopf run --c-allocator``, which starts the process
over with it (:func:`use_c_allocator`); it costs CPU per object and raises
the peak a little. The docs on memory have the figures of both.

Only ``kopf run`` and :func:`kopf.run` trim, since they own the process; an
operator embedded in another application leaves the allocator alone.
Elsewhere than with glibc, nothing is done.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from kopf._structs.clocks import SYSTEM_CLOCK, Clock

logger = logging.getLogger('kopf._runtime.allocation')

M_MMAP_THRESHOLD = -3  # mallopt()'s parameter in glibc's <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's own initial value; setting it explicitly keeps it from rising


# When the process counts as quiet, and how much free memory must have come since the last trim to trim again.
QUIET_INTERVAL = 10.0  # seconds
QUIET_CPU_SHARE = 0.05  # of one core, over the interval
TRIM_GROWTH = 8 * 2**20  # bytes

# The user's choice of CPython's allocator; and the mark of a process that kopf started over with its own choice.
ALLOCATOR_VARIABLE = 'PYTHONMALLOC'
RESTARTED_VARIABLE = 'KOPF_STARTED_WITH_MALLOC'


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
        collect: Callable[[], int] = gc.collect,
        clock: Clock = SYSTEM_CLOCK,
) -> None:
    """
    Forever: once the allocator's free memory has grown by ``growth`` since the last trim, trim when quiet.

    Quiet means that the process used less than ``cpu_share`` of a core over
    the last ``interval``: trimming a busy heap would give back pages that
    are taken again a moment later. Before the trim, a full garbage
    collection frees the burst's reference cycles, which would otherwise
    wait for the next full collection, however long that takes. Both cost
    milliseconds and happen once per burst at most, since the growth is
    counted from the last trim.
    """
    baseline = measure()
    while True:
        started = cpu_time()
        await clock.sleep(interval)
        size = measure()
        if size < baseline:
            baseline = size  # memory taken again: the new base, so that the next freeing is noticed
        elif size - baseline >= growth and cpu_time() - started < cpu_share * interval:
            collect()  # the burst's reference cycles, else kept until the next full collection
            release()
            baseline = measure()
            logger.debug("Gave the free memory back to the system when quiet (%d KiB).", size // 1024)


# When the resident memory is reported as close to the container's limit, and how often it is looked at.
LIMIT_WARNING_SHARE = 0.8
LIMIT_CLEAR_SHARE = 0.7  # below it again, the next approach is reported again
LIMIT_CHECK_INTERVAL = 1.0  # seconds: a listing of many objects grows fast
# Where the container's memory limit is: cgroup v2, then v1 (where "no limit" is a huge number).
CGROUP_LIMIT_FILES = ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes')
UNLIMITED = 2**62


def memory_limit(files: tuple[str, ...] = CGROUP_LIMIT_FILES) -> int | None:
    """The memory limit of this process's container (cgroup) in bytes; ``None`` if there is none or unknown."""
    for path in files:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text == 'max':
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < UNLIMITED else None
    return None


async def warn_near_memory_limit(
        *,
        interval: float = LIMIT_CHECK_INTERVAL,
        share: float = LIMIT_WARNING_SHARE,
        clear: float = LIMIT_CLEAR_SHARE,
        limit: Callable[[], int | None] = memory_limit,
        measure: Callable[[], int] = resident_memory,
        clock: Clock = SYSTEM_CLOCK,
) -> None:
    """
    Forever: say in one line, before the kernel's OOM killer ends the process, that its memory limit is too low.

    The OOM killer leaves no word in the operator's log, only a restart
    (``OOMKilled``) in the pod's status; so once the resident memory passes
    ``share`` of the limit, the operator says what it uses and what to do.
    It says it again only after the memory has gone below ``clear`` of the
    limit and risen again. Nothing is done where there is no limit.
    """
    bound = limit()
    if bound is None:
        return
    warned = False
    peak = 0
    while True:
        used = measure()
        peak = max(peak, used)
        if not warned and used >= share * bound:
            warned = True
            logger.error(
                "The operator uses %d MiB of its memory limit of %d MiB (%d%%) and may be killed by the system "
                "soon: raise the limit to at least %d MiB, or watch fewer objects per operator "
                "(fewer namespaces, or sharding with several replicas).",
                used // 2**20, bound // 2**20, used * 100 // bound, peak * 3 // 2 // 2**20)
        elif warned and used < clear * bound:
            warned = False
        await clock.sleep(interval)


def restart_command(environ: Mapping[str, str]) -> tuple[str, list[str], dict[str, str]] | None:
    """
    How to start this process over with the C allocator (program, arguments, environment); None if it should not.

    It is asked for with ``kopf run --c-allocator``. It is not done when
    ``PYTHONMALLOC`` is set already (the user's choice wins), when it has been
    started over already, without glibc, in a frozen application, under a
    debugger or a tracer, when CPython ignores the environment (``-E``,
    ``-I``), or when the command cannot be repeated (code given with ``-c``
    or on stdin).
    """
    if environ.get(ALLOCATOR_VARIABLE) or RESTARTED_VARIABLE in environ:  # CPython ignores it empty, too
        return None
    if _glibc('malloc_trim') is None or getattr(sys, 'frozen', False) or sys.flags.ignore_environment:
        return None
    if sys.gettrace() is not None or not sys.executable or not os.path.isfile(sys.argv[0]):
        return None
    return sys.executable, list(sys.orig_argv), {**environ, ALLOCATOR_VARIABLE: 'malloc', RESTARTED_VARIABLE: '1'}


def current_allocator() -> str | None:
    """CPython's allocator of small objects (``pymalloc``, ``malloc``, ...); ``None`` where it does not say."""
    getter = getattr(ctypes.pythonapi, '_PyMem_GetCurrentAllocatorName', None)  # CPython's own, 3.8+
    if getter is None:
        return None
    getter.restype = ctypes.c_char_p
    name = getter()
    return name.decode() if name else None


def use_c_allocator() -> None:
    """
    Start this process over with ``PYTHONMALLOC=malloc`` if it should (see :func:`restart_command`).

    It replaces the process (the same PID) and never returns, unless the
    system refuses, in which case the process goes on as it is. In the
    process started over, both variables are removed again, so that the
    processes that the handlers start get the environment the user gave.
    """
    if os.environ.pop(RESTARTED_VARIABLE, None) is not None:
        os.environ.pop(ALLOCATOR_VARIABLE, None)
        return
    command = restart_command(os.environ)
    if command is None:
        return
    program, arguments, environment = command
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(program, arguments, environment)
    except OSError as e:
        logger.debug("Could not start over with the C allocator: %s", e)
