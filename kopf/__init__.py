"""
kopf: a framework for writing Kubernetes operators in Python.

This module only re-exports the public API; everything lives in sub-packages.
"""

from kopf import on
from kopf._admission.servers import (
    WebhookAutoServer,
    WebhookAutoTunnel,
    WebhookDockerDesktopServer,
    WebhookK3dServer,
    WebhookMinikubeServer,
    WebhookNgrokTunnel,
    WebhookServer,
)
from kopf._handlers import lifecycles
from kopf._handlers.filters import ABSENT, PRESENT, all_, any_, none_, not_
from kopf._handlers.lifecycles import get_default_lifecycle, set_default_lifecycle
from kopf._handlers.loggers import LocalObjectLogger, ObjectLogger
from kopf._handlers.reasons import Reason
from kopf._handlers.registries import Activity, OperatorRegistry, get_default_registry, set_default_registry
from kopf._indexing.indexes import Index, Store
from kopf._kube.applying import ApplyConflictError, apply, apply_async
from kopf._kube.auth import (
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
from kopf._reconciliation.links import Children
from kopf._reconciliation.planning import Requeue
from kopf._runtime.logsetup import LogFormat, configure
from kopf._runtime.posting import event, exception, info, warn
from kopf._runtime.running import OperatorError, operator, run, run_tasks, spawn_tasks
from kopf._storage.configmaps import ConfigMapDiffBaseStorage, ConfigMapProgressStorage
from kopf._storage.diffbase import (
    AnnotationsDiffBaseStorage,
    BodyEssence,
    DiffBaseStorage,
    MultiDiffBaseStorage,
    StatusDiffBaseStorage,
)
from kopf._storage.errors import StorageError
from kopf._storage.progress import (
    AnnotationsProgressStorage,
    MultiProgressStorage,
    ProgressStorage,
    SmartProgressStorage,
    StatusProgressStorage,
)
from kopf._storage.records import ProgressRecord
from kopf._storage.sqlite import SQLiteDiffBaseStorage, SQLiteProgressStorage
from kopf._structs.bodies import Body, Meta, RawBody, Spec, Status
from kopf._structs.conditions import Condition, get_condition, is_observed, set_condition
from kopf._structs.credentials import AiohttpSession, ConnectionInfo
from kopf._structs.dicts import FieldPath, FieldSpec
from kopf._structs.diffs import Diff, DiffItem, DiffOperation
from kopf._structs.ephemera import Memo
from kopf._structs.hierarchies import (
    adjust_namespace,
    adopt,
    append_owner_reference,
    build_object_reference,
    build_owner_reference,
    harmonize_naming,
    label,
    remove_owner_reference,
)
from kopf._structs.ids import HandlerId
from kopf._structs.patches import Patch
from kopf._structs.resources import EVERYTHING, Resource
from kopf._structs.reviews import (
    Headers,
    Operation,
    SSLPeer,
    UserInfo,
    WebhookClientConfig,
    WebhookClientConfigService,
    WebhookFn,
    WebhookServerProtocol,
)
from kopf._structs.stoppers import (
    AsyncDaemonStopperChecker,
    DaemonStopped,
    DaemonStoppingReason,
    SyncDaemonStopperChecker,
)
from kopf._structs.typedefs import (
    Annotations,
    Labels,
    Logger,
    ObjectReference,
    OwnerReference,
    PatchFn,
    RawEvent,
    RawEventType,
)
from kopf.config import OperatorConfig, OperatorSettings
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
from kopf.on import daemon, execute, index, register, subhandler, timer


def __getattr__(name: str) -> str:
    """``kopf.__version__``, read when asked: the package metadata costs memory that operators need not pay for."""
    if name != '__version__':
        raise AttributeError(f"module 'kopf' has no attribute {name!r}")
    import importlib.metadata

    try:
        # Kopf's documented way to name the framework, e.g. in a custom session's User-Agent.
        return importlib.metadata.version('kopf')
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return '0+unknown'

__all__ = [
    'ABSENT',
    'EVERYTHING',
    'PRESENT',
    'Activity',
    'ActivityError',
    'AdmissionError',
    'AiohttpSession',
    'Annotations',
    'AnnotationsDiffBaseStorage',
    'AnnotationsProgressStorage',
    'ApplyConflictError',
    'AsyncDaemonStopperChecker',
    'Body',
    'Children',
    'Condition',
    'BodyEssence',
    'ConfigMapDiffBaseStorage',
    'ConfigMapProgressStorage',
    'ConnectionInfo',
    'DaemonStopped',
    'DaemonStoppingReason',
    'Diff',
    'DiffBaseStorage',
    'DiffItem',
    'DiffOperation',
    'DuplicateHandlerError',
    'ErrorsMode',
    'FieldPath',
    'FieldSpec',
    'HandlerId',
    'HandlerRetriesError',
    'HandlerTimeoutError',
    'Headers',
    'Index',
    'Labels',
    'LocalObjectLogger',
    'LogFormat',
    'Logger',
    'LoginError',
    'Memo',
    'Meta',
    'MultiDiffBaseStorage',
    'MultiProgressStorage',
    'ObjectLogger',
    'ObjectReference',
    'Operation',
    'OperatorConfig',
    'OperatorError',
    'OperatorRegistry',
    'OperatorSettings',
    'OwnerReference',
    'Patch',
    'PatchFn',
    'PermanentError',
    'ProgressRecord',
    'ProgressStorage',
    'RawBody',
    'RawEvent',
    'RawEventType',
    'Requeue',
    'Reason',
    'Resource',
    'SQLiteDiffBaseStorage',
    'SQLiteProgressStorage',
    'SSLPeer',
    'SmartProgressStorage',
    'Spec',
    'Status',
    'StatusDiffBaseStorage',
    'StatusProgressStorage',
    'Store',
    'StorageError',
    'SyncDaemonStopperChecker',
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
    'adjust_namespace',
    'adopt',
    'all_',
    'any_',
    'append_owner_reference',
    'apply',
    'apply_async',
    'build_object_reference',
    'build_owner_reference',
    'configure',
    'daemon',
    'event',
    'exception',
    'execute',
    'get_default_lifecycle',
    'get_condition',
    'get_default_registry',
    'harmonize_naming',
    'index',
    'info',
    'is_observed',
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
    'none_',
    'not_',
    'on',
    'operator',
    'register',
    'remove_owner_reference',
    'run',
    'run_tasks',
    'set_condition',
    'set_default_lifecycle',
    'set_default_registry',
    'spawn_tasks',
    'subhandler',
    'timer',
    'warn',
]
