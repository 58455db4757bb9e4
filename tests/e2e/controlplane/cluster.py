"""A throwaway local Kubernetes control plane: etcd + kube-apiserver.

The binaries are built from Go modules by ``build.sh`` (see ``ensure_binaries``).
``ControlPlane`` runs them on free loopback ports with freshly generated
certificates and a kubeconfig, and tears everything down again, even after an
interrupted earlier run (see ``cleanup_stale``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_SCRIPT = PACKAGE_DIR / "build.sh"

WORKDIR_PREFIX = "kopf-controlplane-"
PIDFILE_NAME = "pids.json"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_CLUSTER_IP = "10.0.0.1"  # The first address of the range: the "kubernetes" service.

DEFAULT_START_TIMEOUT = float(os.environ.get("KOPF_CONTROLPLANE_START_TIMEOUT", "120"))
STOP_TIMEOUT = 15.0
LOG_TAIL_LINES = 40
PORT_ATTEMPTS = 3


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started, or reached."""


class _PortConflict(ControlPlaneError):
    """A picked port was taken by someone else meanwhile; worth retrying."""


# --------------------------------------------------------------------------- #
# Binaries
# --------------------------------------------------------------------------- #


def ensure_binaries() -> Path:
    """Build (or reuse) etcd and kube-apiserver; return their directory.

    ``KOPF_CONTROLPLANE_BIN`` may point to a directory with prebuilt binaries,
    which skips the Go build entirely.
    """
    override = os.environ.get("KOPF_CONTROLPLANE_BIN")
    if override:
        bin_dir = Path(override)
        missing = [name for name in ("etcd", "kube-apiserver") if not (bin_dir / name).is_file()]
        if missing:
            raise ControlPlaneError(f"KOPF_CONTROLPLANE_BIN={override} lacks: {', '.join(missing)}.")
        return bin_dir

    if shutil.which("go") is None:
        raise ControlPlaneError(
            "The Go toolchain ('go') is not on PATH: it is needed to build kube-apiserver "
            "and etcd for the end-to-end tests (or set KOPF_CONTROLPLANE_BIN to prebuilt ones)."
        )

    # Stream the (long) build progress through while keeping its tail for errors.
    # Stdout carries only the final path, so reading it last cannot deadlock.
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    with subprocess.Popen(
        ["bash", str(BUILD_SCRIPT)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stderr:
            tail.append(line.rstrip("\n"))
            sys.stderr.write(line)
        stdout_lines = proc.stdout.read().strip().splitlines()
        returncode = proc.wait()
    if returncode != 0 or not stdout_lines:
        log = "\n".join(tail) or "(no output)"
        raise ControlPlaneError(
            f"Building the control plane with {BUILD_SCRIPT} failed (exit code {returncode}).\n"
            f"Last lines of the build log:\n{log}"
        )
    return Path(stdout_lines[-1])


# --------------------------------------------------------------------------- #
# Certificates
# --------------------------------------------------------------------------- #


def _write_private_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    """Write an unencrypted PKCS#8 PEM key readable by its owner only."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue_cert(
    *,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    is_ca: bool = False,
    usages: list[x509.ObjectIdentifier] | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    """Sign one certificate, valid from a bit in the past (clock skew) for a day."""
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    if is_ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def generate_certificates(cert_dir: Path) -> dict[str, Path]:
    """Create a CA, a serving cert, an admin client cert, and service-account keys.

    Everything is fresh per control plane, so nothing secret lives in the repo.
    """
    cert_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "ca_cert": cert_dir / "ca.crt",
        "ca_key": cert_dir / "ca.key",
        "serving_cert": cert_dir / "apiserver.crt",
        "serving_key": cert_dir / "apiserver.key",
        "client_cert": cert_dir / "admin.crt",
        "client_key": cert_dir / "admin.key",
        "sa_key": cert_dir / "sa.key",
        "sa_pub": cert_dir / "sa.pub",
    }

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kopf-controlplane-ca")])
    ca_cert = _issue_cert(
        subject=ca_name,
        public_key=ca_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        is_ca=True,
    )

    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_cert = _issue_cert(
        subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        public_key=serving_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address(SERVICE_CLUSTER_IP)),
        ],
    )

    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue_cert(
        subject=x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        public_key=client_key.public_key(),
        issuer=ca_name,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )

    # Service-account tokens are signed with RSA, as in a typical cluster.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pem = serialization.Encoding.PEM
    paths["ca_cert"].write_bytes(ca_cert.public_bytes(pem))
    _write_private_key(paths["ca_key"], ca_key)
    paths["serving_cert"].write_bytes(serving_cert.public_bytes(pem))
    _write_private_key(paths["serving_key"], serving_key)
    paths["client_cert"].write_bytes(client_cert.public_bytes(pem))
    _write_private_key(paths["client_key"], client_key)
    _write_private_key(paths["sa_key"], sa_key)
    paths["sa_pub"].write_bytes(sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    return paths


# --------------------------------------------------------------------------- #
# Processes
# --------------------------------------------------------------------------- #


def _free_ports(count: int) -> list[int]:
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


def _process_start_time(pid: int) -> str | None:
    """The kernel's start time of a process, to tell a pid from a reused one."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None  # Field 22.


def _is_same_process(pid: int, start_time: str | None) -> bool:
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


def _kill_group(pid: int, sig: int) -> None:
    """Signal a process group led by ``pid``, or the process alone as a fallback."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log file, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log file)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _terminate(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """Stop a process group politely, then forcefully; never raise."""
    if proc.poll() is None:
        _kill_group(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    # Kill leftovers of the group even if the leader has already exited.
    _kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)


def _read_pidfile(workdir: Path) -> dict[str, Any] | None:
    """The ownership record of a workdir; None if there is none; {} if unreadable."""
    try:
        record = json.loads((workdir / PIDFILE_NAME).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _live_owner(record: dict[str, Any]) -> int | None:
    """The pid of the workdir's owner if it is still running, else None."""
    owner = record.get("owner", {})
    pid = int(owner.get("pid", 0))
    return pid if _is_same_process(pid, owner.get("start_time")) else None


def _kill_recorded_children(record: dict[str, Any]) -> None:
    """Kill the servers listed in an ownership record, if they are still those processes."""
    for child in record.get("children", {}).values():
        pid = int(child.get("pid", 0))
        if _is_same_process(pid, child.get("start_time")):
            _kill_group(pid, signal.SIGKILL)


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
        record = _read_pidfile(workdir)
        if record is None:
            # Either old debris or a run that has only just created its dir.
            try:
                if time.time() - workdir.stat().st_mtime < 600:
                    continue
            except OSError:
                continue
            record = {}
        if _live_owner(record) is not None:
            continue  # Ours (``stop()`` handles it) or a parallel session's.
        _kill_recorded_children(record)
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(workdir)
    return removed


# --------------------------------------------------------------------------- #
# The control plane
# --------------------------------------------------------------------------- #

_running: set[ControlPlane] = set()
_running_lock = threading.Lock()


@atexit.register
def _stop_all_at_exit() -> None:
    """A safety net: never leave servers behind when Python exits normally."""
    with _running_lock:
        planes = list(_running)
    for plane in planes:
        plane.stop()


class ControlPlane:
    """etcd + kube-apiserver on loopback ports, with certificates and a kubeconfig.

    Use as a context manager, or call ``start()``/``stop()`` explicitly.
    ``stop()`` is idempotent and also undoes a partially failed ``start()``.
    """

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        bin_dir: Path | None = None,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        keep_workdir: bool = False,
    ) -> None:
        self._given_workdir = Path(workdir).resolve() if workdir is not None else None
        self._bin_dir = bin_dir
        self.start_timeout = start_timeout
        self.keep_workdir = keep_workdir

        self.workdir: Path | None = None
        self.server: str = ""
        self.etcd_url: str = ""
        self.kubeconfig: Path | None = None
        self.ca_file: Path | None = None
        self.cert_file: Path | None = None
        self.key_file: Path | None = None
        self.startup_seconds: float | None = None

        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []
        self._children: dict[str, dict[str, Any]] = {}
        self._stop_lock = threading.Lock()

    # -- context manager ---------------------------------------------------- #

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

    # -- public API --------------------------------------------------------- #

    @property
    def running(self) -> bool:
        """Both processes are alive (as far as we can tell without asking them)."""
        procs = (self._etcd, self._apiserver)
        return all(proc is not None and proc.poll() is None for proc in procs)

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until the core API is usable."""
        if self._apiserver is not None:
            raise ControlPlaneError("This control plane is already started.")
        cleanup_stale()
        bin_dir = self._bin_dir or ensure_binaries()
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
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Terminate both servers and remove the temporary workdir; safe to repeat."""
        with self._stop_lock:
            self._stop_processes()
            if self.workdir is not None:
                pidfile = self.workdir / PIDFILE_NAME
                if self._given_workdir is None and not self.keep_workdir:
                    shutil.rmtree(self.workdir, ignore_errors=True)
                else:
                    pidfile.unlink(missing_ok=True)
                self.workdir = None
            with _running_lock:
                _running.discard(self)

    def user_kubeconfig(self, name: str, groups: tuple[str, ...] | list[str] = ()) -> Path:
        """A kubeconfig of a non-admin user: a client certificate with CN=name and O=groups, signed by our CA.

        The user has no permissions beyond what every authenticated user has,
        until a test binds roles to the name or to one of the groups.
        """
        if self.workdir is None or self.ca_file is None or self.kubeconfig is None:
            raise ControlPlaneError("The control plane is not started.")
        users = self.workdir / "users"
        users.mkdir(exist_ok=True)
        ca_key = serialization.load_pem_private_key((self.workdir / "certs" / "ca.key").read_bytes(), password=None)
        ca_cert = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, name))
        cert = _issue_cert(
            subject=x509.Name(subject),
            public_key=key.public_key(),
            issuer=ca_cert.subject,
            issuer_key=ca_key,
            usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
        )
        cert_file, key_file = users / f"{name}.crt", users / f"{name}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private_key(key_file, key)
        return self._write_kubeconfig(users / f"{name}.kubeconfig", user=name, cert_file=cert_file,
                                      key_file=key_file)

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context trusting our CA and presenting the admin client cert."""
        if self.ca_file is None or self.cert_file is None or self.key_file is None:
            raise ControlPlaneError("The control plane is not started.")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context

    # -- internals ---------------------------------------------------------- #

    def _prepare_workdir(self) -> None:
        """Create the workdir and claim it with a pidfile before anything else."""
        if self._given_workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        else:
            self.workdir = self._given_workdir
            self.workdir.mkdir(parents=True, exist_ok=True)
            # An explicit workdir may hold the servers of an interrupted earlier run.
            record = _read_pidfile(self.workdir) or {}
            owner = _live_owner(record)
            if owner is not None and owner != os.getpid():
                self.workdir = None  # Not ours: stop() must not touch it.
                raise ControlPlaneError(f"{self._given_workdir} is in use by process {owner}.")
            _kill_recorded_children(record)
        self._write_pidfile()

    def _write_pidfile(self) -> None:
        """Record who owns the workdir and which servers run in it."""
        assert self.workdir is not None
        record = {
            "owner": {"pid": os.getpid(), "start_time": _process_start_time(os.getpid())},
            "children": self._children,
        }
        tmp = self.workdir / f".{PIDFILE_NAME}.tmp"
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(self.workdir / PIDFILE_NAME)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Run a server in its own session, logging into the workdir."""
        assert self.workdir is not None
        # Truncated per attempt, so a retry's log shows only the retry.
        log = open(self.workdir / f"{name}.log", "wb")  # Closed in stop().
        self._logs.append(log)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
        )
        self._children[name] = {"pid": proc.pid, "start_time": _process_start_time(proc.pid)}
        self._write_pidfile()
        return proc

    def _start_processes(self, bin_dir: Path) -> None:
        """One attempt with one set of ports; raises ``_PortConflict`` if they clash."""
        assert self.workdir is not None
        deadline = time.monotonic() + self.start_timeout
        etcd_port, peer_port, api_port = _free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self.server = f"https://127.0.0.1:{api_port}"

        shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
        certs = generate_certificates(self.workdir / "certs")
        self.ca_file = certs["ca_cert"]
        self.cert_file = certs["client_cert"]
        self.key_file = certs["client_key"]

        self._etcd = self._spawn(
            "etcd",
            [
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
            ],
        )
        self._wait_for_etcd(deadline)

        self._apiserver = self._spawn(
            "kube-apiserver",
            [
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
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait_for_apiserver(deadline)
        assert self.cert_file is not None and self.key_file is not None
        self.kubeconfig = self._write_kubeconfig(self.workdir / "kubeconfig", user="admin",
                                                 cert_file=self.cert_file, key_file=self.key_file)

    def _check_alive(self, name: str, proc: subprocess.Popen[bytes] | None) -> None:
        """Fail fast with the server's log when it has exited during startup."""
        if proc is None or proc.poll() is None:
            return
        assert self.workdir is not None
        tail = _tail(self.workdir / f"{name}.log")
        error = _PortConflict if "address already in use" in tail else ControlPlaneError
        raise error(f"{name} exited with code {proc.returncode} during startup. Last lines of {name}.log:\n{tail}")

    def _timeout_error(self, name: str, waiting_for: str, last_error: str) -> ControlPlaneError:
        """Explain which server did not become ready, with both logs attached."""
        assert self.workdir is not None
        parts = [
            f"{name} did not become ready within {self.start_timeout:.0f}s "
            f"(waiting for {waiting_for}; last error: {last_error})."
        ]
        for log_name in ("etcd", "kube-apiserver"):
            path = self.workdir / f"{log_name}.log"
            if path.exists():
                parts.append(f"Last lines of {log_name}.log:\n{_tail(path)}")
        return ControlPlaneError("\n".join(parts))

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
            time.sleep(0.1)
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
                time.sleep(0.1)

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
        """Stop the apiserver before etcd, so it does not spin on a lost backend."""
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                _terminate(proc)
        self._apiserver = None
        self._etcd = None
        self._children.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()
