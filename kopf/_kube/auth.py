"""
Credentials for the Kubernetes API: logging in from wherever users keep them.

Login functions turn a kubeconfig, a pod's service account, or another
Kubernetes client library's configuration into a
:class:`~kopf._structs.credentials.ConnectionInfo`; the session
(:class:`~kopf._kube.session.APIContext`, re-exported here) uses it, and
calls a login again when the credentials expire or are refused.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

from kopf._kube import kubeconfig
from kopf._kube.connections import make_ssl_context
from kopf._kube.errors import LoginError
from kopf._kube.session import APIContext, Relogin
from kopf._structs.credentials import ConnectionInfo
from kopf._structs.typedefs import Logger

# What is not defined here, but logging in goes with: the session that uses the credentials, and its errors.
__all__ = ['APIContext', 'LoginError', 'Relogin', 'make_ssl_context']

logger = logging.getLogger(__name__)
_module_logger = logger  # for functions whose `logger` argument shadows it

SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
DEFAULT_KUBECONFIG = kubeconfig.DEFAULT_KUBECONFIG



# --- Credentials --------------------------------------------------------------------------------


def login_default(*, settings: Any = None) -> ConnectionInfo:
    """
    The credentials an operator uses when the user provides none.

    Inside a pod (the service host variable and the token file are present),
    the pod's service account is tried first; then the kubeconfig. Trying the
    kubeconfig even inside a pod helps setups that mount one explicitly.
    With ``settings.networking.trust_env``, the proxies of the environment
    are used (see :func:`_trusting`).
    """
    failures: list[str] = []
    if _looks_like_incluster():
        try:
            return _trusting(login_via_incluster(), settings)
        except LoginError as e:
            failures.append(f"in-cluster service account: {e}")
    else:
        failures.append("in-cluster service account: not running in a pod "
                        f"(no KUBERNETES_SERVICE_HOST or no {SERVICE_ACCOUNT_DIR}/token)")
    try:
        return _trusting(login_via_kubeconfig(), settings)
    except LoginError as e:
        failures.append(f"kubeconfig: {e}")
    raise LoginError(f"Cannot log in to any Kubernetes cluster. Tried: {'; '.join(failures)}")


def _trusting(info: ConnectionInfo, settings: Any) -> ConnectionInfo:
    """
    The credentials of a built-in login, with ``trust_env`` if the operator's settings ask for it.

    As in Kopf, ``settings.networking.trust_env = True`` makes the built-in
    logins take the proxies (``HTTPS_PROXY``, ``NO_PROXY``, ...) and
    ``~/.netrc`` from the environment; a login handler's own
    :class:`ConnectionInfo` says ``trust_env=`` itself. ``settings`` is the
    operator's settings as the login handlers get them (``None``: defaults).
    """
    networking = getattr(settings, 'networking', None)
    if getattr(networking, 'trust_env', False) and not info.trust_env:
        return dataclasses.replace(info, trust_env=True)
    return info


def _looks_like_incluster() -> bool:
    return bool(os.environ.get('KUBERNETES_SERVICE_HOST')) and Path(SERVICE_ACCOUNT_DIR, 'token').is_file()


def login_via_incluster(path: str | None = None) -> ConnectionInfo:
    """
    Credentials of the pod's service account: its token, the cluster CA, its namespace.

    The token file is followed as it changes: projected service-account
    tokens are short-lived and rotated in place by the kubelet.
    """
    path = path if path is not None else SERVICE_ACCOUNT_DIR
    host = os.environ.get('KUBERNETES_SERVICE_HOST')
    port = os.environ.get('KUBERNETES_SERVICE_PORT', '443')
    if not host:
        raise LoginError("KUBERNETES_SERVICE_HOST is not set: not running in a pod.")
    directory = Path(path)
    try:
        token = (directory / 'token').read_text(encoding='utf-8').strip()
    except OSError as e:
        raise LoginError(f"Cannot read the service account token: {e}") from e
    if not token:
        raise LoginError(f"The service account token {directory / 'token'} is empty.")
    ca_file = directory / 'ca.crt'
    namespace_file = directory / 'namespace'
    namespace = namespace_file.read_text(encoding='utf-8').strip() if namespace_file.is_file() else None
    host = f'[{host}]' if ':' in host else host  # IPv6 addresses need brackets in URLs
    return ConnectionInfo(
        server=f'https://{host}:{port}',
        ca_path=str(ca_file) if ca_file.is_file() else None,
        token=token,
        token_path=str(directory / 'token'),
        default_namespace=namespace or None,
    )


def login_via_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> ConnectionInfo:
    """
    Credentials from kubeconfig files, as ``kubectl`` would use them.

    The file is the given path, else the files of ``$KUBECONFIG`` (merged),
    else ``~/.kube/config``; the context is the given one, else the current
    context. Certificates and CAs may be files (relative to the kubeconfig)
    or inline ``*-data`` fields; tokens may be inline or in a ``tokenFile``
    (followed as it changes); ``exec`` credential plugins are run. Errors
    name the file, the entry and the field, but never show the file's content.
    """
    config = kubeconfig.load(kubeconfig.kubeconfig_paths(path))
    return kubeconfig.connection_info(config, context=context)


# --- Kopf-compatible login helpers (for @kopf.on.login handlers) ---------------------------------


def login_with_service_account(*, settings: Any = None, **_: Any) -> ConnectionInfo | None:
    """The pod's service account, or ``None`` outside of a pod; ``trust_env`` as the settings say."""
    if not _looks_like_incluster():
        return None
    return _trusting(login_via_incluster(), settings)


