"""
The C allocator's upkeep: big buffers go back to the system when freed, and
free memory when the process is quiet after a burst; only where glibc is.
"""
import asyncio
import ctypes
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from kopf._runtime import allocation


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
        self.steps: list[str] = []

    def collect(self) -> int:
        self.steps.append('collect')
        return 0

    def release(self) -> bool:
        self.steps.append('trim')
        self.trims.append(self.resident)
        self.resident = self.after_trim
        return True


async def run_checks(process: Process, steps: list[tuple[float, int]]) -> None:
    """Let the trimmer check once per step; before each check, the process uses (CPU seconds, resident)."""
    checks = iter(steps)

    class Steps:
        """A clock whose every interval is one step of the process; it ends the trimmer after the last one."""

        async def sleep(self, _: float) -> None:
            try:
                used, resident = next(checks)
            except StopIteration:
                raise asyncio.CancelledError from None
            process.cpu += used
            process.resident = resident

    with pytest.raises(asyncio.CancelledError):
        await allocation.trim_when_quiet(interval=10, cpu_share=0.05, growth=8 * MB,
                                         cpu_time=lambda: process.cpu, measure=lambda: process.resident,
                                         release=process.release, collect=process.collect, clock=Steps())


async def test_a_grown_process_is_trimmed_once_it_is_quiet():
    process = Process(resident=50 * MB)
    process.after_trim = 60 * MB
    await run_checks(process, [(5.0, 150 * MB), (3.0, 160 * MB), (0.1, 160 * MB), (0.1, 62 * MB), (0.0, 65 * MB)])
    assert process.trims == [160 * MB]  # not while busy; once when quiet; not again without new growth
    assert process.steps == ['collect', 'trim']  # the burst's reference cycles are freed first, then given back


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


# --- kopf run starts over with the C allocator ---------------------------------------------------

@pytest.fixture()
def restartable(monkeypatch):
    """A process that could start over: glibc, a script on disk, no tracer, not frozen."""
    monkeypatch.setattr(platform, 'system', lambda: 'Linux')
    monkeypatch.setattr(platform, 'libc_ver', lambda: ('glibc', '2.36'))
    monkeypatch.setattr(ctypes, 'CDLL', lambda name: FakeLibc())
    monkeypatch.setattr(FakeLibc, 'malloc_trim', lambda self, pad: 1, raising=False)
    monkeypatch.setattr(sys, 'gettrace', lambda: None)
    monkeypatch.setattr(sys, 'argv', [__file__, 'run', 'operator.py'])
    monkeypatch.setattr(sys, 'orig_argv', ['python', '-m', 'kopf', 'run', 'operator.py'])
    monkeypatch.delattr(sys, 'frozen', raising=False)


def test_the_command_is_the_same_with_the_c_allocator_and_a_mark(restartable):
    program, arguments, environment = allocation.restart_command({'HOME': '/home/op'})
    assert program == sys.executable
    assert arguments == ['python', '-m', 'kopf', 'run', 'operator.py']
    assert environment == {'HOME': '/home/op', 'PYTHONMALLOC': 'malloc', 'KOPF_STARTED_WITH_MALLOC': '1'}


@pytest.mark.parametrize('environ', [{'PYTHONMALLOC': 'pymalloc'}, {'PYTHONMALLOC': 'malloc'},
                                     {'KOPF_STARTED_WITH_MALLOC': '1'}])
def test_the_users_choice_or_a_process_started_over_is_kept(restartable, environ):
    assert allocation.restart_command(environ) is None


def test_an_empty_choice_is_no_choice_as_for_cpython(restartable):
    assert allocation.restart_command({'PYTHONMALLOC': ''}) is not None


