"""
A throwaway local Kubernetes control plane: etcd + kube-apiserver.

:class:`ControlPlane` runs the binaries (:mod:`.binaries`) on free loopback
ports with freshly generated certificates (:mod:`.certificates`) and an
admin kubeconfig, and tears everything down again, even after an
interrupted earlier run (:mod:`.processes`). It has no scheduler and no
controller-manager: pods are not started, garbage collection and namespace
deletion do not happen by themselves.

It starts in about three seconds: the servers run with what tests need
(RBAC authorisation, admission, CRDs, the status subresource, watches) and
without what only costs time here (API priority and fairness, fsync).
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from kopf._testkit import binaries, processes
from kopf._testkit.binaries import Progress

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
DEFAULT_START_TIMEOUT = 120.0
PORT_ATTEMPTS = 3
STATE_NAME = "plane.json"

Server = Literal["etcd", "kube-apiserver"]


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started, or reached; the message says why and what to do."""


class _PortConflict(ControlPlaneError):
    """A picked port was taken by someone else meanwhile; worth retrying."""


@dataclasses.dataclass(frozen=True)
class Owner:
    """The process responsible for stopping a control plane (by default, the one that starts it)."""

    pid: int
    start_time: str | None

    @classmethod
    def current(cls) -> Owner:
        return cls(pid=os.getpid(), start_time=processes.process_start_time(os.getpid()))

    @classmethod
    def parent(cls) -> Owner:
        return cls(pid=os.getppid(), start_time=processes.process_start_time(os.getppid()))