def login_with_kubeconfig(*, settings: Any = None, **_: Any) -> ConnectionInfo | None:
    """The kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``), or ``None`` if there is none; ``trust_env`` too."""
    if not any(path.is_file() for path in kubeconfig.kubeconfig_paths()):
        return None
    return _trusting(login_via_kubeconfig(), settings)


def login_via_pykube(*, logger: Logger | None = None, settings: Any = None, **_: Any) -> ConnectionInfo | None:
    """
    The credentials as ``pykube-ng`` finds them: the service account, else the kubeconfig.

    Returns ``None`` if pykube finds no configuration at all.
    """
    try:
        import pykube
    except ImportError:
        raise LoginError("kopf.login_via_pykube() needs pykube-ng: pip install pykube-ng") from None
    log = logger if logger is not None else _module_logger
    try:
        config = pykube.KubeConfig.from_service_account()
    except (FileNotFoundError, KeyError):
        try:
            config = pykube.KubeConfig.from_file()
        except (FileNotFoundError, pykube.exceptions.PyKubeError):
            log.debug("pykube has found no kubeconfig and no service account.")
            return None
        except Exception as e:
            raise LoginError(f"pykube cannot use the kubeconfig: {type(e).__name__}.") from None
    cluster = config.cluster
    user = config.user
    ca = cluster.get('certificate-authority')
    cert = user.get('client-certificate')
    key = user.get('client-key')
    namespace = config.namespace
    return _trusting(ConnectionInfo(
        server=str(cluster['server']),
        ca_path=str(ca.filename()) if ca is not None else None,
        insecure=bool(cluster.get('insecure-skip-tls-verify')),
        username=user.get('username'),
        password=user.get('password'),
        token=user.get('token'),
        certificate_path=str(cert.filename()) if cert is not None else None,
        private_key_path=str(key.filename()) if key is not None else None,
        default_namespace=namespace if namespace and namespace != 'default' else None,
    ), settings)


def login_via_client(*, logger: Logger | None = None, settings: Any = None, **_: Any) -> ConnectionInfo | None:
    """
    The credentials as the official ``kubernetes`` client loads them (in-cluster, else kubeconfig).

    Returns ``None`` if the client finds no configuration; fails with a
    clear :class:`LoginError` if the ``kubernetes`` package is not installed.
    """
    try:
        kubernetes: Any = importlib.import_module('kubernetes')  # optional; untyped
    except ImportError:
        raise LoginError("kopf.login_via_client() needs the official Kubernetes client: "
                         "pip install kubernetes") from None
    log = logger if logger is not None else _module_logger
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException:
        try:
            kubernetes.config.load_kube_config(config_file=_client_kubeconfig(), client_configuration=configuration)
        except kubernetes.config.ConfigException as e:
            log.debug("The kubernetes client has found no configuration: %s", type(e).__name__)
            return None
    kubernetes.client.Configuration.set_default(configuration)  # as in Kopf: the handlers' clients use it too
    return _trusting(_info_from_client_configuration(configuration), settings)