@pytest.mark.parametrize('condition', ['tracer', 'frozen', 'code from -c', 'code from stdin', 'no glibc'])
def test_a_process_that_cannot_be_repeated_as_it_is_goes_on(restartable, monkeypatch, condition):
    if condition == 'tracer':
        monkeypatch.setattr(sys, 'gettrace', lambda: (lambda *_: None))
    elif condition == 'frozen':
        monkeypatch.setattr(sys, 'frozen', True, raising=False)
    elif condition == 'code from -c':
        monkeypatch.setattr(sys, 'argv', ['-c', 'run'])
    elif condition == 'code from stdin':
        monkeypatch.setattr(sys, 'argv', ['-', 'run'])
    else:
        monkeypatch.setattr(platform, 'libc_ver', lambda: ('musl', ''))
    assert allocation.restart_command({}) is None


def test_the_process_is_replaced_by_its_start_over(restartable, monkeypatch):
    replaced = []
    monkeypatch.setattr(os, 'execve', lambda *command: replaced.append(command))
    monkeypatch.delenv('PYTHONMALLOC', raising=False)
    monkeypatch.delenv('KOPF_STARTED_WITH_MALLOC', raising=False)
    allocation.use_c_allocator()
    [(program, arguments, environment)] = replaced
    assert (program, arguments) == (sys.executable, sys.orig_argv)
    assert environment['PYTHONMALLOC'] == 'malloc' and environment['KOPF_STARTED_WITH_MALLOC'] == '1'


def test_a_refused_start_over_leaves_the_process_going_as_it_is(restartable, monkeypatch):
    def refuse(*_):
        raise PermissionError("not allowed")
    monkeypatch.setattr(os, 'execve', refuse)
    monkeypatch.delenv('PYTHONMALLOC', raising=False)
    allocation.use_c_allocator()  # no error
    assert 'PYTHONMALLOC' not in os.environ


def test_the_process_started_over_forgets_both_variables(restartable, monkeypatch):
    monkeypatch.setattr(os, 'execve', lambda *_: pytest.fail("started over twice"))
    monkeypatch.setenv('PYTHONMALLOC', 'malloc')
    monkeypatch.setenv('KOPF_STARTED_WITH_MALLOC', '1')
    allocation.use_c_allocator()
    assert 'PYTHONMALLOC' not in os.environ and 'KOPF_STARTED_WITH_MALLOC' not in os.environ


OPERATOR_REPORTING_ITS_ALLOCATOR = """
import ctypes, json, os, sys
name = ctypes.pythonapi._PyMem_GetCurrentAllocatorName
name.restype = ctypes.c_char_p
marks = ('PYTHONMALLOC', 'KOPF_STARTED_WITH_MALLOC')
print(json.dumps({'allocator': name().decode(), 'pid': os.getpid(),
                  'variables': sorted(key for key in os.environ if key in marks)}))
sys.exit(0)
"""


def run_reporting_operator(tmp_path, command, args=(), **env):
    script = tmp_path / 'operator.py'
    script.write_text(OPERATOR_REPORTING_ITS_ALLOCATOR)
    marks = ('PYTHONMALLOC', 'KOPF_STARTED_WITH_MALLOC')
    environ = {key: value for key, value in os.environ.items() if key not in marks}
    process = subprocess.Popen([*command, 'run', str(script), *args], env={**environ, **env},
                               stdout=subprocess.PIPE, text=True)
    output, _ = process.communicate(timeout=60)
    return process.pid, json.loads(output.splitlines()[-1])


def test_kopf_run_keeps_cpythons_allocator_by_default(tmp_path):
    pid, report = run_reporting_operator(tmp_path, [sys.executable, '-m', 'kopf'])
    assert report == {'allocator': 'pymalloc', 'pid': pid, 'variables': []}  # never started over unasked


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc', reason="kopf run starts over only with glibc")
@pytest.mark.parametrize('command', [[sys.executable, '-m', 'kopf'], [str(Path(sys.executable).parent / 'kopf')]],
                         ids=['python -m kopf', 'kopf'])
