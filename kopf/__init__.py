"""
kopf: a framework for writing Kubernetes operators in Python.

This module only re-exports the public API; everything lives in sub-packages.
"""
from kopf import on
from kopf.clients.auth import (
    LoginError,
    login_default,
    login_via_async_client,
    login_via_client,
    login_via_incluster,
    login_via_kubeconfig,
    login_via_pykube,
    login_with_kubeconfig,
    login_with_service_account,
)
from kopf.config import OperatorConfig, OperatorSettings
from kopf.engines.posting import event, exception, info, warn
from kopf.engines.webhooks import (
    WebhookAutoServer,
    WebhookAutoTunnel,
    WebhookDockerDesktopServer,
    WebhookK3dServer,
    WebhookMinikubeServer,
    WebhookNgrokTunnel,
    WebhookServer,
)
from kopf.errors import (
    ActivityError,
    AdmissionError,
    DuplicateHandlerError,
    ErrorsMode,
    HandlerRetriesError,
    HandlerTimeoutError,
    PermanentError,
    TemporaryError,
)
from kopf.on import execute, register, subhandler
from kopf.reactor import lifecycles
from kopf.reactor.causation import Reason
from kopf.reactor.filters import ABSENT, PRESENT
from kopf.reactor.lifecycles import get_default_lifecycle, set_default_lifecycle
from kopf.reactor.registries import Activity, OperatorRegistry, get_default_registry, set_default_registry
from kopf.reactor.running import OperatorError, operator, run, spawn_tasks
from kopf.storage.diffbase import (
    AnnotationsDiffBaseStorage,
    BodyEssence,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf.storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf.storage.records import ProgressRecord
from kopf.structs.bodies import Body, Meta
from kopf.structs.credentials import ConnectionInfo
from kopf.structs.diffs import Diff, DiffItem, DiffOperation
from kopf.structs.ephemera import Memo
from kopf.structs.hierarchies import adopt, append_owner_reference, label
from kopf.structs.patches import Patch
from kopf.structs.reviews import (
    Headers,
    Operation,
    SSLPeer,
    UserInfo,
    WebhookClientConfig,
    WebhookClientConfigService,
    WebhookFn,
    WebhookServerProtocol,
)

__all__ = [
    'ABSENT',
    'PRESENT',
    'Activity',
    'ActivityError',
    'AdmissionError',
    'AnnotationsDiffBaseStorage',
    'AnnotationsProgressStorage',
    'Body',
    'BodyEssence',
    'ConnectionInfo',
    'Diff',
    'DiffBaseStorage',
    'DiffItem',
    'DiffOperation',
    'DuplicateHandlerError',
    'ErrorsMode',
    'HandlerRetriesError',
    'HandlerTimeoutError',
    'Headers',
    'LoginError',
    'Memo',
    'Meta',
    'MultiDiffBaseStorage',
    'MultiProgressStorage',
    'Operation',
    'OperatorConfig',
    'OperatorError',
    'OperatorRegistry',
    'OperatorSettings',
    'Patch',
    'PermanentError',
    'ProgressRecord',
    'ProgressStorage',
    'Reason',
    'SSLPeer',
    'SmartProgressStorage',
    'StatusDiffBaseStorage',
    'StatusProgressStorage',
    'TemporaryError',
    'UserInfo',
    'WebhookAutoServer',
    'WebhookAutoTunnel',
    'WebhookClientConfig',
    'WebhookClientConfigService',
    'WebhookDockerDesktopServer',
    'WebhookFn',
    'WebhookK3dServer',
    'WebhookMinikubeServer',
    'WebhookNgrokTunnel',
    'WebhookServer',
    'WebhookServerProtocol',
    'adopt',
    'append_owner_reference',
    'event',
    'exception',
    'execute',
    'get_default_lifecycle',
    'get_default_registry',
    'info',
    'label',
    'lifecycles',
    'login_default',
    'login_via_async_client',
    'login_via_client',
    'login_via_incluster',
    'login_via_kubeconfig',
    'login_via_pykube',
    'login_with_kubeconfig',
    'login_with_service_account',
    'on',
    'operator',
    'register',
    'run',
    'set_default_lifecycle',
    'set_default_registry',
    'spawn_tasks',
    'subhandler',
    'warn',
]