async def login_via_async_client(*, logger: Logger | None = None, settings: Any = None,
                                 **_: Any) -> ConnectionInfo | None:
    """
    The credentials as ``kubernetes_asyncio`` loads them (in-cluster, else kubeconfig).

    Returns ``None`` if the client finds no configuration; fails with a
    clear :class:`LoginError` if ``kubernetes_asyncio`` is not installed.
    """
    try:
        kubernetes_asyncio: Any = importlib.import_module('kubernetes_asyncio')  # optional; untyped
    except ImportError:
        raise LoginError("kopf.login_via_async_client() needs kubernetes_asyncio: "
                         "pip install kubernetes_asyncio") from None
    log = logger if logger is not None else _module_logger
    configuration = kubernetes_asyncio.client.Configuration()
    try:
        kubernetes_asyncio.config.load_incluster_config(client_configuration=configuration)
    except kubernetes_asyncio.config.ConfigException:
        try:
            await kubernetes_asyncio.config.load_kube_config(config_file=_client_kubeconfig(),
                                                             client_configuration=configuration)
        except kubernetes_asyncio.config.ConfigException as e:
            log.debug("kubernetes_asyncio has found no configuration: %s", type(e).__name__)
            return None
    return _trusting(_info_from_client_configuration(configuration), settings)


# --- The official client, configured for the handlers -------------------------------------------


def configure_official_client() -> None:
    """
    Configure the official ``kubernetes`` client's default, as the default login of Kopf does.

    Handlers written for Kopf call ``kubernetes.client.CoreV1Api()`` without
    loading a configuration themselves. The client is configured as it
    configures itself (in-cluster, else the kubeconfig) -- now if the
    operator has imported it already, else when it is first imported: the
    package costs about 30 MB and 0.2 s, which an operator that does not use
    it should not pay. Nothing happens if it is not installed.
    """
    if 'kubernetes' in sys.modules:
        _load_official_client_config(sys.modules['kubernetes'])
    elif not any(isinstance(finder, _ConfigureOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ConfigureOnImport())


def _load_official_client_config(kubernetes: Any) -> None:
    try:
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(config_file=_client_kubeconfig())
    except Exception as e:  # a client that cannot configure itself must not stop the operator
        _module_logger.debug("The kubernetes client could not be configured (%s: %s); handlers that use it "
                             "must configure it themselves.", type(e).__name__, e)
    else:
        _module_logger.debug("The kubernetes client is configured for the handlers.")


class _ConfigureOnImport(importlib.abc.MetaPathFinder):
    """Configures the ``kubernetes`` package right after its first import, once."""

    def __init__(self) -> None:
        self._done = False

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != 'kubernetes' or self._done:
            return None
        self._done = True  # also keeps the search below from coming back here
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, 'exec_module'):
            return spec
        run = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run(module)
            _load_official_client_config(module)

        setattr(loader, 'exec_module', exec_module)  # noqa: B010 (a loader made for this import alone)
        return spec


def _client_kubeconfig() -> str:
    """The kubeconfig as of now: the clients read ``$KUBECONFIG`` only once, when imported."""
    return os.environ.get('KUBECONFIG') or DEFAULT_KUBECONFIG


def _info_from_client_configuration(configuration: Any) -> ConnectionInfo:
    """Both official clients share the shape of their ``Configuration``."""
    hook = getattr(configuration, 'refresh_api_key_hook', None)
    if callable(hook):
        hook(configuration)
    header = (configuration.api_key or {}).get('authorization') or (configuration.api_key or {}).get('BearerToken')
    prefix = (configuration.api_key_prefix or {}).get('authorization')
    scheme: str | None = None
    token: str | None = None
    if header:
        parts = str(header).split(' ', 1)
        if len(parts) == 2:
            scheme, token = parts
        else:
            scheme, token = prefix or 'Bearer', parts[0]
    return ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )
