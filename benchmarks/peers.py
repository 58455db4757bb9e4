"""
The released Kopf, installed from PyPI into a cached virtualenv of its own.

The peer is only ever run as a black box (``kopf run``); its code never enters
this repository. The virtualenv is created with the same base interpreter as
the one running the benchmark, so that both frameworks run on the same Python.
Run ``python -m benchmarks.peers [VERSION]`` to prepare it ahead of time.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_VERSION = '1.45.2'
CACHE_ROOT = Path(os.environ.get('KOPF_PEERS_CACHE', Path.home() / '.cache' / 'kopf-peers'))
MARKER = '.installed'


class PeerError(RuntimeError):
    """The released Kopf could not be installed or does not work."""


def peer_dir(version: str) -> Path:
    return CACHE_ROOT / version


def ensure_peer(version: str = DEFAULT_VERSION) -> Path:
    """The ``kopf`` executable of the released Kopf ``version``; installed on first use."""
    root = peer_dir(version)
    kopf_bin = root / 'bin' / 'kopf'
    if (root / MARKER).exists() and kopf_bin.exists():
        return kopf_bin
    print(f"Installing the released kopf=={version} into {root} (once) ...", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    base_python = getattr(sys, '_base_executable', sys.executable)
    _run([base_python, '-m', 'venv', str(root)], what="creating the virtualenv")
    _run([str(root / 'bin' / 'python'), '-m', 'pip', 'install', '--quiet', f'kopf=={version}'],
         what=f"pip install kopf=={version}")
    installed = subprocess.run([str(root / 'bin' / 'python'), '-c', 'import kopf, sys; print(kopf.__file__)'],
                               capture_output=True, text=True, cwd=root, env=peer_env())
    if installed.returncode != 0 or not installed.stdout.strip().startswith(str(root)):
        raise PeerError(f"The released kopf in {root} does not import from its own virtualenv: "
                        f"{installed.stdout.strip()} {installed.stderr.strip()}")
    (root / MARKER).write_text(version + '\n')
    return kopf_bin


def peer_env() -> dict[str, str]:
    """The environment for the peer: nothing that could make it import this repository's ``kopf``."""
    env = {key: value for key, value in os.environ.items() if key not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    env['PYTHONNOUSERSITE'] = '1'
    return env


def installed_versions(kopf_bin: Path) -> str:
    """The versions of the peer and its HTTP client, for the report."""
    python = kopf_bin.parent / 'python'
    code = "import importlib.metadata as m; print(' '.join(f'{p}=={m.version(p)}' for p in ('kopf', 'aiohttp')))"
    result = subprocess.run([str(python), '-c', code], capture_output=True, text=True, env=peer_env(),
                            cwd=kopf_bin.parent)
    return result.stdout.strip() or result.stderr.strip()


def _run(argv: list[str], *, what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, env=peer_env())
    if result.returncode != 0:
        raise PeerError(f"Installing the released Kopf failed while {what} (exit code {result.returncode}):\n"
                        f"{result.stdout[-2000:]}{result.stderr[-2000:]}")


if __name__ == '__main__':
    binary = ensure_peer(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_VERSION)
    print(binary, installed_versions(binary))
