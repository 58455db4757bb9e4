"""
The binaries of the local control plane: ``kube-apiserver`` and ``etcd``, found or built.

They are taken from the first place that has them:

1. ``$KOPF_CONTROLPLANE_BIN``: a directory with both, e.g. from a release
   or a package manager (used as it is, never built into);
2. ``$KUBEBUILDER_ASSETS``: the directory that controller-runtime's
   ``setup-envtest`` prepares, for those who have one already;
3. the cache (``$KOPF_CONTROLPLANE_CACHE``, else
   ``$XDG_CACHE_HOME/kopf-controlplane``, else ``~/.cache/kopf-controlplane``),
   in a directory named by a hash of the Go sources shipped in ``go/``, the
   platform and the build recipe: a change of any of them builds anew;
4. built from those Go sources with the Go toolchain (once; about five
   minutes on two cores), with progress reported as it goes.

When none of them works, :class:`BinariesError` says in one line what to
install or set. Concurrent builds (parallel test sessions or workers) are
serialised with a lock in the cache; the loser finds the binaries built.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / 'go'
NAMES = ('etcd', 'kube-apiserver')
ENV_BIN = 'KOPF_CONTROLPLANE_BIN'
ENV_ASSETS = 'KUBEBUILDER_ASSETS'
ENV_CACHE = 'KOPF_CONTROLPLANE_CACHE'
APISERVER_PACKAGE = 'k8s.io/kubernetes/cmd/kube-apiserver'
ETCD_PACKAGE = './cmd/etcd'
# Everything about the build that is not in the Go sources: a change here builds anew.
RECIPE = 'CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" (+ version stamps); recipe 1'
MINIMUM_GO = (1, 21)  # older toolchains cannot fetch the one that go.mod asks for
PROGRESS_INTERVAL = 15.0  # seconds between two progress lines of one long step
TAIL_LINES = 40
INSTALL_HINT = (f"set {ENV_BIN} (or {ENV_ASSETS}) to a directory with kube-apiserver and etcd, "
                f"or install Go 1.24+ (https://go.dev/dl/) to build them once (about 5 minutes), "
                f"or run the tests against an existing cluster with --kopf-kubeconfig")

Progress = Callable[[str], None]


class BinariesError(RuntimeError):
    """The binaries can be neither found nor built; the message says what to do."""


def _quiet(message: str) -> None:
    pass


def ensure(progress: Progress = _quiet) -> Path:
    """The directory with ``kube-apiserver`` and ``etcd``: given, cached, or built now (see the module)."""
    for variable in (ENV_BIN, ENV_ASSETS):
        given = os.environ.get(variable)
        if given:
            return _given(variable, Path(given).expanduser())
    go = shutil.which('go')
    if go is None:
        cached = _any_cached()
        if cached is not None:
            return cached
        raise BinariesError(f"No kube-apiserver and etcd for the test control plane, and no Go toolchain to build "
                            f"them: {INSTALL_HINT}.")
    bindir = cache_root() / cache_key(go)
    if _complete(bindir):
        return bindir
    return _build(go, bindir, progress=progress)


def cache_root() -> Path:
    """Where the built binaries are kept, one directory per cache key."""
    explicit = os.environ.get(ENV_CACHE)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache'
    return Path(base) / 'kopf-controlplane'


def cache_key(go: str = 'go') -> str:
    """A hash of the Go sources, the target platform and the recipe: what the binaries are built from."""
    digest = hashlib.sha256()
    digest.update(f"{_go_env(go, 'GOOS')}/{_go_env(go, 'GOARCH')}\n{RECIPE}\n".encode())
    sources = [path for path in SOURCES.rglob('*')
               if path.is_file() and (path.name in ('go.mod', 'go.sum') or path.suffix == '.go')]
    for path in sorted(sources):
        digest.update(f"== {path.relative_to(SOURCES).as_posix()}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _given(variable: str, directory: Path) -> Path:
    missing = [name for name in NAMES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesError(f"${variable}={directory} has no executable {' and '.join(missing)}: point it to a "
                            f"directory with both kube-apiserver and etcd, or unset it.")
    return directory


def _complete(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in NAMES)


def _any_cached() -> Path | None:
    """Without Go, the key cannot be computed for sure: take the newest complete build in the cache."""
    root = cache_root()
    candidates = [path for path in root.glob('*') if not path.name.startswith('.') and _complete(path)]
    return max(candidates, key=lambda path: path.stat().st_mtime, default=None)


def _go_env(go: str, name: str) -> str:
    return subprocess.run([go, 'env', name], check=True, capture_output=True, text=True).stdout.strip()


def _go_version(go: str) -> tuple[int, ...]:
    text = _go_env(go, 'GOVERSION')  # e.g. go1.24.2, go1.25rc1
    match = re.match(r'go(\d+)\.(\d+)', text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One build at a time per cache, across processes."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / '.build.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(go: str, bindir: Path, *, progress: Progress) -> Path:
    version = _go_version(go)
    if version < MINIMUM_GO:
        raise BinariesError(f"Go {'.'.join(map(str, version))} is too old to build the test control plane: "
                            f"install Go 1.24+ (https://go.dev/dl/), or {ENV_BIN}=DIR with prebuilt binaries.")
    with _locked(bindir.parent):
        if _complete(bindir):
            progress(f"The control plane was built meanwhile by another process: {bindir}")
            return bindir
        started = time.monotonic()
        progress(f"Building kube-apiserver and etcd with Go once, into {bindir} (about 5 minutes; later runs "
                 f"take them from there) ...")
        scratch = Path(tempfile.mkdtemp(prefix=f'.build-{bindir.name}-', dir=bindir.parent))
        try:
            env = _build_env()
            kubernetes = _run(go, ['list', '-m', '-f', '{{.Version}}', 'k8s.io/kubernetes'], env=env,
                              what="reading the Kubernetes version", progress=progress).strip()
            _compile(go, ETCD_PACKAGE, scratch / 'etcd', ldflags='-s -w', env=env, progress=progress, name='etcd')
            _compile(go, APISERVER_PACKAGE, scratch / 'kube-apiserver', ldflags=_stamps(kubernetes), env=env,
                     progress=progress, name=f'kube-apiserver {kubernetes}')
            shutil.rmtree(bindir, ignore_errors=True)
            scratch.chmod(0o755)
            scratch.rename(bindir)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        progress(f"Built the control plane in {time.monotonic() - started:.0f}s.")
    return bindir


def _build_env() -> dict[str, str]:
    """The user's Go environment, but a static build that never rewrites the shipped go.mod."""
    env = dict(os.environ, CGO_ENABLED='0')
    env['GOFLAGS'] = ' '.join([*env.get('GOFLAGS', '').split(), '-mod=readonly'])
    return env


