"""
Every public name of the released Kopf 1.x exists here too, with the same kind of object.

The lists below are the names (and only the names) that ``dir(kopf)`` and
``dir(kopf.on)`` show in Kopf 1.45.2, with what each is: a class, a function,
a module, a type alias, or a marker value. A name is either present here, or
pending (delivered by a feature that is being built), or deliberately left
out with the reason. When a pending name lands, this test says so: move it
out of ``PENDING``.
"""
import enum
import inspect

import pytest

import kopf
import kopf.on

# dir(kopf) of Kopf 1.45.2: name -> kind.
KOPF_NAMES = {
    'ABSENT': 'value',
    'adjust_namespace': 'function',
    'AdmissionError': 'class',
    'adopt': 'function',
    'AiohttpSession': 'class',
    'all_': 'function',
    'Annotations': 'alias',
    'AnnotationsDiffBaseStorage': 'class',
    'AnnotationsProgressStorage': 'class',
    'any_': 'function',
    'append_owner_reference': 'function',
    'AsyncDaemonStopperChecker': 'alias',
    'Body': 'class',
    'BodyEssence': 'class',
    'build_object_reference': 'function',
    'build_owner_reference': 'function',
    'configure': 'function',
    'ConnectionInfo': 'class',
    'daemon': 'function',
    'DaemonStopped': 'alias',
    'DaemonStoppingReason': 'class',
    'Diff': 'class',
    'DiffBaseStorage': 'class',
    'DiffItem': 'class',
    'DiffOperation': 'class',
    'ErrorsMode': 'class',
    'event': 'function',
    'EVERYTHING': 'value',
    'exception': 'function',
    'execute': 'function',
    'FieldPath': 'alias',
    'FieldSpec': 'alias',
    'get_default_lifecycle': 'function',
    'get_default_registry': 'function',
    'HandlerId': 'alias',
    'HandlerRetriesError': 'class',
    'HandlerTimeoutError': 'class',
    'harmonize_naming': 'function',
    'Headers': 'alias',
    'Index': 'class',
    'index': 'function',
    'info': 'function',
    'label': 'function',
    'Labels': 'alias',
    'lifecycles': 'module',
    'LocalObjectLogger': 'class',
    'LogFormat': 'class',
    'Logger': 'alias',
    'login_via_async_client': 'function',
    'login_via_client': 'function',
    'login_via_pykube': 'function',
    'login_with_kubeconfig': 'function',
    'login_with_service_account': 'function',
    'LoginError': 'class',
    'Memo': 'class',
    'Meta': 'class',
    'MultiDiffBaseStorage': 'class',
    'MultiProgressStorage': 'class',
    'none_': 'function',
    'not_': 'function',
    'ObjectLogger': 'class',
    'ObjectReference': 'class',
    'on': 'module',
    'Operation': 'alias',
    'operator': 'function',
    'OperatorRegistry': 'class',
    'OperatorSettings': 'class',
    'OwnerReference': 'class',
    'Patch': 'class',
    'PatchFn': 'alias',
    'PermanentError': 'class',
    'PRESENT': 'value',
    'ProgressRecord': 'class',
    'ProgressStorage': 'class',
    'RawBody': 'class',
    'RawEvent': 'class',
    'RawEventType': 'alias',
    'Reason': 'class',
    'register': 'function',
    'remove_owner_reference': 'function',
    'Resource': 'class',
    'run': 'function',
    'run_tasks': 'function',
    'set_default_lifecycle': 'function',
    'set_default_registry': 'function',
    'SmartProgressStorage': 'class',
    'spawn_tasks': 'function',
    'Spec': 'class',
    'SSLPeer': 'alias',
    'Status': 'class',
    'StatusDiffBaseStorage': 'class',
    'StatusProgressStorage': 'class',
    'Store': 'class',
    'subhandler': 'function',
    'SyncDaemonStopperChecker': 'alias',
    'TemporaryError': 'class',
    'timer': 'function',
    'UserInfo': 'class',
    'warn': 'function',
    'WebhookAutoServer': 'class',
    'WebhookAutoTunnel': 'class',
    'WebhookClientConfig': 'class',
    'WebhookClientConfigService': 'class',
    'WebhookDockerDesktopServer': 'class',
    'WebhookFn': 'class',
    'WebhookK3dServer': 'class',
    'WebhookMinikubeServer': 'class',
    'WebhookNgrokTunnel': 'class',
    'WebhookServer': 'class',
    'WebhookServerProtocol': 'alias',
}

