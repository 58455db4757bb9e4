"""
Kubeconfig ``exec`` credential plugins: how EKS, GKE, AKS and OIDC setups log in.

The kubeconfig names a command; it prints an ``ExecCredential`` (API group
``client.authentication.k8s.io``, versions ``v1`` and ``v1beta1``) with a
token or a client certificate and key, optionally with an expiration time.
The command runs without a terminal (an operator has none), with
``KUBERNETES_EXEC_INFO`` describing the request, exactly as ``kubectl`` runs
it. The plugin's output holds secrets, so it is never shown in errors.
"""
from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kopf._kube.errors import LoginError
from kopf._structs.credentials import ConnectionInfo

API_GROUP = 'client.authentication.k8s.io'
SUPPORTED_VERSIONS = (f'{API_GROUP}/v1', f'{API_GROUP}/v1beta1')
EXEC_TIMEOUT = 60.0  # seconds a plugin may take; cloud CLIs are slow, but not that slow
STDERR_LIMIT = 300  # characters of the plugin's error output to show


def run_exec_plugin(
        config: Mapping[str, Any],
        *,
        info: ConnectionInfo,
        user: str,
        base: Path,
        cluster: Mapping[str, Any],
        timeout: float = EXEC_TIMEOUT,
) -> ConnectionInfo:
    """Run the plugin of a kubeconfig user; return the given ``info`` with the plugin's credentials."""
    api_version = config.get('apiVersion')
    if api_version not in SUPPORTED_VERSIONS:
        raise LoginError(f"The exec plugin of the user {user!r} has an unsupported apiVersion {api_version!r}; "
                         f"supported: {', '.join(SUPPORTED_VERSIONS)}.")
    if config.get('interactiveMode') == 'Always':
        raise LoginError(f"The exec plugin of the user {user!r} requires an interactive terminal "
                         f"(interactiveMode: Always), which an operator does not have.")
    argv = _command(config, user=user, base=base)
    env = dict(os.environ)
    for item in config.get('env') or []:
        if isinstance(item, Mapping) and isinstance(item.get('name'), str):
            env[item['name']] = str(item.get('value') or '')
    env['KUBERNETES_EXEC_INFO'] = json.dumps(_exec_info(api_version, config, info, cluster))
    try:
        completed = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                   timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise LoginError(f"The exec plugin {argv[0]!r} of the user {user!r} did not finish "
                         f"within {timeout:g}s.") from None
    except OSError as e:
        raise LoginError(f"Cannot run the exec plugin {argv[0]!r} of the user {user!r}: "
                         f"{e.strerror or type(e).__name__}.{_hint(config)}") from None
    if completed.returncode != 0:
        stderr = completed.stderr.decode('utf-8', errors='replace').strip()
        details = f": {stderr[-STDERR_LIMIT:]}" if stderr else "."
        raise LoginError(f"The exec plugin {argv[0]!r} of the user {user!r} failed with exit code "
                         f"{completed.returncode}{details}")
    return _apply(completed.stdout, info=info, api_version=api_version, user=user, command=argv[0])


def _command(config: Mapping[str, Any], *, user: str, base: Path) -> list[str]:
    command = config.get('command')
    if not command or not isinstance(command, str):
        raise LoginError(f"The exec plugin of the user {user!r} has no command.")
    args = config.get('args') or []
    if not isinstance(args, list):
        raise LoginError(f"The exec plugin of the user {user!r} has invalid args: expected a list.")
    # As in kubectl: a relative path with a directory is relative to the kubeconfig; a bare name is on $PATH.
    if os.sep in command and not os.path.isabs(command):
        command = str(base / command)
    elif os.sep not in command:
        found = shutil.which(command)
        if found is None:
            raise LoginError(f"The exec plugin {command!r} of the user {user!r} is not found on $PATH."
                             f"{_hint(config)}")
        command = found
    return [command, *(str(arg) for arg in args)]


def _hint(config: Mapping[str, Any]) -> str:
    hint = config.get('installHint')
    return f" {str(hint).strip()}" if hint else ""


