"""
The operator's own start, as a Kopf user writes it: startup handlers that retry and change the settings,
a login handler that gives its own HTTP session (as Kopf documents it), a cleanup handler, and the memo.

Every call is recorded as a JSON line in ``$E2E_CALLS``.
"""
import json
import os
from typing import Any

import aiohttp

import kopf

CALLS = os.environ['E2E_CALLS']


def record(handler: str, name: str, **details: Any) -> None:
    with open(CALLS, 'a') as f:
        f.write(json.dumps({'handler': handler, 'name': name, **details}) + '\n')


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, retry: int, memo: kopf.Memo, **_: Any) -> None:
    record('startup', '', retry=retry)
    if retry < 1:
        raise kopf.TemporaryError("Not ready to start yet.", delay=0.3)
    settings.persistence.finalizer = 'compat.kopf.dev/finalizer'
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix='compat.kopf.dev')
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix='compat.kopf.dev',
                                                                            key='last-state')
    settings.watching.server_timeout = 10
    memo.greeting = 'hello'


@kopf.on.login()
async def login(**kwargs: Any) -> Any:
    record('login', '')
    credentials = kopf.login_with_kubeconfig(**kwargs)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=credentials.as_ssl_context()),
        headers={**credentials.as_http_headers(), 'User-Agent': 'compat-operator'},
    )
    return kopf.AiohttpSession(aiohttp_session=session, server=credentials.server,
                               default_namespace=credentials.default_namespace)


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    record('cleanup', '', greeting=memo.get('greeting'))


@kopf.on.create('kopfcompats')
def created(name: str, retry: int, memo: kopf.Memo, **_: Any) -> Any:
    record('created', name, retry=retry, greeting=memo.greeting)
    if retry < 1:
        raise kopf.TemporaryError("Once more.", delay=1.5)
    return 'created'


@kopf.on.delete('kopfcompats')
def deleted(name: str, **_: Any) -> None:
    record('deleted', name)
