"""
Reading kubeconfig files as ``kubectl`` does, without ever echoing their content.

A kubeconfig holds secrets (tokens, keys, passwords) next to ordinary
settings, so every error here names the file, the entry and the field — and
for broken YAML the line and column — but never a value from the file.

Several files (``$KUBECONFIG=a:b``) are merged like ``kubectl`` merges them:
the first file that defines a context, cluster or user wins, and so does the
first ``current-context``. Relative paths are resolved against the file that
names them.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kopf._kube import plugins
from kopf._kube.errors import LoginError
from kopf._structs.credentials import ConnectionInfo

DEFAULT_KUBECONFIG = '~/.kube/config'


@dataclasses.dataclass(frozen=True)
class Entry:
    """A named cluster, user or context, with the file it comes from (for paths and messages)."""

    name: str
    data: Mapping[str, Any]
    source: Path


@dataclasses.dataclass(frozen=True)
class Kubeconfig:
    """The merged content of one or more kubeconfig files."""

    paths: tuple[Path, ...]
    current_context: str | None
    clusters: Mapping[str, Entry]
    users: Mapping[str, Entry]
    contexts: Mapping[str, Entry]

    @property
    def where(self) -> str:
        return ', '.join(str(path) for path in self.paths)


def kubeconfig_paths(path: str | os.PathLike[str] | None = None) -> list[Path]:
    """The files to read: the given one, else those of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if path is not None:
        return [Path(path).expanduser()]
    env = os.environ.get('KUBECONFIG', '')
    items = [Path(item).expanduser() for item in env.split(os.pathsep) if item]
    return items or [Path(DEFAULT_KUBECONFIG).expanduser()]


def load(paths: Sequence[Path]) -> Kubeconfig:
    """Read and merge the files; missing files in a list are skipped, as ``kubectl`` does."""
    existing = [path for path in paths if path.is_file()]
    if not existing:
        names = ', '.join(str(path) for path in paths)
        raise LoginError(f"The kubeconfig {names} does not exist." if len(paths) == 1 else
                         f"None of the kubeconfig files exists: {names}.")
    current: str | None = None
    clusters: dict[str, Entry] = {}
    users: dict[str, Entry] = {}
    contexts: dict[str, Entry] = {}
    for path in existing:
        doc = _read_yaml(path)
        if current is None and doc.get('current-context'):
            current = _string(doc.get('current-context'), path, "'current-context'")
        for listing, field, target in [('clusters', 'cluster', clusters), ('users', 'user', users),
                                       ('contexts', 'context', contexts)]:
            for entry in _entries(doc, listing, field, path):
                target.setdefault(entry.name, entry)
    return Kubeconfig(paths=tuple(existing), current_context=current,
                      clusters=clusters, users=users, contexts=contexts)


def current_context() -> str | None:
    """The current context of the kubeconfig that ``kubectl`` would use (merged as it does), if any."""
    try:
        return load(kubeconfig_paths()).current_context
    except LoginError:
        return None


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding='utf-8')
    except (OSError, UnicodeDecodeError) as e:
        raise LoginError(f"Cannot read the kubeconfig {path}: {type(e).__name__}.") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        raise LoginError(_yaml_error(path, e)) from None
    except yaml.YAMLError:
        raise LoginError(f"The kubeconfig {path} is not valid YAML (its content is not shown: "
                         f"it may contain secrets).") from None
    if doc is None:
        raise LoginError(f"The kubeconfig {path} is empty.")
    if not isinstance(doc, Mapping):
        raise LoginError(f"The kubeconfig {path} is not a kubeconfig: its top level is not a mapping.")
    return doc


def _yaml_error(path: Path, error: yaml.MarkedYAMLError) -> str:
    """File, line, column and the kind of problem; YAML's own message quotes the file, so it is not used."""
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = _without_quotes(error.problem or error.context or 'a syntax error')
    if error.problem and error.context and error.context_mark is not None:
        problem += f" ({_without_quotes(error.context)} at line {error.context_mark.line + 1})"
    return (f"The kubeconfig {path} is not valid YAML{where}: {problem}. "
            f"(Its content is not shown: it may contain secrets.)")


def _without_quotes(text: str) -> str:
    """YAML problems may quote pieces of the file; only single characters (like a tab) are kept."""
    return re.sub(r"'([^']*)'", lambda m: m.group(0) if len(m.group(1)) <= 2 else "'...'", text)


def _entries(doc: Mapping[str, Any], listing: str, field: str, path: Path) -> list[Entry]:
    items = doc.get(listing)
    if items is None:
        return []
    if not isinstance(items, list):
        raise LoginError(f"The kubeconfig {path} has an invalid '{listing}': expected a list.")
    result = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get('name'), str):
            raise LoginError(f"The kubeconfig {path} has an invalid entry #{index + 1} in '{listing}': "
                             f"expected a mapping with a 'name'.")
        data = item.get(field) or {}
        if not isinstance(data, Mapping):
            raise LoginError(f"The kubeconfig {path} has an invalid '{field}' in the {field} "
                             f"{item['name']!r}: expected a mapping.")
        result.append(Entry(name=item['name'], data=data, source=path))
    return result


def _string(value: Any, path: Path, what: str) -> str:
    if not isinstance(value, str):
        raise LoginError(f"The kubeconfig {path} has an invalid {what}: expected a string.")
    return value


# --- From a kubeconfig to credentials ------------------------------------------------------------