def _stamps(version: str) -> str:
    """What ``kube-apiserver --version`` and the server's /version report, as in a release build."""
    major, minor = (version.lstrip('v').split('.') + ['0', '0'])[:2]
    flags = ['-s', '-w']
    for package in ('k8s.io/component-base/version', 'k8s.io/client-go/pkg/version'):
        flags += [f'-X {package}.gitVersion={version}', f'-X {package}.gitMajor={major}',
                  f'-X {package}.gitMinor={minor}', f'-X {package}.gitTreeState=clean',
                  f'-X {package}.buildDate={time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}']
    return ' '.join(flags)


def _compile(go: str, package: str, output: Path, *, ldflags: str, env: dict[str, str], progress: Progress,
             name: str) -> None:
    """Build one program, reporting now and then how many of its packages are compiled."""
    progress(f"Fetching the modules of {name} (unless fetched before) ...")
    total = len(_run(go, ['list', '-deps', package], env=env, what=f"listing the packages of {name}",
                     progress=progress, counting='modules fetched').split())
    progress(f"Compiling {name}: {total} packages ...")
    _run(go, ['build', '-v', '-trimpath', '-buildvcs=false', '-ldflags', ldflags, '-o', str(output), package],
         env=env, what=f"building {name}", progress=progress, counting=f'of {total} packages of {name} compiled')


def _run(go: str, args: list[str], *, env: dict[str, str], what: str, progress: Progress,
         counting: str = '') -> str:
    """
    Run a Go command and give its output; its progress lines (on stderr) are counted and reported now and then.

    ``go build -v`` names each package it compiles, ``go list`` each module it
    downloads: a count every :data:`PROGRESS_INTERVAL` seconds shows that it
    is alive without flooding the terminal. A failure shows the last lines.
    """
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    count, last = 0, time.monotonic()
    with tempfile.TemporaryFile('w+') as stdout:
        with subprocess.Popen([go, *args], cwd=SOURCES, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                              stderr=subprocess.PIPE, text=True) as process:
            assert process.stderr is not None
            for line in process.stderr:
                tail.append(line.rstrip('\n'))
                count += 1
                if counting and time.monotonic() - last >= PROGRESS_INTERVAL:
                    last = time.monotonic()
                    progress(f"... {count} {counting}")
            code = process.wait()
        stdout.seek(0)
        output = stdout.read()
    if code != 0:
        log = '\n'.join(tail) or '(no output)'
        raise BinariesError(f"{what.capitalize()} with {go} failed (exit code {code}); the last lines:\n{log}")
    return output