# dir(kopf.on) of Kopf 1.45.2, without the modules and typing names it imports for itself (see LEFT_OUT_ON).
KOPF_ON_NAMES = {
    'ActivityDecorator': 'alias',
    'ChangingDecorator': 'alias',
    'cleanup': 'function',
    'create': 'function',
    'daemon': 'function',
    'DaemonDecorator': 'alias',
    'delete': 'function',
    'event': 'function',
    'field': 'function',
    'index': 'function',
    'IndexingDecorator': 'alias',
    'login': 'function',
    'mutate': 'function',
    'probe': 'function',
    'register': 'function',
    'resume': 'function',
    'startup': 'function',
    'subhandler': 'function',
    'timer': 'function',
    'TimerDecorator': 'alias',
    'update': 'function',
    'validate': 'function',
    'WatchingDecorator': 'alias',
    'WebhookDecorator': 'alias',
}

# Names delivered by parallel work, by the feature they belong to.
PENDING: dict[str, str] = {
}
PENDING_ON: dict[str, str] = {
}

# Names of Kopf deliberately not provided, with the reason.
LEFT_OUT: dict[str, str] = {}
LEFT_OUT_ON = {
    name: "Kopf's own imports, visible in its kopf.on module but not its API"
    for name in [
        'Any',
        'Callable',
        'Collection',
        'callbacks',
        'causes',
        'dicts',
        'execution',
        'filters',
        'handlers',
        'references',
        'registries',
        'reviews',
        'subhandling',
        'warnings',
    ]
}

# Where the kind differs on purpose.
OTHER_KINDS = {
    'RawBody': "a mapping type alias here, a TypedDict in Kopf: both only describe raw dicts in annotations",
    'DaemonStopped': "a class here (isinstance works), a generic alias of a class in Kopf",
    'AsyncDaemonStopperChecker': "a class here (isinstance works), a generic alias of a class in Kopf",
    'SyncDaemonStopperChecker': "a class here (isinstance works), a generic alias of a class in Kopf",
    'WebhookServerProtocol': "a typing.Protocol class here, a callable type alias in Kopf: "
                             "both only describe what settings.admission.server accepts",
}


def kind(obj):
    if inspect.ismodule(obj):
        return 'module'
    if inspect.isclass(obj):
        return 'class'
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return 'function'
    if isinstance(obj, enum.Enum):
        return 'value'
    return 'alias'


@pytest.mark.parametrize('module, names, pending, left_out', [
    (kopf, KOPF_NAMES, PENDING, LEFT_OUT),
    (kopf.on, KOPF_ON_NAMES, PENDING_ON, LEFT_OUT_ON),
], ids=['kopf', 'kopf.on'])
def test_every_name_of_kopf_is_here_or_accounted_for(module, names, pending, left_out):
    missing = sorted(set(names) - set(dir(module)) - set(pending) - set(left_out))
    assert not missing, f"{module.__name__} lacks Kopf's public names: {missing}"


@pytest.mark.parametrize('module, pending', [(kopf, PENDING), (kopf.on, PENDING_ON)], ids=['kopf', 'kopf.on'])
def test_pending_names_are_still_pending(module, pending):
    landed = sorted(name for name in pending if hasattr(module, name))
    assert not landed, f"{module.__name__}.{landed} now exist: remove them from PENDING in {__file__}"


@pytest.mark.parametrize('module, names', [(kopf, KOPF_NAMES), (kopf.on, KOPF_ON_NAMES)], ids=['kopf', 'kopf.on'])
def test_names_are_the_same_kind_of_object_as_in_kopf(module, names):
    different = {
        name: (expected, kind(getattr(module, name)))
        for name, expected in names.items()
        if hasattr(module, name) and name not in OTHER_KINDS and kind(getattr(module, name)) != expected
    }
    assert not different, f"Not the same kind as in Kopf (expected, actual): {different}"


def test_the_lists_account_only_for_kopfs_names():
    assert set(PENDING) <= set(KOPF_NAMES)
    assert set(PENDING_ON) <= set(KOPF_ON_NAMES)
    assert set(LEFT_OUT) <= set(KOPF_NAMES)
    assert set(OTHER_KINDS) <= set(KOPF_NAMES)
    assert not set(PENDING) & set(LEFT_OUT)


def test_everything_exported_is_in_all():
    exported = {name for name in KOPF_NAMES if hasattr(kopf, name)}
    assert exported <= set(kopf.__all__)
