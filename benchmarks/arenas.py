"""
What keeps pymalloc's arenas: every live block in every pool, by what it is.

pymalloc gives an arena (1 MiB) back to the system only when all of its pools
(16 KiB) are empty, so a few long-lived blocks can keep megabytes resident
after a burst of work. This walks the pools of the running interpreter (found
by their headers in the anonymous memory of ``/proc/self/maps``), lists the
live blocks of each (those neither on the pool's free list nor past its
high-water mark), and names each block by the type of the object at its start
(after a GC header, and the managed-dict pointers of CPython 3.11, if any);
blocks that are no object (dict key tables, list item arrays, ...) are named
by their size class. For CPython 3.11 on 64-bit Linux only; used by
``benchmarks/traced_operator.py``.
"""
from __future__ import annotations

import array
import collections
import ctypes
import gc
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

POOL_SIZE = 1 << 14
POOL_OVERHEAD = 48
HEADER = struct.Struct('=QQQQIIII')
POINTER = struct.Struct('=Q')
HAVE_GC = 1 << 14
MANAGED_DICT = 1 << 4


@dataclass
class Arena:
    index: int
    pools: int = 0
    used_pools: int = 0
    live_bytes: int = 0
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    objects: list[tuple[str, int]] = field(default_factory=list)  # (kind, address of the object)


def _anonymous_regions() -> Iterator[tuple[int, int]]:
    with open('/proc/self/maps') as maps:
        for line in maps:
            parts = line.split()
            if parts[1].startswith('rw') and (len(parts) < 6 or parts[5] == '[heap]'):
                start, end = (int(x, 16) for x in parts[0].split('-'))
                yield start, end


def _pool(data: bytes) -> tuple[int, int, int, int, int] | None:
    """The header of a pool at the start of these bytes as (count, freeblock, arenaindex, szidx, nextoffset)."""
    count, freeblock, _, _, arenaindex, szidx, nextoffset, maxnextoffset = HEADER.unpack_from(data)
    if szidx >= 32:
        return None
    size = (szidx + 1) << 4
    if maxnextoffset != POOL_SIZE - size or not POOL_OVERHEAD <= nextoffset <= POOL_SIZE:
        return None
    if (nextoffset - POOL_OVERHEAD) % size or count & 0xFFFFFFFF > (POOL_SIZE - POOL_OVERHEAD) // size:
        return None
    return count & 0xFFFFFFFF, freeblock, arenaindex, szidx, nextoffset


def _types() -> dict[int, type]:
    found: dict[int, type] = {}
    stack: list[type] = [object, type]
    stack.extend(type(obj) for obj in gc.get_objects())
    while stack:
        cls = stack.pop()
        if id(cls) in found:
            continue
        found[id(cls)] = cls
        try:
            stack.extend(cls.__subclasses__())
        except TypeError:  # type.__subclasses__ unbound
            stack.extend(type.__subclasses__(cls))
    return found


def _name(data: bytes, offset: int, types: dict[int, type]) -> tuple[int, int]:
    """The type's address and the object's offset in the block; or (0, -1) if the block is no object."""
    for skip, needs in ((0, 0), (16, HAVE_GC), (32, HAVE_GC | MANAGED_DICT)):
        if offset + skip + 16 > len(data):
            break
        address = POINTER.unpack_from(data, offset + skip + 8)[0]
        cls = types.get(address)
        if cls is not None and (cls.__flags__ & needs) == needs:
            return address, skip
    log2_size, log2_index, kind = data[offset + 8], data[offset + 9], data[offset + 10]
    if 3 <= log2_size <= 30 and log2_size <= log2_index <= log2_size + 3 and kind <= 2:
        return log2_size, -1
    return 0, -1