def test_kopf_run_with_the_option_runs_operators_with_the_c_allocator_in_the_same_process(tmp_path, command):
    if not Path(command[0]).exists():
        pytest.skip("the kopf command is not installed next to this interpreter")
    pid, report = run_reporting_operator(tmp_path, command, args=['--c-allocator'])
    assert report == {'allocator': 'malloc', 'pid': pid, 'variables': []}


@pytest.mark.skipif(platform.libc_ver()[0] != 'glibc', reason="kopf run starts over only with glibc")
def test_kopf_run_with_the_option_keeps_the_allocator_that_the_user_chose(tmp_path):
    pid, report = run_reporting_operator(tmp_path, [sys.executable, '-m', 'kopf'], args=['--c-allocator'],
                                         PYTHONMALLOC='pymalloc')
    assert report == {'allocator': 'pymalloc', 'pid': pid, 'variables': ['PYTHONMALLOC']}


def test_the_environment_variable_alone_is_the_opt_in_of_the_deployment_recipe(tmp_path):
    pid, report = run_reporting_operator(tmp_path, [sys.executable, '-m', 'kopf'], PYTHONMALLOC='malloc')
    assert report == {'allocator': 'malloc', 'pid': pid, 'variables': ['PYTHONMALLOC']}  # as CPython has it


# --- The memory limit: one line before the OOM killer -----------------------------------------------

async def watch_memory(readings: list[int], *, bound: int | None) -> None:
    """Let the guard look at the memory once per reading (the resident memory at that moment)."""
    values = iter(readings)
    current = [readings[0]]

    class Steps:
        async def sleep(self, _: float) -> None:
            try:
                current[0] = next(values)
            except StopIteration:
                raise asyncio.CancelledError from None

    next(values)  # the first reading is the one before the first sleep
    with pytest.raises(asyncio.CancelledError):
        await allocation.warn_near_memory_limit(limit=lambda: bound, measure=lambda: current[0], clock=Steps())


def limit_lines(caplog):
    return [r for r in caplog.records if 'memory limit' in r.getMessage()]


async def test_nearing_the_memory_limit_is_said_once_with_what_to_do(caplog):
    await watch_memory([100 * MB, 200 * MB, 410 * MB, 450 * MB, 480 * MB], bound=500 * MB)
    [record] = limit_lines(caplog)
    assert record.levelname == 'ERROR'
    assert record.getMessage() == (
        "The operator uses 410 MiB of its memory limit of 500 MiB (82%) and may be killed by the system soon: "
        "raise the limit to at least 615 MiB, or watch fewer objects per operator (fewer namespaces, "
        "or sharding with several replicas).")


async def test_nearing_the_limit_again_after_a_fall_is_said_again(caplog):
    await watch_memory([410 * MB, 380 * MB, 420 * MB, 300 * MB, 420 * MB], bound=500 * MB)
    assert len(limit_lines(caplog)) == 2  # not for the wobble above 70%, but after the fall below it


async def test_without_a_limit_nothing_is_watched(caplog):
    await asyncio.wait_for(allocation.warn_near_memory_limit(limit=lambda: None, measure=lambda: 10**12), 1)
    assert limit_lines(caplog) == []


def test_the_limit_is_read_from_the_cgroup_files(tmp_path):
    v2, v1 = tmp_path / 'memory.max', tmp_path / 'memory.limit_in_bytes'
    v1.write_text('9223372036854771712\n')  # cgroup v1's "no limit"
    assert allocation.memory_limit((str(v2), str(v1))) is None
    v1.write_text('268435456\n')
    assert allocation.memory_limit((str(v2), str(v1))) == 256 * MB
    v2.write_text('max\n')
    assert allocation.memory_limit((str(v2), str(v1))) is None  # v2 first: it is the one in use
    v2.write_text('536870912\n')
    assert allocation.memory_limit((str(v2), str(v1))) == 512 * MB