def _exec_info(api_version: str, config: Mapping[str, Any], info: ConnectionInfo,
               cluster: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {'interactive': False}
    if config.get('provideClusterInfo'):
        details: dict[str, Any] = {'server': info.server}
        if info.ca_data is not None:
            details['certificate-authority-data'] = base64.b64encode(info.ca_data).decode('ascii')
        elif info.ca_path is not None:
            try:
                ca_data = Path(info.ca_path).read_bytes()
            except OSError as e:
                raise LoginError(f"Cannot read the CA file {info.ca_path} for the exec plugin: "
                                 f"{e.strerror or type(e).__name__}.") from None
            details['certificate-authority-data'] = base64.b64encode(ca_data).decode('ascii')
        if info.insecure:
            details['insecure-skip-tls-verify'] = True
        for key in ('tls-server-name', 'proxy-url', 'disable-compression'):
            if key in cluster:
                details[key] = cluster[key]
        extension = _exec_extension(cluster)
        if extension is not None:
            details['config'] = extension
        spec['cluster'] = details
    return {'apiVersion': api_version, 'kind': 'ExecCredential', 'spec': spec}


def _exec_extension(cluster: Mapping[str, Any]) -> Any:
    """The cluster's ``client.authentication.k8s.io/exec`` extension, passed to the plugin as is."""
    for item in cluster.get('extensions') or []:
        if isinstance(item, Mapping) and item.get('name') == f'{API_GROUP}/exec':
            return item.get('extension')
    return None


@dataclasses.dataclass(frozen=True)
class _Status:
    token: str | None
    certificate: bytes | None
    key: bytes | None
    expiration: datetime.datetime | None


def _apply(stdout: bytes, *, info: ConnectionInfo, api_version: str, user: str, command: str) -> ConnectionInfo:
    status = _parse(stdout, api_version=api_version, user=user, command=command)
    return dataclasses.replace(
        info,
        token=status.token if status.token is not None else info.token,
        certificate_data=status.certificate if status.certificate is not None else info.certificate_data,
        private_key_data=status.key if status.key is not None else info.private_key_data,
        certificate_path=None if status.certificate is not None else info.certificate_path,
        private_key_path=None if status.key is not None else info.private_key_path,
        expiration=status.expiration,
    )


def _parse(stdout: bytes, *, api_version: str, user: str, command: str) -> _Status:
    problem = f"The exec plugin {command!r} of the user {user!r} printed"
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise LoginError(f"{problem} no valid JSON (its output is not shown: it may contain secrets).") from None
    if not isinstance(doc, Mapping) or doc.get('kind') != 'ExecCredential':
        raise LoginError(f"{problem} no ExecCredential.")
    if doc.get('apiVersion') != api_version:
        raise LoginError(f"{problem} an ExecCredential of apiVersion {doc.get('apiVersion')!r}, "
                         f"but {api_version!r} was requested.")
    status = doc.get('status')
    if not isinstance(status, Mapping):
        raise LoginError(f"{problem} an ExecCredential without a status.")
    token = status.get('token')
    certificate = status.get('clientCertificateData')
    key = status.get('clientKeyData')
    if not token and not (certificate and key):
        raise LoginError(f"{problem} an ExecCredential with neither a token "
                         f"nor a client certificate and key.")
    if bool(certificate) != bool(key):
        raise LoginError(f"{problem} a client certificate without a key, or a key without a certificate.")
    expiration = None
    raw = status.get('expirationTimestamp')
    if raw:
        try:
            expiration = datetime.datetime.fromisoformat(str(raw).replace('Z', '+00:00'))
        except ValueError:
            raise LoginError(f"{problem} an invalid expirationTimestamp (RFC 3339 expected).") from None
        if expiration.tzinfo is None:
            expiration = expiration.replace(tzinfo=datetime.timezone.utc)
    return _Status(
        token=str(token) if token else None,
        certificate=str(certificate).encode('utf-8') if certificate else None,
        key=str(key).encode('utf-8') if key else None,
        expiration=expiration,
    )