def walk() -> dict[int, Arena]:
    """
    Every arena with its pools and the live blocks in them, by kind.

    The blocks are first recorded as bare numbers in arrays (whose buffers
    are too big for pymalloc), so that the walk itself leaves no small
    objects in the pools that it has yet to read.
    """
    types = _types()
    pools = array.array('Q')  # per pool: arena index, block size, and whether used
    blocks = array.array('Q')  # per live block: pool's number, address, type or dict-keys size, object offset
    for start, end in list(_anonymous_regions()):
        first = (start + POOL_SIZE - 1) & ~(POOL_SIZE - 1)
        for address in range(first, end - POOL_SIZE + 1, POOL_SIZE):
            if _pool(ctypes.string_at(address, HEADER.size)) is None:
                continue  # not a pool: its 16 KiB need no reading
            # One copy of the whole pool, header and blocks together: the walk's own allocations change them.
            data = ctypes.string_at(address, POOL_SIZE)
            header = _pool(data)
            if header is None:
                continue
            count, freeblock, index, szidx, nextoffset = header
            if count:
                _blocks(len(pools) // 3, address, data, freeblock, szidx, nextoffset, blocks, types)
            pools.extend((index, (szidx + 1) << 4, 1 if count else 0))
    return _tally(pools, blocks, types)


def _blocks(number: int, address: int, data: bytes, freeblock: int, szidx: int, nextoffset: int,
            blocks: array.array[int], types: dict[int, type]) -> None:
    size = (szidx + 1) << 4
    free = bytearray(POOL_SIZE // size + 1)  # by block number: no set of addresses, which would be in the pools
    while freeblock and address <= freeblock < address + POOL_SIZE and not free[(freeblock - address) // size]:
        free[(freeblock - address) // size] = 1
        freeblock = POINTER.unpack_from(data, freeblock - address)[0]
    for offset in range(POOL_OVERHEAD, nextoffset, size):
        if not free[offset // size]:
            what, skip = _name(data, offset, types)
            blocks.extend((number, address + offset, what, skip + 1))


def _tally(pools: array.array[int], blocks: array.array[int], types: dict[int, type]) -> dict[int, Arena]:
    arenas: dict[int, Arena] = {}
    for number in range(len(pools) // 3):
        index, _, used = pools[number * 3:number * 3 + 3]
        arena = arenas.setdefault(index, Arena(index))
        arena.pools += 1
        arena.used_pools += used
    for i in range(0, len(blocks), 4):
        number, address, what, skip = blocks[i:i + 4]
        arena = arenas[pools[number * 3]]
        arena.live_bytes += pools[number * 3 + 1]
        if skip:
            cls = types[what]
            kind = cls.__qualname__ if cls.__module__ == 'builtins' else f"{cls.__module__}.{cls.__qualname__}"
            arena.objects.append((kind, address + skip - 1))
        elif what:
            kind = f"(dict keys {1 << what})"
        else:
            kind = f"(raw {pools[number * 3 + 1]} B)"
        arena.kinds[kind] += 1
    return arenas


def holders(arenas: dict[int, Arena], sparse: float = 0.5) -> collections.Counter[str]:
    """
    What refers to the objects in sparsely used arenas: ``"kind <- referrer's type"``.

    Found by walking from the objects that the garbage collector tracks to
    every object they refer to, untracked ones included (strings, numbers,
    tuples and dicts of those); nothing is dereferenced by its address.
    """
    capacity = 63 * POOL_SIZE
    wanted = {address: kind for arena in arenas.values() if arena.live_bytes < sparse * capacity
              for kind, address in arena.objects}
    found: collections.Counter[str] = collections.Counter()
    visited: set[int] = set()
    stack = gc.get_objects()
    while stack:
        obj = stack.pop()
        if obj is visited or obj is wanted:
            continue  # its own numbers, possibly where blocks of the walk's time were freed since
        for ref in gc.get_referents(obj):
            kind = wanted.get(id(ref))
            if kind is not None:
                found[f"{kind} <- {type(obj).__module__}.{type(obj).__qualname__}"] += 1
            if not gc.is_tracked(ref) and id(ref) not in visited:
                visited.add(id(ref))
                stack.append(ref)
    return found


def summary(arenas: dict[int, Arena], sparse: float = 0.5, top: int = 40) -> dict[str, object]:
    """Totals, and what lives in the sparsely used arenas (those that a few blocks keep)."""
    capacity = 63 * POOL_SIZE
    kept = [a for a in arenas.values() if a.live_bytes < sparse * capacity]
    kinds: collections.Counter[str] = collections.Counter()
    for arena in kept:
        kinds.update(arena.kinds)
    return {
        'python': sys.version.split()[0],
        'arenas': len(arenas),
        'live_mb': sum(a.live_bytes for a in arenas.values()) / 2**20,
        'sparse_arenas': len(kept),
        'sparse_live_mb': sum(a.live_bytes for a in kept) / 2**20,
        'in_sparse_arenas': kinds.most_common(top),
        'held_by': holders(arenas, sparse).most_common(top),
        'utilisation': sorted(round(a.live_bytes / capacity, 2) for a in arenas.values()),
    }