def connection_info(config: Kubeconfig, *, context: str | None = None) -> ConnectionInfo:
    """
    The credentials of a context (the given one, else the current one).

    Certificates and keys stay files when the kubeconfig names files (they
    are re-read on every connection), and inline ``*-data`` is decoded in
    memory. A ``tokenFile`` is re-read when it changes. Exec plugins are run
    now, and again whenever the credentials they give expire.
    """
    context_name = context if context is not None else config.current_context
    if not context_name:
        raise LoginError(f"No context is given, and the kubeconfig has no current-context ({config.where}).")
    if context_name not in config.contexts:
        raise LoginError(f"The context {context_name!r} is not defined in the kubeconfig {config.where}; "
                         f"known: {sorted(config.contexts)}.")
    ctx = config.contexts[context_name]
    cluster_name = ctx.data.get('cluster')
    user_name = ctx.data.get('user')
    if not isinstance(cluster_name, str) or cluster_name not in config.clusters:
        raise LoginError(f"The cluster {cluster_name!r} of the context {context_name!r} is not defined "
                         f"in the kubeconfig {config.where}.")
    if user_name and (not isinstance(user_name, str) or user_name not in config.users):
        raise LoginError(f"The user {user_name!r} of the context {context_name!r} is not defined "
                         f"in the kubeconfig {config.where}.")
    cluster = config.clusters[cluster_name]
    user = config.users[user_name] if user_name else Entry(name='', data={}, source=ctx.source)
    server = cluster.data.get('server')
    if not server or not isinstance(server, str):
        raise LoginError(f"The cluster {cluster_name!r} has no server URL (in the kubeconfig {cluster.source}).")

    ca_path, ca_data = _file_or_data(cluster, 'certificate-authority', 'cluster')
    cert_path, cert_data = _file_or_data(user, 'client-certificate', 'user')
    key_path, key_data = _file_or_data(user, 'client-key', 'user')
    token, token_path = _token(user)
    username = _optional_string(user, 'username')
    password = _optional_string(user, 'password')
    namespace = ctx.data.get('namespace')
    info = ConnectionInfo(
        server=server,
        ca_path=ca_path,
        ca_data=ca_data,
        insecure=bool(cluster.data.get('insecure-skip-tls-verify', False)),
        username=username,
        password=password,
        token=token,
        token_path=token_path,
        certificate_path=cert_path,
        private_key_path=key_path,
        certificate_data=cert_data,
        private_key_data=key_data,
        default_namespace=namespace if isinstance(namespace, str) and namespace else None,
    )
    exec_config = user.data.get('exec')
    has_credentials = token or token_path or cert_path or cert_data or username
    if exec_config and not has_credentials:
        if not isinstance(exec_config, Mapping):
            raise LoginError(f"The user {user.name!r} has an invalid 'exec': expected a mapping "
                             f"(in the kubeconfig {user.source}).")
        return plugins.run_exec_plugin(
            exec_config, info=info, user=user.name, base=user.source.parent, cluster=cluster.data)
    return info


def _optional_string(entry: Entry, key: str) -> str | None:
    value = entry.data.get(key)
    if value is None:
        return None
    if not isinstance(value, (str, int)):
        raise LoginError(f"The user {entry.name!r} has an invalid {key!r}: expected a string "
                         f"(in the kubeconfig {entry.source}).")
    return str(value)


def _file_or_data(entry: Entry, key: str, kind: str) -> tuple[str | None, bytes | None]:
    data = entry.data.get(f'{key}-data')
    if data:
        if not isinstance(data, str):
            raise LoginError(f"The {kind} {entry.name!r} has an invalid '{key}-data': expected a base64 string "
                             f"(in the kubeconfig {entry.source}).")
        try:
            return None, base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise LoginError(f"The {kind} {entry.name!r} has an invalid '{key}-data': it is not base64 "
                             f"(in the kubeconfig {entry.source}).") from None
    filename = entry.data.get(key)
    if not filename:
        return None, None
    if not isinstance(filename, str):
        raise LoginError(f"The {kind} {entry.name!r} has an invalid '{key}': expected a file path "
                         f"(in the kubeconfig {entry.source}).")
    path = entry.source.parent / Path(filename).expanduser()
    if not path.is_file():
        raise LoginError(f"The file {path} of '{key}' of the {kind} {entry.name!r} does not exist "
                         f"(in the kubeconfig {entry.source}).")
    return str(path), None


def _token(user: Entry) -> tuple[str | None, str | None]:
    token = user.data.get('token')
    if token:
        if not isinstance(token, str):
            raise LoginError(f"The user {user.name!r} has an invalid 'token': expected a string "
                             f"(in the kubeconfig {user.source}).")
        return token.strip(), None
    token_file = user.data.get('tokenFile')
    if token_file:
        if not isinstance(token_file, str):
            raise LoginError(f"The user {user.name!r} has an invalid 'tokenFile': expected a file path "
                             f"(in the kubeconfig {user.source}).")
        path = user.source.parent / Path(token_file).expanduser()
        try:
            return path.read_text(encoding='utf-8').strip(), str(path)
        except (OSError, UnicodeDecodeError) as e:
            raise LoginError(f"Cannot read the token file {path} of the user {user.name!r}: "
                             f"{type(e).__name__} (in the kubeconfig {user.source}).") from None
    provider = user.data.get('auth-provider')
    provider_config = provider.get('config') if isinstance(provider, Mapping) else None
    if isinstance(provider_config, Mapping):
        for field in ('id-token', 'access-token'):  # OIDC and GCP providers cache the last token here
            if isinstance(provider_config.get(field), str) and provider_config[field]:
                return str(provider_config[field]), None
    return None, None