_running: set[ControlPlane] = set()
_running_lock = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    """A safety net: never leave servers behind when Python exits normally."""
    with _running_lock:
        planes = list(_running)
    for plane in planes:
        plane.stop()


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class ControlPlane:
    """
    etcd + kube-apiserver on loopback ports, with certificates and a kubeconfig.

    Use as a context manager, or call ``start()``/``stop()`` explicitly.
    ``stop()`` is idempotent and also undoes a partially failed ``start()``.
    ``progress`` receives the lines of a first build of the binaries (by
    default, they go to stderr).
    ``owner`` is the process that stops it (see :meth:`attach`).
    ``apiserver_args`` are added to kube-apiserver's command line (e.g.
    ``--watch-cache=false``, so that watches are served by etcd itself).
    """

    def __init__(
            self,
            workdir: Path | str | None = None,
            *,
            bin_dir: Path | None = None,
            start_timeout: float | None = None,
            keep_workdir: bool = False,
            progress: Progress = _to_stderr,
            owner: Owner | None = None,
            apiserver_args: Sequence[str] = (),
    ) -> None:
        self._given_workdir = Path(workdir).resolve() if workdir is not None else None
        self._bin_dir = bin_dir
        timeout = os.environ.get("KOPF_CONTROLPLANE_START_TIMEOUT")
        self.start_timeout = start_timeout or (float(timeout) if timeout else DEFAULT_START_TIMEOUT)
        self.keep_workdir = keep_workdir
        self.progress = progress
        self.owner = owner
        self.apiserver_args = tuple(apiserver_args)

        self.workdir: Path | None = None
        self.server: str = ""
        self.etcd_url: str = ""
        self.kubeconfig: Path | None = None
        self.ca_file: Path | None = None
        self.cert_file: Path | None = None
        self.key_file: Path | None = None
        self.startup_seconds: float | None = None
        self.attached = False

        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        self._argv: dict[str, list[str]] = {}
        self._children: dict[str, dict[str, Any]] = {}
        self._stop_lock = threading.Lock()

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            tb: TracebackType | None,
    ) -> None:
        self.stop()

    @classmethod
    def attach(cls, workdir: Path) -> ControlPlane:
        """
        A control plane that another process of this machine runs (e.g. a test worker), to use, not to stop.

        Its :meth:`stop` does nothing: its owner stops it.
        """
        try:
            state = json.loads((workdir / STATE_NAME).read_text())
        except (OSError, ValueError) as e:
            raise ControlPlaneError(f"No running control plane in {workdir}: {e}") from None
        plane = cls(workdir)
        plane.workdir = workdir
        plane.server, plane.etcd_url = state["server"], state["etcd_url"]
        plane.kubeconfig = Path(state["kubeconfig"])
        plane.ca_file, plane.cert_file, plane.key_file = (Path(state[key]) for key in ("ca", "cert", "key"))
        plane.attached = True
        return plane

    @property
    def running(self) -> bool:
        """Both processes are alive (as far as we can tell without asking them)."""
        if self.attached:
            assert self.workdir is not None
            record = processes.read_pidfile(self.workdir) or {}
            children = record.get("children", {})
            return len(children) == 2 and all(
                processes.is_same_process(int(child.get("pid", 0)), child.get("start_time"))
                for child in children.values())
        procs = (self._etcd, self._apiserver)
        return all(proc is not None and proc.poll() is None for proc in procs)

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until the core API is usable."""
        if self._apiserver is not None or self.attached:
            raise ControlPlaneError("This control plane is already started.")
        processes.cleanup_stale()
        try:
            bin_dir = self._bin_dir or binaries.ensure(self.progress)
        except binaries.BinariesError as e:
            raise ControlPlaneError(str(e)) from None
        started = time.monotonic()
        with _running_lock:
            _running.add(self)
        try:
            self._prepare_workdir()
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._start_processes(bin_dir)
                    break
                except _PortConflict:
                    if attempt == PORT_ATTEMPTS:
                        raise
                    self._stop_processes()
            self._write_state()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def detach(self) -> None:
        """Leave the servers running when this process exits: their owner (another process) stops them."""
        with _running_lock:
            _running.discard(self)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def stop(self) -> None:
        """Terminate both servers and remove the temporary workdir; safe to repeat; nothing if attached."""
        if self.attached:
            return
        with self._stop_lock:
            self._stop_processes()
            if self.workdir is not None:
                pidfile = self.workdir / processes.PIDFILE_NAME
                if self._given_workdir is None and not self.keep_workdir:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                else:
                    pidfile.unlink(missing_ok=True)
                self.workdir = None
            with _running_lock:
                _running.discard(self)

    def log_tail(self, lines: int = processes.LOG_TAIL_LINES) -> str:
        """The last lines of both servers' logs, to explain a failure."""
        if self.workdir is None:
            return "(no logs: the control plane is not running)"
        return "\n".join(f"Last lines of {name}.log:\n{processes.tail(self.workdir / f'{name}.log', lines)}"
                         for name in ("etcd", "kube-apiserver"))

    def stop_server(self, name: Server) -> None:
        """
        Stop one of the two servers abruptly, keeping its data and its port, to see what clients do meanwhile.

        :meth:`start_server` starts it again as it was: etcd with the same
        data, kube-apiserver with the same certificates and address.
        """
        proc = self._process(name)
        if proc is not None:
            processes.terminate(proc, graceful=False)
        self._set_process(name, None)
        self._children.pop(name, None)
        self._write_pidfile()

    def start_server(self, name: Server) -> None:
        """Start a server stopped by :meth:`stop_server` again, and wait until it serves."""
        if name not in self._argv:
            raise ControlPlaneError("The control plane is not started.")
        if self._process(name) is not None:
            raise ControlPlaneError(f"{name} is running already.")
        deadline = time.monotonic() + self.start_timeout
        self._set_process(name, self._spawn(name, self._argv[name], append=True))
        if name == "etcd":
            self._wait_for_etcd(deadline)
        else:
            self._wait_for_apiserver(deadline)

    def _process(self, name: Server) -> subprocess.Popen[bytes] | None:
        return self._etcd if name == "etcd" else self._apiserver

    def _set_process(self, name: Server, proc: subprocess.Popen[bytes] | None) -> None:
        if name == "etcd":
            self._etcd = proc
        else:
            self._apiserver = proc

    def user_kubeconfig(self, name: str, groups: tuple[str, ...] | list[str] = ()) -> Path:
        """
        A kubeconfig of a non-admin user: a client certificate with CN=name and O=groups, signed by our CA.

        The user has no permissions beyond what every authenticated user has,
        until a test binds roles to the name or to one of the groups.
        """
        from kopf._testkit import certificates  # cryptography: only where certificates are made

        if self.workdir is None or self.ca_file is None or self.kubeconfig is None:
            raise ControlPlaneError("The control plane is not started.")
        cert_file, key_file = certificates.issue_user(self.workdir / "certs", name, groups)
        return self._write_kubeconfig(self.workdir / "users" / f"{name}.kubeconfig", user=name,
                                      cert_file=cert_file, key_file=key_file)

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context trusting our CA and presenting the admin client cert."""
        if self.ca_file is None or self.cert_file is None or self.key_file is None:
            raise ControlPlaneError("The control plane is not started.")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context

    # Internals.

    def _prepare_workdir(self) -> None:
        """Create the workdir and claim it with a pidfile before anything else."""
        if self._given_workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=processes.WORKDIR_PREFIX))
        else:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
            # An explicit workdir may hold the servers of an interrupted earlier run.
            record = processes.read_pidfile(self.workdir) or {}
            owner = processes.live_owner(record)
            if owner is not None and owner != os.getpid() and (self.owner is None or owner != self.owner.pid):
                self.workdir = None  # Not ours: stop() must not touch it.
                raise ControlPlaneError(f"{self._given_workdir} is in use by process {owner}.")
            processes.kill_recorded_children(record)
        self._write_pidfile()

    def _write_pidfile(self) -> None:
        """Record who owns the workdir and which servers run in it."""
        assert self.workdir is not None
        owner = self.owner or Owner.current()
        record = {"owner": {"pid": owner.pid, "start_time": owner.start_time}, "children": self._children}
        _write_atomically(self.workdir / processes.PIDFILE_NAME, record)

    def _write_state(self) -> None:
        """What another process needs to use this control plane (see :meth:`attach`)."""
        assert self.workdir is not None
        _write_atomically(self.workdir / STATE_NAME, {
            "server": self.server, "etcd_url": self.etcd_url, "kubeconfig": str(self.kubeconfig),
            "ca": str(self.ca_file), "cert": str(self.cert_file), "key": str(self.key_file)})

    def _spawn(self, name: str, argv: list[str], *, append: bool = False) -> subprocess.Popen[bytes]:
        """Run a server in its own session, logging into the workdir."""
        assert self.workdir is not None
        # Truncated per attempt, so a retry's log shows only the retry; a restart of a server continues it.
        log = open(self.workdir / f"{name}.log", "ab" if append else "wb")  # Closed in stop().
        self._logs.append(log)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.workdir, start_new_session=True)
        self._argv[name] = argv
        self._children[name] = {"pid": proc.pid, "start_time": processes.process_start_time(proc.pid)}
        self._write_pidfile()
        return proc

    def _start_processes(self, bin_dir: Path) -> None:
        """One attempt with one set of ports; raises ``_PortConflict`` if they clash."""
        from kopf._testkit import certificates  # cryptography: only where certificates are made

        assert self.workdir is not None
        deadline = time.monotonic() + self.start_timeout
        etcd_port, peer_port, api_port = processes.free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self.server = f"https://127.0.0.1:{api_port}"

        shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
        certs = certificates.generate_certificates(self.workdir / "certs")
        self.ca_file = certs["ca_cert"]
        self.cert_file = certs["client_cert"]
        self.key_file = certs["client_key"]

        self._etcd = self._spawn("etcd", [
            str(bin_dir / "etcd"),
            "--name=kopf",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=kopf={peer_url}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # Throwaway data: durability only costs time.
            "--log-level=warn",
        ])
        self._wait_for_etcd(deadline)

        self._apiserver = self._spawn("kube-apiserver", [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--cert-dir={self.workdir / 'certs'}",
            f"--tls-cert-file={certs['serving_cert']}",
            f"--tls-private-key-file={certs['serving_key']}",
            f"--client-ca-file={certs['ca_cert']}",
            f"--secure-port={api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            # No controller-manager issues tokens, so pods must not require them.
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={certs['sa_pub']}",
            f"--service-account-signing-key-file={certs['sa_key']}",
            "--allow-privileged=true",
            # Its bootstrap configuration takes a second of every start, and one client needs no fairness.
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--v=1",
            *self.apiserver_args,
        ])
        self._wait_for_apiserver(deadline)
        assert self.cert_file is not None and self.key_file is not None
        self.kubeconfig = self._write_kubeconfig(self.workdir / "kubeconfig", user="admin",
                                                 cert_file=self.cert_file, key_file=self.key_file)

    def _check_alive(self, name: str, proc: subprocess.Popen[bytes] | None) -> None:
        """Fail fast with the server's log when it has exited during startup."""
        if proc is None or proc.poll() is None:
            return
        assert self.workdir is not None
        tail = processes.tail(self.workdir / f"{name}.log")
        error = _PortConflict if "address already in use" in tail else ControlPlaneError
        raise error(f"{name} exited with code {proc.returncode} during startup. Last lines of {name}.log:\n{tail}")

    def _timeout_error(self, name: str, waiting_for: str, last_error: str) -> ControlPlaneError:
        """Explain which server did not become ready, with both logs attached."""
        return ControlPlaneError(f"{name} did not become ready within {self.start_timeout:.0f}s "
                                 f"(waiting for {waiting_for}; last error: {last_error}).\n{self.log_tail()}")

    def _wait_for_etcd(self, deadline: float) -> None:
        """Poll etcd's health endpoint so apiserver errors are not blamed on etcd."""
        last_error = "no attempt yet"
        while time.monotonic() < deadline:
            self._check_alive("etcd", self._etcd)
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return
                    last_error = "unhealthy"
            except (OSError, ValueError) as exc:
                last_error = str(exc)
            time.sleep(0.05)
        raise self._timeout_error("etcd", f"{self.etcd_url}/health", last_error)

    def _wait_for_apiserver(self, deadline: float) -> None:
        """Wait for /readyz and then for the default namespace to exist."""
        context = self.ssl_context()
        for path in ("/readyz", "/api/v1/namespaces/default"):
            last_error = "no attempt yet"
            while True:
                self._check_alive("etcd", self._etcd)
                self._check_alive("kube-apiserver", self._apiserver)
                if time.monotonic() >= deadline:
                    raise self._timeout_error("kube-apiserver", self.server + path, last_error)
                try:
                    request = urllib.request.Request(self.server + path)
                    with urllib.request.urlopen(request, timeout=2, context=context) as resp:
                        if resp.status == 200:
                            break
                        last_error = f"HTTP {resp.status}"
                except urllib.error.HTTPError as exc:
                    last_error = f"HTTP {exc.code}: {exc.read()[:200]!r}"
                except OSError as exc:
                    last_error = str(exc)
                time.sleep(0.05)

    def _write_kubeconfig(self, path: Path, *, user: str, cert_file: Path, key_file: Path) -> Path:
        """A kubeconfig for a user with a client certificate; JSON-quoted strings are valid YAML."""
        q = json.dumps
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: kopf-controlplane\n"
            "  cluster:\n"
            f"    server: {q(self.server)}\n"
            f"    certificate-authority: {q(str(self.ca_file))}\n"
            "users:\n"
            f"- name: {q(user)}\n"
            "  user:\n"
            f"    client-certificate: {q(str(cert_file))}\n"
            f"    client-key: {q(str(key_file))}\n"
            "contexts:\n"
            "- name: kopf-controlplane\n"
            "  context:\n"
            "    cluster: kopf-controlplane\n"
            f"    user: {q(user)}\n"
            "    namespace: default\n"
            "current-context: kopf-controlplane\n"
        )
        return path

    def _stop_processes(self) -> None:
        """Stop the apiserver before etcd, so it does not spin on a lost backend; their data is thrown away."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                processes.terminate(proc, graceful=False)
        self._apiserver = None
        self._etcd = None
        self._children.clear()
        for log in self._logs:
            with contextlib.suppress(OSError):
                log.close()
        self._logs.clear()


def _write_atomically(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)
