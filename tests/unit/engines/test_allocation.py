"""
The C allocator's upkeep: big buffers go back to the system when freed, and
free memory when the process is quiet after a burst; only where glibc is.
"""
import asyncio
import ctypes
import platform

import pytest

from kopf.engines import allocation


class FakeLibc:
    """A C library with a ``mallopt`` that remembers its calls (and, like a ctypes function, takes argtypes)."""

    def __init__(self, result: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.result = result

        def mallopt(param: int, value: int) -> int:
            self.calls.append((param, value))
            return self.result

        self.mallopt = mallopt


@pytest.fixture()
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(platform, 'system', lambda: 'Linux')
    monkeypatch.setattr(platform, 'libc_ver', lambda: ('glibc', '2.36'))
    monkeypatch.setattr(ctypes, 'CDLL', lambda name: fake)
    return fake


def test_the_threshold_of_big_buffers_is_fixed_with_glibc(libc):
    assert allocation.return_big_buffers()
    assert libc.calls == [(allocation.M_MMAP_THRESHOLD, 128 * 1024)]
    assert allocation.M_MMAP_THRESHOLD == -3  # as in glibc's <malloc.h>


def test_a_refusal_of_the_allocator_is_reported_as_not_done(libc):
    libc.result = 0
    assert not allocation.return_big_buffers(4096)
    assert libc.calls == [(allocation.M_MMAP_THRESHOLD, 4096)]


@pytest.mark.parametrize('system, libc_name', [('Darwin', ''), ('Linux', 'musl'), ('Windows', '')])
def test_nothing_is_done_without_glibc(monkeypatch, system, libc_name):
    monkeypatch.setattr(platform, 'system', lambda: system)
    monkeypatch.setattr(platform, 'libc_ver', lambda: (libc_name, ''))
    monkeypatch.setattr(ctypes, 'CDLL', lambda name: pytest.fail("the C library must not be touched"))
    assert not allocation.return_big_buffers()


def test_a_c_library_without_mallopt_is_left_alone(monkeypatch):
    monkeypatch.setattr(platform, 'system', lambda: 'Linux')
    monkeypatch.setattr(platform, 'libc_ver', lambda: ('glibc', '2.36'))
    monkeypatch.setattr(ctypes, 'CDLL', lambda name: object())
    assert not allocation.return_big_buffers()


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc', reason="the real allocator is glibc's only on glibc systems")
def test_the_real_allocator_accepts_it():
    assert allocation.return_big_buffers()


# --- Free memory back to the system when quiet ---------------------------------------------------

MB = 2**20


class Process:
    """A process as the trimmer sees it: CPU time and resident memory, changed by the test between checks."""

    def __init__(self, resident: int) -> None:
        self.cpu = 0.0
        self.resident = resident
        self.trims: list[int] = []
        self.after_trim = resident

    def release(self) -> bool:
        self.trims.append(self.resident)
        self.resident = self.after_trim
        return True


async def run_checks(process: Process, steps: list[tuple[float, int]]) -> None:
    """Let the trimmer check once per step; before each check, the process uses (CPU seconds, resident)."""
    checks = iter(steps)

    async def sleep(_: float) -> None:
        try:
            used, resident = next(checks)
        except StopIteration:
            raise asyncio.CancelledError from None
        process.cpu += used
        process.resident = resident

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocation.asyncio, 'sleep', sleep)
        with pytest.raises(asyncio.CancelledError):
            await allocation.trim_when_quiet(interval=10, cpu_share=0.05, growth=8 * MB,
                                             cpu_time=lambda: process.cpu, measure=lambda: process.resident,
                                             release=process.release)


async def test_a_grown_process_is_trimmed_once_it_is_quiet():
    process = Process(resident=50 * MB)
    process.after_trim = 60 * MB
    await run_checks(process, [(5.0, 150 * MB), (3.0, 160 * MB), (0.1, 160 * MB), (0.1, 62 * MB), (0.0, 65 * MB)])
    assert process.trims == [160 * MB]  # not while busy; once when quiet; not again without new growth


async def test_a_quiet_process_that_has_not_grown_is_not_trimmed():
    process = Process(resident=50 * MB)
    await run_checks(process, [(0.0, 55 * MB), (0.0, 57 * MB), (0.0, 50 * MB)])
    assert process.trims == []


async def test_growth_is_counted_from_the_size_after_the_last_trim_or_a_smaller_one():
    process = Process(resident=100 * MB)
    process.after_trim = 70 * MB
    await run_checks(process, [(0.0, 40 * MB), (0.0, 47 * MB), (0.0, 90 * MB), (0.0, 75 * MB), (0.0, 79 * MB)])
    # 40 -> 47 is too little growth; 40 -> 90 is enough; then 70 (after the trim) -> 75 is not, -> 79 is.
    assert process.trims == [90 * MB, 79 * MB]


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc', reason="the real allocator is glibc's only on glibc systems")
def test_the_real_allocator_trims_and_tells_its_free_memory():
    garbage = [bytearray(1000) for _ in range(20_000)]
    del garbage[::2]
    assert allocation.free_memory() >= 5 * MB
    allocation.release_free_memory()  # whether it had anything to give back depends on the process
    assert allocation.resident_memory() > 1 * MB


def test_nothing_is_trimmed_without_glibc(monkeypatch):
    monkeypatch.setattr(platform, 'system', lambda: 'Darwin')
    monkeypatch.setattr(ctypes, 'CDLL', lambda name: pytest.fail("the C library must not be touched"))
    assert not allocation.release_free_memory()
