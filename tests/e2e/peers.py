"""
Released Kopf versions, installed from PyPI into virtualenvs of their own, to run as black boxes.

Each version is cached in ``~/.cache/kopf-peers/<version>`` (override the root
with ``$KOPF_PEERS_CACHE``), so that warm runs start at once; a cold machine
installs them on first use. Old versions do not run on new Pythons (before
1.36, their dataclasses trip over checks added in Python 3.11, and their TLS
setup over a check added in 3.10), so they get the newest interpreter they
run on that this machine has.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

CACHE = Path(os.environ.get('KOPF_PEERS_CACHE', Path.home() / '.cache' / 'kopf-peers'))

# The newest Python (major, minor) that each version imports on; None: any, including ours.
MAX_PYTHON: dict[str, tuple[int, int] | None] = {
    '0.27.1': (3, 9),
    '0.28.3': (3, 9),
    '1.29.2': (3, 9),
    '1.36.2': None,
    '1.45.2': None,
}

# Packages that a version needs besides itself: Kopf before 1.30 logs in only through a client library.
EXTRAS: dict[str, list[str]] = {
    '1.29.2': ['pykube-ng'],
}


class PeerUnavailable(Exception):
    """This version cannot run on this machine (no interpreter old enough)."""


def interpreter(version: str) -> str:
    """A Python that this Kopf version runs on: ours if new enough, else the newest older one found."""
    limit = MAX_PYTHON[version]
    if limit is None or sys.version_info[:2] <= limit:
        return sys.executable
    for minor in range(limit[1], 7, -1):
        candidates = [shutil.which(f'python3.{minor}')] + sorted(
            glob.glob(str(Path.home() / '.pyenv' / 'versions' / f'3.{minor}.*' / 'bin' / 'python')), reverse=True)
        for candidate in candidates:
            if candidate and os.access(candidate, os.X_OK) and _runs(candidate):
                return candidate
    raise PeerUnavailable(f"Kopf {version} needs Python {limit[0]}.{limit[1]} or older; none is installed here.")


def ensure(version: str, *, packages: tuple[str, ...] = ()) -> Path:
    """
    The ``kopf`` executable of this released version; installed into the cache if not there yet.

    ``packages`` are installed beside it (in a virtualenv of their own, e.g. the
    ``kubernetes`` client, whose presence changes what Kopf does at login).
    """
    name = '+'.join([version, *packages])
    root = CACHE / name
    marker = root / '.installed'
    CACHE.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE / f'{name}.lock'):
        if not (marker.exists() and _works(root) and _fits(root, version)):
            python = interpreter(version)
            shutil.rmtree(root, ignore_errors=True)
            _run([python, '-m', 'venv', str(root)], what=f"creating a virtualenv for Kopf {version}")
            _run([str(root / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet', '--disable-pip-version-check',
                  f'kopf=={version}', *EXTRAS.get(version, []), *packages],
                 what=f"installing Kopf {version} from PyPI")
            if not _works(root):
                raise RuntimeError(f"Kopf {version} was installed into {root}, but does not import.")
            marker.write_text(name)
    return root / 'bin' / 'kopf'


def _runs(python: str) -> bool:
    """Whether an interpreter really runs (e.g. a pyenv shim of a version not activated does not)."""
    try:
        return subprocess.run([python, '-c', 'pass'], capture_output=True, timeout=30).returncode == 0
    except OSError:
        return False


def _fits(root: Path, version: str) -> bool:
    """Whether a cached virtualenv is of a Python that this version runs on."""
    limit = MAX_PYTHON[version]
    if limit is None:
        return True
    code = f'import sys; print(sys.version_info[:2] <= {limit!r})'
    check = subprocess.run([str(root / 'bin' / 'python'), '-c', code],
                           capture_output=True, text=True, env=clean_env(), timeout=60, cwd=root)
    return check.stdout.strip() == 'True'


def _works(root: Path) -> bool:
    python = root / 'bin' / 'python'
    if not python.exists():
        return False
    check = subprocess.run([str(python), '-c', 'import kopf'], capture_output=True, env=clean_env(), timeout=60,
                           cwd=root)  # not from a directory where another kopf could be imported
    return check.returncode == 0


def _run(argv: list[str], *, what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=600, cwd=CACHE)
    if result.returncode != 0:
        raise RuntimeError(f"Failed {what}: {' '.join(argv)}\n{result.stdout}\n{result.stderr}")


def clean_env() -> dict[str, str]:
    """Our own kopf must never shadow the released one."""
    return {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONHOME')}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Parallel test sessions install a version once, not over each other."""
    with path.open('a') as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
