"""
The C allocator's setting for a long-running operator process: freed big buffers go back to the system.

glibc's ``malloc`` serves big requests (from 128 KiB) from memory mapped for
each of them, which goes back to the system as soon as it is freed. But the
first time such a buffer is freed, glibc raises that threshold to its size,
and from then on serves buffers like it from its heap, which gives memory
back only from its top. An operator allocates and frees such buffers all the
time: every pooled HTTPS connection has a TLS read buffer of 256 KiB, freed
when the connection is closed after being idle. With the threshold raised,
the memory of a burst of work stays with the process for good; with the
threshold fixed, it is given back when the connections are closed.

Only ``kopf run`` and :func:`kopf.run` set it, since they own the process;
an operator embedded in another application leaves the allocator alone.
Elsewhere than with glibc, nothing is done.
"""
from __future__ import annotations

import ctypes
import logging
import platform

logger = logging.getLogger('kopf.engines.allocation')

M_MMAP_THRESHOLD = -3  # mallopt()'s parameter in glibc's <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's own initial value; setting it explicitly keeps it from rising


def return_big_buffers(threshold: int = MMAP_THRESHOLD) -> bool:
    """Let buffers of ``threshold`` bytes and more go back to the system when freed; whether it was done."""
    if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not done:
        logger.debug("The C allocator did not accept a fixed threshold for big buffers.")
    return done
