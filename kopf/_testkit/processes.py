"""
The processes of local control planes: whose they are, and how they are stopped, also after a crash.

Every control plane has a working directory (``kopf-controlplane-*`` in the
temporary directory) with a pidfile that names its owner (the process that
is responsible for stopping it) and its servers, each with the kernel's
start time, so that a reused pid is never mistaken for them.
:func:`cleanup_stale` stops and removes what the owners of earlier runs left
behind when they died (SIGKILL, a closed terminal); the control planes of
live owners -- parallel sessions, or a test session's workers sharing one --
are left alone.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

WORKDIR_PREFIX = "kopf-controlplane-"
PIDFILE_NAME = "pids.json"
STOP_TIMEOUT = 15.0
LOG_TAIL_LINES = 40


def free_ports(count: int) -> list[int]:
    """Pick distinct free ports, holding them all open so none repeats."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None if unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; skip past it.
    return stat.rsplit(")", 1)[-1].split()


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a process, to tell a pid from a reused one."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None  # Field 22.


def is_same_process(pid: int, start_time: str | None) -> bool:
    """True if ``pid`` is alive (not a zombie) and still the process recorded earlier."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # Alive, but someone else's.
    fields = _proc_stat(pid)
    if fields is None:
        return True  # No /proc to tell more; trust the signal check.
    if fields[0] in ("Z", "X"):
        return False  # Dead, only not reaped yet.
    current = fields[19] if len(fields) > 19 else None
    return start_time is None or current is None or current == start_time


def kill_group(pid: int, sig: int) -> None:
    """Signal a process group led by ``pid``, or the process alone as a fallback."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def terminate(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT, *, graceful: bool = True) -> None:
    """Stop a process group politely (unless not ``graceful``), then forcefully; never raise."""
    if graceful and proc.poll() is None:
        kill_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # Kill leftovers of the group even if the leader has already exited.
    kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


def read_pidfile(workdir: Path) -> dict[str, Any] | None:
    """The ownership record of a workdir; None if there is none; {} if unreadable."""
    try:
        record = json.loads((workdir / PIDFILE_NAME).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def live_owner(record: dict[str, Any]) -> int | None:
    """The pid of the workdir's owner if it is still running, else None."""
    owner = record.get("owner", {})
    pid = int(owner.get("pid", 0))
    return pid if is_same_process(pid, owner.get("start_time")) else None


def kill_recorded_children(record: dict[str, Any]) -> None:
    """Kill the servers listed in an ownership record, if they are still those processes."""
    for child in record.get("children", {}).values():
        pid = int(child.get("pid", 0))
        if is_same_process(pid, child.get("start_time")):
            kill_group(pid, signal.SIGKILL)


def cleanup_stale(root: Path | None = None) -> list[Path]:
    """Kill processes and remove workdirs of earlier runs that did not clean up.

    A workdir is stale when the process that created it is gone (killed by
    SIGKILL, a crashed terminal, etc.). Workdirs of live owners are left alone,
    so parallel sessions on one machine do not disturb each other.
    """
    root = Path(tempfile.gettempdir()) if root is None else root
    removed: list[Path] = []
    for workdir in sorted(root.glob(f"{WORKDIR_PREFIX}*")):
        if not workdir.is_dir():
            continue
        record = read_pidfile(workdir)
        if record is None:
            # Either old debris or a run that has only just created its dir.
            try:
                if time.time() - workdir.stat().st_mtime < 600:
                    continue
            except OSError:
                continue
            record = {}
        if live_owner(record) is not None:
            continue  # Ours (``stop()`` handles it) or a parallel session's.
        kill_recorded_children(record)
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(workdir)
    return removed
