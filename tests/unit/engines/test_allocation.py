"""
The C allocator's setting: big buffers go back to the system when freed, only where glibc is.
"""
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
